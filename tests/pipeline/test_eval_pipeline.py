"""Pipeline(drop_remainder=False, pad_remainder=True): an evaluation epoch that yields every
row of the source once, in batches of one shape, the filling rows marked in "row_mask";
per host and global, with workers, resumed, and on 2 processes as on 1."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
from _support import eval_checks
from _support.eval_checks import BATCH, padded_epoch, rows_seen, source
from _support.processes import still_running
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from datarax.distributed import launch_local
from datarax.pipeline import Pipeline

ROWS_LEFT = (0, 1, 7, BATCH - 1)  # rows of the last batch, 0 when none is partial


def _host(batch: dict[str, Any]) -> dict[str, np.ndarray]:
    return {key: np.asarray(leaf) for key, leaf in batch.items()}


def _check_epoch(batches: list[dict[str, np.ndarray]], length: int) -> None:
    """One padded epoch over `source(length)`: every row once among the rows the mask
    keeps, every batch of one shape, filling only at the end, repeating its batch's rows."""
    assert len(batches) == -(-length // BATCH)
    shapes = {key: leaf.shape for key, leaf in batches[0].items()}
    assert shapes["row_mask"] == (BATCH,) and batches[0]["row_mask"].dtype == np.bool_
    for batch in batches:
        assert {key: leaf.shape for key, leaf in batch.items()} == shapes
        np.testing.assert_array_equal(batch["x"][:, 0], batch["id"])  # whole rows repeat
    kept = np.concatenate([batch["id"][batch["row_mask"]] for batch in batches])
    assert sorted(kept.tolist()) == list(range(length))
    assert all(batch["row_mask"].all() for batch in batches[:-1])
    last, real = batches[-1], length - (len(batches) - 1) * BATCH
    np.testing.assert_array_equal(last["row_mask"], np.arange(BATCH) < real)
    np.testing.assert_array_equal(last["id"], last["id"][np.arange(BATCH) % real])


@pytest.mark.parametrize("left", ROWS_LEFT)
@pytest.mark.parametrize("shuffle", [False, True])
def test_global_epoch_yields_every_row_once_in_full_batches(
    mesh_1d: Mesh, left: int, shuffle: bool
) -> None:
    sharding = NamedSharding(mesh_1d, P("data"))
    length = 4 * BATCH + left
    pipeline = Pipeline(
        source=source(length),
        stages=[rows_seen],
        batch_size=BATCH,
        shuffle=shuffle,
        rngs=nnx.Rngs(1),
        drop_remainder=False,
        pad_remainder=True,
        sharding=sharding,
    )
    placed = list(pipeline)
    batches = [_host(batch) for batch in placed]
    assert pipeline.num_batches == len(batches)
    _check_epoch(batches, length)
    order = pipeline.epoch_order(0)
    order = np.arange(length) if order is None else order
    for k, (batch, host) in enumerate(zip(placed, batches, strict=True)):
        assert batch["row_mask"].sharding == batch["id"].sharding  # placed like the rows
        assert (host["seen"] == BATCH).all()  # the stage saw whole batches, the last too
        real = host["id"][host["row_mask"]]
        np.testing.assert_array_equal(real, order[k * BATCH : k * BATCH + len(real)])


@pytest.mark.parametrize("left", ROWS_LEFT)
@pytest.mark.parametrize("shuffle", [False, True])
def test_per_host_epoch_yields_every_row_once_in_full_batches(left: int, shuffle: bool) -> None:
    length = 2 * BATCH + left
    pipeline = Pipeline(
        source=source(length),
        stages=[rows_seen],
        batch_size=BATCH,
        shuffle=shuffle,
        rngs=nnx.Rngs(2),
        drop_remainder=False,
        pad_remainder=True,
    )
    batches = list(pipeline)
    assert all(isinstance(batch["row_mask"], np.ndarray) for batch in batches)
    assert all((batch["seen"] == BATCH).all() for batch in batches)
    _check_epoch(batches, length)


def test_workers_give_the_padded_batches_of_workers_0() -> None:
    sharding = NamedSharding(Mesh(np.array(jax.devices()), ("data",)), P("data"))
    data = source(3 * BATCH + 7)
    here = [_host(b) for b in padded_epoch(data, sharding, stages=[rows_seen])]
    in_workers = padded_epoch(data, sharding, stages=[rows_seen], workers=2)
    there = [_host(b) for b in in_workers]
    assert in_workers.workers == 2
    assert len(there) == len(here)
    for ours, theirs in zip(there, here, strict=True):
        assert ours.keys() == theirs.keys()
        for key in ours:
            np.testing.assert_array_equal(ours[key], theirs[key])
    _check_epoch(there, 3 * BATCH + 7)


@pytest.mark.parametrize("spec", [P("data"), P("data", "model"), P()])
def test_the_mask_is_placed_like_the_rows_on_a_2d_mesh(mesh_2d: Mesh, spec: P) -> None:
    length = 2 * BATCH + 7
    data = source(length)
    data = {"x": data["x"]} if len(spec) > 1 else data  # a rank-2 spec needs rank-2 leaves
    pipeline = padded_epoch(data, NamedSharding(mesh_2d, spec))
    batches = list(pipeline)
    for batch in batches:
        mask = batch["row_mask"]
        assert mask.sharding.mesh == mesh_2d and mask.sharding.spec == P(*spec[:1])
        for shard in mask.addressable_shards:  # each device holds the rows its x holds
            rows = next(s for s in batch["x"].addressable_shards if s.device == shard.device)
            assert shard.index[0] == rows.index[0]
    host = [{**_host(b), "id": np.asarray(b["x"])[:, 0].astype(np.int32)} for b in batches]
    _check_epoch(host, length)


def test_a_state_resumes_into_the_padded_last_batch(mesh_1d: Mesh) -> None:
    length = 3 * BATCH + 5
    data = source(length)
    eight = NamedSharding(mesh_1d, P("data"))
    four = NamedSharding(Mesh(np.array(jax.devices()[:4]), ("data",)), P("data"))
    uninterrupted = padded_epoch(data, eight)
    reference = [_host(b) for _ in range(2) for b in uninterrupted]
    first = padded_epoch(data, eight)
    seen = [_host(b) for b in itertools.islice(iter(first), 3)]
    state = first.get_state()
    assert state["batch_index"] == 3 == first.num_batches - 1
    resumed = padded_epoch(data, four)
    resumed.set_state(state)
    rest = [_host(b) for b in resumed] + [_host(b) for b in resumed]
    assert len(seen + rest) == len(reference) == 8
    for ours, theirs in zip(seen + rest, reference, strict=True):
        for key in ("id", "x", "row_mask"):
            np.testing.assert_array_equal(ours[key], theirs[key])


def test_bad_options_are_refused() -> None:
    data = source(20)
    for value in (1, "yes", None):
        with pytest.raises(TypeError, match=r"pad_remainder must be True or False"):
            Pipeline(source=data, batch_size=8, drop_remainder=False, pad_remainder=value)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"drop_remainder=True drops .*drop_remainder=False"):
        Pipeline(source=data, batch_size=8, pad_remainder=True)
    pipeline = Pipeline(source=data, batch_size=8, drop_remainder=False, pad_remainder=True)
    with pytest.raises(AttributeError, match=r"Pipeline\.pad_remainder is fixed"):
        pipeline.pad_remainder = False
    sharding = NamedSharding(Mesh(np.array(jax.devices()), ("data",)), P("data"))
    with pytest.raises(ValueError, match=r"keeps 4 rows: .*multiple of 8.*pad_remainder=True"):
        Pipeline(source=data, batch_size=8, drop_remainder=False, sharding=sharding)


@pytest.mark.parametrize("placed", [False, True])
def test_a_batch_that_cannot_carry_the_mask_is_refused_at_the_first_batch(placed: bool) -> None:
    mesh = Mesh(np.array(jax.devices()), ("data",))
    sharding = NamedSharding(mesh, P("data")) if placed else None
    data = source(20)
    kept = {key: leaf.copy() for key, leaf in data.items()}
    not_a_dict = Pipeline(
        source=data,
        stages=[lambda b: b["x"]],
        batch_size=8,
        drop_remainder=False,
        pad_remainder=True,
        sharding=sharding,
    )
    with pytest.raises(
        TypeError, match=r"must be a dict after the stages; got (ndarray|ArrayImpl)"
    ):
        next(iter(not_a_dict))
    masked = {**data, "row_mask": np.ones(20, bool)}
    has_mask = Pipeline(
        source=masked, batch_size=8, drop_remainder=False, pad_remainder=True, sharding=sharding
    )
    with pytest.raises(ValueError, match=r"has one already \(keys \['id', 'row_mask', 'x'\]\)"):
        next(iter(has_mask))
    for key, leaf in data.items():
        np.testing.assert_array_equal(leaf, kept[key])
    assert masked["row_mask"].all()


def _children() -> set[int]:
    """The processes this one started that still exist (empty where /proc cannot say)."""
    pids: set[int] = set()
    for listing in Path("/proc/self/task").glob("*/children"):
        pids.update(int(pid) for pid in listing.read_text().split())
    return pids


@pytest.mark.multihost
def test_two_hosts_make_the_padded_batches_of_one() -> None:
    before = _children()
    runs = launch_local(
        eval_checks.padded_epoch_checks, num_processes=2, devices_per_process=4, timeout_s=120
    )
    assert still_running(_children() - before) == []
    one_host = NamedSharding(Mesh(np.array(jax.devices()), ("data",)), P("data"))
    seen_per_layout = {"all_hosts": 8, "interleaved": 8, "model_across_hosts": 16}
    for run in runs:
        assert len(run.value) == 4 * len(eval_checks.LENGTHS)
        for key, result in run.value.items():
            layout, length = key.split("/")
            reference = [_host(b) for b in padded_epoch(source(int(length)), one_host)]
            assert result["num_batches"] == len(reference) == len(result["batches"])
            gathered = []
            for got, want in zip(result["batches"], reference, strict=True):
                assert got["mask_spec"] == str(P("data")), key
                np.testing.assert_array_equal(got["row_mask"], want["row_mask"])
                np.testing.assert_array_equal(got["x"], want["x"])
                if layout in seen_per_layout:  # a host's stage sees its whole part
                    np.testing.assert_array_equal(got["id"], want["id"])
                    assert set(np.ravel(got["seen"])) == {seen_per_layout[layout]}, key
                got = {name: np.asarray(got[name]) for name in ("x", "row_mask")}
                gathered.append({**got, "id": got["x"][:, 0].astype(np.int32)})
            _check_epoch(gathered, int(length))
