"""Pipeline(sharding=...): one global batch, defined the same for any number of devices.

Here one process holds every device; test_multiprocess.py runs it on 2 and 4 hosts.
"""

from __future__ import annotations

import itertools

import jax
import numpy as np
import pytest
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from datarax.pipeline import Checkpoints, Pipeline
from datarax.sharding import ArraySharder

ROWS = 48


def _source() -> dict[str, np.ndarray]:
    return {"id": np.arange(ROWS, dtype=np.int32), "x": np.arange(ROWS * 2.0).reshape(ROWS, 2)}


def _pipeline(sharding: NamedSharding, **options) -> Pipeline:
    settings = {"batch_size": 16, "shuffle": True, "rngs": nnx.Rngs(3)} | options
    return Pipeline(source=_source(), sharding=sharding, **settings)


def test_global_batches_are_epoch_order_slices_placed_with_the_sharding(mesh_2d: Mesh) -> None:
    sharding = NamedSharding(mesh_2d, P("data"))
    seen_on_host = []
    pipeline = _pipeline(sharding, stages=[lambda b: seen_on_host.append(type(b["x"])) or b])
    order = pipeline.epoch_order(0)
    batches = list(pipeline)
    assert len(batches) == 3 and seen_on_host == [np.ndarray] * 3
    for k, batch in enumerate(batches):
        expected = ArraySharder().shard(_source(), sharding)  # placement reference
        assert batch["id"].sharding == expected["id"].sharding
        np.testing.assert_array_equal(np.asarray(batch["id"]), order[16 * k : 16 * (k + 1)])
        np.testing.assert_array_equal(
            np.asarray(batch["x"])[:, 0], 2.0 * order[16 * k : 16 * (k + 1)]
        )


def test_device_stages_run_on_the_global_arrays(mesh_1d: Mesh) -> None:
    sharding = NamedSharding(mesh_1d, P("data"))
    pipeline = _pipeline(sharding, device_stages=[jax.jit(lambda b: {**b, "x": b["x"] * 10})])
    batch = next(iter(pipeline))
    assert isinstance(batch["x"], jax.Array) and batch["x"].sharding.spec[0] == "data"
    np.testing.assert_array_equal(np.asarray(batch["x"])[:, 0], 20.0 * pipeline.epoch_order(0)[:16])
    with pytest.raises(ValueError, match="device_stages run on global batches"):
        Pipeline(source=_source(), batch_size=8, device_stages=[lambda b: b])


def test_the_state_resumes_on_another_device_count(mesh_1d: Mesh) -> None:
    full = NamedSharding(mesh_1d, P("data"))
    half = NamedSharding(Mesh(np.array(jax.devices()[:4]), ("data",)), P("data"))
    uninterrupted = _pipeline(full)
    reference = [np.asarray(b["id"]).tolist() for _ in range(2) for b in uninterrupted]
    first = _pipeline(full)
    seen = [np.asarray(b["id"]).tolist() for b in itertools.islice(iter(first), 2)]
    resumed = _pipeline(half)
    resumed.set_state(first.get_state())
    rest = [np.asarray(b["id"]).tolist() for b in resumed]
    rest += [np.asarray(b["id"]).tolist() for b in resumed]
    assert seen + rest == reference and len(rest) == 4


def test_a_global_batch_that_does_not_fit_the_sharding_is_refused(mesh_1d: Mesh) -> None:
    sharding = NamedSharding(mesh_1d, P("data"))
    with pytest.raises(ValueError, match=r"global batch of 12 rows .*multiple of 8"):
        _pipeline(sharding, batch_size=12)
    with pytest.raises(ValueError, match=r"global batch of 4 rows .*multiple of 8"):
        Pipeline(
            source={"x": np.arange(52)}, batch_size=16, sharding=sharding, drop_remainder=False
        )


def test_pipeline_and_model_resume_from_one_checkpoint(mesh_1d: Mesh, tmp_path) -> None:
    sharding = NamedSharding(mesh_1d, P("data"))
    weights = {"w": jax.device_put(np.arange(4.0), NamedSharding(mesh_1d, P()))}
    pipeline = _pipeline(sharding)
    iterator = iter(pipeline)
    next(iterator)
    with Checkpoints(tmp_path) as checkpoints:
        checkpoints.save(7, model=weights, pipeline=pipeline)
        expected_next = np.asarray(next(iterator)["id"])
        again = _pipeline(sharding)
        restored, step = checkpoints.restore(model=weights, pipeline=again)
    assert step == 7
    np.testing.assert_array_equal(np.asarray(restored["w"]), np.arange(4.0))
    np.testing.assert_array_equal(np.asarray(next(iter(again))["id"]), expected_next)
    with (
        Checkpoints(tmp_path / "empty") as empty,
        pytest.raises(FileNotFoundError, match="No checkpoint"),
    ):
        empty.restore(model=weights)
