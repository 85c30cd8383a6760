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
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import datarax
from datarax._compat import single_device_sharding
from datarax.errors import HostMismatchError, LeafShapeError, LeafTypeError
from datarax.sharding import ArraySharder, JaxProcessSharder
from datarax.sharding import _global_arrays as global_arrays
from datarax.sharding._batch_agreement import check_agreement


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
    sharding = single_device_sharding(jax.devices()[3])
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
    with pytest.raises(LeafShapeError) as caught:
        global_arrays.make_global({"x": np.zeros((12, 2))}, sharding)
    assert (caught.value.leaf, caught.value.shape, caught.value.dim) == ("batch['x']", (12, 2), 0)
    assert str(caught.value).startswith("batch['x'] (shape (12, 2) on this host): Dimension 0")
    assert "multiple of 8" in str(caught.value)
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
        "sharding": "P('data',) on mesh {'data': 2, 'model': 2}",
        "leaves": [{"dtype": dtype, "local": local, "global": global_shape, "error": None}],
        "digests": [digests or {}],
    }


def _leaves(mesh_2d: Mesh) -> list[tuple[str, NamedSharding]]:
    return [("batch['x']", NamedSharding(mesh_2d, P("data")))]


def test_hosts_that_agree_pass(mesh_2d: Mesh) -> None:
    same = _message([16, 3], [16, 3], {"0:8,0:3": "aa"})
    check_agreement([same, same, _message([8, 3], [16, 3])], _leaves(mesh_2d))


def test_hosts_whose_rows_make_different_global_batches_are_named(mesh_2d: Mesh) -> None:
    messages = [_message([8, 3], [16, 3]), _message([8, 3], [8, 3])]
    with pytest.raises(HostMismatchError) as caught:
        check_agreement(messages, _leaves(mesh_2d))
    error = caught.value
    assert (error.what, error.leaf, error.values) == (
        "global shape",
        "batch['x']",
        [(16, 3), (8, 3)],
    )
    assert error.processes == (0, 1)  # two hosts, two answers: neither is the odd one out
    message = str(error)
    assert "row counts of batch['x'] that make different global arrays" in message
    assert "shape (8, 3), making (16, 3) on process 0" in message
    assert "shape (8, 3), making (8, 3) on process 1" in message
    assert "shard_data(data, sharding=sharding)" in message


def test_the_host_at_odds_is_named_among_three(mesh_2d: Mesh) -> None:
    """Of three hosts, the one whose batch differs from the other two is at odds."""
    leaves = _leaves(mesh_2d)
    rows = [_message([8, 3], [16, 3]), _message([4, 3], [8, 3]), _message([8, 3], [16, 3])]
    with pytest.raises(HostMismatchError) as caught:
        check_agreement(rows, leaves)
    assert caught.value.processes == (1,)
    holding_none = [_message([8, 3], [16, 3]), _message([0, 3], None), _message([4, 3], [8, 3])]
    with pytest.raises(HostMismatchError) as caught:
        check_agreement(holding_none, leaves)
    assert caught.value.values == [(16, 3), None, (8, 3)]
    assert caught.value.processes == (0, 2)  # a host that holds none is never at odds
    dtypes = [_message([8], [16], dtype=d) for d in ("float32", "int32", "float32")]
    with pytest.raises(HostMismatchError) as caught:
        check_agreement(dtypes, leaves)
    assert (caught.value.what, caught.value.processes) == ("dtype", (1,))


def test_replicas_with_different_data_are_named(mesh_2d: Mesh) -> None:
    messages = [
        _message([16, 3], [16, 3], {"0:8,0:3": "aa", "8:16,0:3": "bb"}),
        _message([16, 3], [16, 3], {"0:8,0:3": "aa", "8:16,0:3": "cc"}),
    ]
    with pytest.raises(HostMismatchError) as caught:
        check_agreement(messages, _leaves(mesh_2d))
    error = caught.value
    assert (error.what, error.leaf, error.values, error.processes) == (
        "replicated data",
        "batch['x']",
        ["bb", "cc"],
        (0, 1),
    )
    message = str(error)
    assert message.startswith(
        "Processes [0, 1] all hold rows 8-15 of batch['x'] (of the 16-row global batch"
    )
    assert "passed different data" in message and "shard_data(data, sharding=sharding)" in message


def test_other_disagreements_are_named(mesh_2d: Mesh) -> None:
    leaves = _leaves(mesh_2d)
    with pytest.raises(HostMismatchError) as caught:
        check_agreement([_message([8], [16]), _message([8], [16], dtype="int32")], leaves)
    assert (caught.value.what, caught.value.values) == ("dtype", ["float32", "int32"])
    assert "dtype of batch['x']: float32 on process 0, int32 on process 1" in str(caught.value)
    with pytest.raises(HostMismatchError) as caught:
        check_agreement(
            [_message([8], [16]), _message([8], [16], tree="PyTreeDef({'y': *})")], leaves
        )
    assert (caught.value.what, caught.value.leaf) == ("structure", None)
    assert caught.value.values == ["PyTreeDef({'x': *})", "PyTreeDef({'y': *})"]
    assert str(caught.value).startswith("Hosts passed batches of different structure: PyTreeDef")


def test_an_error_found_on_one_host_is_raised_on_every_host(mesh_2d: Mesh) -> None:
    """The error travels whole: its type and fields, its message prefixed by its host."""
    found = global_arrays._plan_leaf("batch['x']", "cat", NamedSharding(mesh_2d, P("data")))
    failed = _message([8], None)
    failed["leaves"][0]["error"] = found.error
    with pytest.raises(LeafTypeError) as caught:
        check_agreement([_message([8], [16]), failed], _leaves(mesh_2d))
    assert caught.value.leaf == "batch['x']"
    assert str(caught.value).startswith("On process 1: batch['x'] is a str")
    with pytest.raises(LeafTypeError, match=r"^batch\['x'\] is a str"):  # found here: as it is
        check_agreement([failed, _message([8], [16])], _leaves(mesh_2d))
