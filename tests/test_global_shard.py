"""JaxProcessSharder.shard on one process, and the cross-host checks it relies on.

The multi-process behaviour is in test_multiprocess.py; here one process plays
every host, so `shard` must give exactly what `ArraySharder` gives.
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

from datarax.sharding import ArraySharder, JaxProcessSharder, _global


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
    batch = {"image": _batch()["image"]}
    sharding = NamedSharding(mesh_2d, spec)
    _assert_same(_global.make_global(batch, sharding), ArraySharder().shard(batch, sharding))


def test_other_shardings_work_on_one_process() -> None:
    sharding = SingleDeviceSharding(jax.devices()[3])
    out = JaxProcessSharder().shard({"x": np.arange(5)}, sharding)
    assert out["x"].sharding == sharding
    np.testing.assert_array_equal(np.asarray(out["x"]), np.arange(5))


def test_a_pretend_host_cannot_build_global_arrays(mesh_1d: Mesh) -> None:
    sharder = JaxProcessSharder(process_index=1, process_count=4)
    with pytest.raises(ValueError, match=r"plays host 1 of 4, but it runs as process 0 of 1"):
        sharder.shard({"x": np.arange(8)}, NamedSharding(mesh_1d, P("data")))


def test_bad_inputs_name_the_leaf(mesh_1d: Mesh) -> None:
    sharding = NamedSharding(mesh_1d, P("data"))
    sharder = JaxProcessSharder()
    with pytest.raises(TypeError, match="NamedSharding"):
        sharder.shard({"x": np.arange(8)}, P("data"))
    with pytest.raises(TypeError, match=r"batch\['name'\] is a str"):
        sharder.shard({"name": "cat", "x": np.arange(8)}, sharding)
    with pytest.raises(ValueError, match=r"batch\['x'\] has 10 rows .*multiple of 8"):
        sharder.shard({"x": np.arange(10)}, sharding)
    for builder in (sharder.shard, _global.make_global):
        with pytest.raises(TypeError, match="NamedSharding"):
            builder({"x": np.arange(8)}, mesh_1d)


def test_global_plan_errors_name_the_leaf(mesh_1d: Mesh) -> None:
    sharding = NamedSharding(mesh_1d, P("data"))
    with pytest.raises(ValueError, match=r"batch\['x'\] has 12 rows on this host .*multiple of 8"):
        _global.make_global({"x": np.zeros((12, 2))}, sharding)
    with pytest.raises(ValueError, match=r"batch\['y'\] has shape \(4,\) \(rank 1\)"):
        _global.make_global({"y": np.zeros(4)}, NamedSharding(mesh_1d, P(None, "data")))
    with pytest.raises(ValueError, match="ragged"):
        _global.make_global({"a": np.zeros(8), "b": np.zeros(16)}, sharding)


def test_the_check_runs_once_per_signature(mesh_1d: Mesh, monkeypatch: pytest.MonkeyPatch) -> None:
    sharding = NamedSharding(mesh_1d, P("data"))
    texts: list[str] = []

    def counting_exchange(text: str) -> list[str]:
        texts.append(text)
        return [text]

    monkeypatch.setattr(_global, "exchange", counting_exchange)
    monkeypatch.setattr(_global, "_plans", {})
    for _ in range(3):
        _global.make_global({"x": np.zeros((8, 3), np.float32)}, sharding)
    _global.make_global({"x": np.zeros((16, 3), np.float32)}, sharding)
    assert len(texts) == 2
    assert json.loads(texts[1])["leaves"] == [["batch['x']", [16, 3], "float32"]]


def test_host_signature_lists_structure_shapes_dtypes(mesh_1d: Mesh) -> None:
    batch = {"image": np.zeros((8, 2), np.uint8), "label": 3, "name": "cat"}
    signature = _global.host_signature(batch, NamedSharding(mesh_1d, P("data")))
    assert signature["leaves"] == [
        ["batch['image']", [8, 2], "uint8"],
        ["batch['label']", [], "int"],
        ["batch['name']", None, "str"],
    ]
    assert "'image'" in signature["tree"]
    assert signature["sharding"] == "NamedSharding(mesh={'data': 8}, spec=('data',))"
    assert _global.exchange("only me") == ["only me"]


def _signature(shape: list[int], dtype: str = "float32", key: str = "x") -> dict[str, Any]:
    return {
        "tree": f"PyTreeDef({{'{key}': *}})",
        "leaves": [[f"batch['{key}']", shape, dtype]],
        "sharding": "NamedSharding(mesh={'data': 4}, spec=PartitionSpec('data',))",
    }


def test_hosts_that_agree_pass() -> None:
    _global.check_hosts_agree([_signature([4, 3])] * 3)


def test_hosts_that_disagree_are_named() -> None:
    with pytest.raises(ValueError) as caught:
        _global.check_hosts_agree([_signature([4, 3]), _signature([4, 3]), _signature([3, 3])])
    message = str(caught.value)
    assert message.startswith("Hosts disagree on batch['x']: shape (4, 3) (float32) on process 0")
    assert "shape (3, 3) (float32) on process 2" in message
    assert "same per-host batch size" in message
    with pytest.raises(ValueError, match=r"\(int32\) on process 1"):
        _global.check_hosts_agree([_signature([4]), _signature([4], "int32")])
    with pytest.raises(ValueError, match=r"different structure: PyTreeDef\(\{'x': \*\}\) on proc"):
        _global.check_hosts_agree([_signature([4]), _signature([4], key="y")])
    other = _signature([4]) | {"sharding": "SingleDeviceSharding"}
    with pytest.raises(ValueError, match="SingleDeviceSharding on process 1"):
        _global.check_hosts_agree([_signature([4]), other])
