"""JaxProcessSharder.shard on one process, and the cross-host agreement it relies on.

The multi-process behaviour is in test_multiprocess.py; here one process plays
every host, so `shard` must give exactly what `ArraySharder` gives, and the
agreement check is fed the messages several hosts would have sent.
"""

from __future__ import annotations

import json
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, SingleDeviceSharding
from jax.sharding import PartitionSpec as P

import datarax
from datarax.sharding import ArraySharder, JaxProcessSharder
from datarax.sharding import _global_arrays as global_arrays


def _batch() -> dict[str, Any]:
    return {
        "image": np.arange(16 * 4 * 6, dtype=np.float32).reshape(16, 4, 6),
        "label": np.arange(16, dtype=np.int32),
        "scale": 2.0,
        "nothing": None,
    }


def _assert_same(ours: Any, theirs: Any) -> None:
    assert jax.tree.structure(ours) == jax.tree.structure(theirs)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        assert a.sharding == b.sharding
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("as_jax", [False, True], ids=["numpy", "jax"])
@pytest.mark.parametrize("spec", [P("data"), P()])
def test_one_process_equals_array_sharder_1d(mesh_1d: Mesh, as_jax: bool, spec: P) -> None:
    batch = _batch()
    if as_jax:
        batch["image"] = jnp.asarray(batch["image"])
    sharding = NamedSharding(mesh_1d, spec)
    _assert_same(JaxProcessSharder().shard(batch, sharding), ArraySharder().shard(batch, sharding))


@pytest.mark.parametrize("spec", [P("data"), P("data", None, "model"), P(("data", "model"))])
def test_one_process_equals_array_sharder_2d(mesh_2d: Mesh, spec: P) -> None:
    batch = {"image": _batch()["image"]}
    sharding = NamedSharding(mesh_2d, spec)
    _assert_same(JaxProcessSharder().shard(batch, sharding), ArraySharder().shard(batch, sharding))


@pytest.mark.parametrize("spec", [P("data"), P("data", None, "model")])
def test_global_builder_on_one_process_equals_array_sharder(mesh_2d: Mesh, spec: P) -> None:
    batch = {"image": _batch()["image"], "scale": np.float32(3)}
    sharding = NamedSharding(mesh_2d, spec)
    _assert_same(global_arrays.make_global(batch, sharding), ArraySharder().shard(batch, sharding))


def test_other_shardings_work_on_one_process() -> None:
    sharding = SingleDeviceSharding(jax.devices()[3])
    out = JaxProcessSharder().shard({"x": np.arange(5)}, sharding)
    assert out["x"].sharding == sharding
    np.testing.assert_array_equal(np.asarray(out["x"]), np.arange(5))
    out = global_arrays.make_global({"x": np.arange(5)}, sharding)
    np.testing.assert_array_equal(np.asarray(out["x"]), np.arange(5))


def test_a_pretend_host_cannot_build_global_arrays_or_use_a_sharding(mesh_1d: Mesh) -> None:
    sharder = JaxProcessSharder(process_index=1, process_count=4)
    sharding = NamedSharding(mesh_1d, P("data"))
    with pytest.raises(ValueError, match=r"plays host 1 of 4, but it runs as process 0 of 1"):
        sharder.shard({"x": np.arange(8)}, sharding)
    data = {"x": np.arange(8)}
    with pytest.raises(ValueError, match=r"shard_data\(data, sharding=...\) needs the real host"):
        sharder.shard_data(data, sharding)
    with pytest.raises(ValueError, match=r"RowLedger\(sharding, num_rows, host_of=...\)"):
        sharder.shard_data(data, sharding)
    np.testing.assert_array_equal(data["x"], np.arange(8))


def test_bad_inputs_name_the_leaf(mesh_1d: Mesh) -> None:
    sharding = NamedSharding(mesh_1d, P("data"))
    sharder = JaxProcessSharder()
    with pytest.raises(TypeError, match="NamedSharding"):
        sharder.shard({"x": np.arange(8)}, P("data"))
    with pytest.raises(TypeError, match=r"batch\['name'\] is a str"):
        sharder.shard({"name": "cat", "x": np.arange(8)}, sharding)
    with pytest.raises(ValueError, match=r"batch\['x'\] has 10 rows .*multiple of 8"):
        sharder.shard({"x": np.arange(10)}, sharding)
    for builder in (sharder.shard, global_arrays.make_global):
        with pytest.raises(TypeError, match="NamedSharding"):
            builder({"x": np.arange(8)}, mesh_1d)


def test_global_plan_errors_name_the_leaf(mesh_1d: Mesh) -> None:
    sharding = NamedSharding(mesh_1d, P("data"))
    with pytest.raises(ValueError, match=r"batch\['x'\] \(shape \(12, 2\) on this host\)"):
        global_arrays.make_global({"x": np.zeros((12, 2))}, sharding)
    with pytest.raises(ValueError, match=r"multiple of 8"):
        global_arrays.make_global({"x": np.zeros((12, 2))}, sharding)
    with pytest.raises(ValueError, match=r"batch\['y'\] has shape \(4,\) \(rank 1\)"):
        global_arrays.make_global({"y": np.zeros(4)}, NamedSharding(mesh_1d, P(None, "data")))
    with pytest.raises(TypeError, match=r"batch\['s'\] is a str"):
        global_arrays.make_global({"s": "cat"}, sharding)


def test_the_check_runs_once_per_signature(mesh_1d: Mesh, monkeypatch: pytest.MonkeyPatch) -> None:
    sharding = NamedSharding(mesh_1d, P("data"))
    texts: list[str] = []

    def counting_exchange(text: str, what: str) -> list[str]:
        texts.append(text)
        return [text]

    monkeypatch.setattr(global_arrays, "exchange", counting_exchange)
    checked = global_arrays.CheckedSignatures()
    for _ in range(3):
        global_arrays.make_global({"x": np.zeros((8, 3), np.float32)}, sharding, checked)
    global_arrays.make_global({"x": np.zeros((16, 3), np.float32)}, sharding, checked)
    assert len(texts) == 2
    leaf = json.loads(texts[1])["leaves"][0]
    assert (leaf["local"], leaf["global"], leaf["dtype"]) == ([16, 3], [16, 3], "float32")
    for _ in range(2):
        global_arrays.make_global(
            {"x": np.zeros((8, 3), np.float32)}, sharding, checked, every_batch=True
        )
    assert len(texts) == 4
    # The marks are the caller's: a second caller (another sharder) checks again, and
    # emptying the library's caches changes neither.
    datarax.clear_caches()
    global_arrays.make_global({"x": np.zeros((8, 3), np.float32)}, sharding, checked)
    assert len(texts) == 4
    global_arrays.make_global(
        {"x": np.zeros((8, 3), np.float32)}, sharding, global_arrays.CheckedSignatures()
    )
    assert len(texts) == 5


def _message(
    local: list[int],
    global_shape: list[int] | None,
    digests: dict[str, str] | None = None,
    dtype: str = "float32",
    tree: str = "PyTreeDef({'x': *})",
) -> dict[str, Any]:
    return {
        "tree": tree,
        "sharding": "NamedSharding(mesh={'data': 2, 'model': 2}, spec=('data',))",
        "leaves": [{"dtype": dtype, "local": local, "global": global_shape, "error": None}],
        "digests": [digests or {}],
    }


def _plan(mesh_2d: Mesh) -> list[Any]:
    sharding = NamedSharding(mesh_2d, P("data"))
    return [global_arrays._Leaf("batch['x']", sharding, "float32", (16, 3), None, {}, ())]


def test_hosts_that_agree_pass(mesh_2d: Mesh) -> None:
    same = _message([16, 3], [16, 3], {"0:8,0:3": "aa"})
    global_arrays._check_agreement([same, same, _message([8, 3], [16, 3])], _plan(mesh_2d))


def test_hosts_whose_rows_make_different_global_batches_are_named(mesh_2d: Mesh) -> None:
    messages = [_message([8, 3], [16, 3]), _message([8, 3], [8, 3])]
    with pytest.raises(ValueError) as caught:
        global_arrays._check_agreement(messages, _plan(mesh_2d))
    message = str(caught.value)
    assert "row counts of batch['x'] that make different global arrays" in message
    assert "shape (8, 3), making (16, 3) on process 0" in message
    assert "shape (8, 3), making (8, 3) on process 1" in message
    assert "shard_data(data, sharding=sharding)" in message


def test_replicas_with_different_data_are_named(mesh_2d: Mesh) -> None:
    messages = [
        _message([16, 3], [16, 3], {"0:8,0:3": "aa", "8:16,0:3": "bb"}),
        _message([16, 3], [16, 3], {"0:8,0:3": "aa", "8:16,0:3": "cc"}),
    ]
    with pytest.raises(ValueError) as caught:
        global_arrays._check_agreement(messages, _plan(mesh_2d))
    message = str(caught.value)
    assert message.startswith(
        "Processes [0, 1] all hold rows 8-15 of batch['x'] (of the 16-row global batch"
    )
    assert "passed different data" in message and "shard_data(data, sharding=sharding)" in message


def test_other_disagreements_are_named(mesh_2d: Mesh) -> None:
    plan = _plan(mesh_2d)
    with pytest.raises(ValueError, match=r"dtype of batch\['x'\]: float32 on process 0, int32"):
        global_arrays._check_agreement(
            [_message([8], [16]), _message([8], [16], dtype="int32")], plan
        )
    with pytest.raises(ValueError, match=r"different structure: PyTreeDef\(\{'x': \*\}\) on pro"):
        global_arrays._check_agreement(
            [_message([8], [16]), _message([8], [16], tree="PyTreeDef({'y': *})")], plan
        )
    failed = _message([8], None)
    failed["leaves"][0]["error"] = ["TypeError", "batch['x'] is a str"]
    with pytest.raises(TypeError, match=r"^On process 1: batch\['x'\] is a str"):
        global_arrays._check_agreement([_message([8], [16]), failed], plan)
