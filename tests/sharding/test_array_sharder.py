"""ArraySharder: per-device shapes and contents on 1D and 2D meshes, any input kind."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from datarax._compat import single_device_sharding
from datarax.sharding import ArraySharder


def _batch(rows: int = 16) -> dict[str, np.ndarray]:
    return {
        "image": np.arange(rows * 4 * 6, dtype=np.float32).reshape(rows, 4, 6),
        "label": np.arange(rows, dtype=np.int32),
    }


def _assert_placed(leaf: jax.Array, expected: np.ndarray, sharding: NamedSharding) -> None:
    """Every addressable shard holds exactly the slice of `expected` its index names."""
    assert leaf.shape == expected.shape
    assert leaf.dtype == expected.dtype
    assert leaf.sharding.is_equivalent_to(sharding, expected.ndim)
    for shard in leaf.addressable_shards:
        np.testing.assert_array_equal(np.asarray(shard.data), expected[shard.index])


@pytest.mark.parametrize("as_jax", [False, True], ids=["numpy", "jax"])
def test_1d_mesh_splits_rows(mesh_1d: Mesh, as_jax: bool) -> None:
    batch = _batch()
    inputs = jax.tree.map(jnp.asarray, batch) if as_jax else batch
    sharding = NamedSharding(mesh_1d, P("data"))
    out = ArraySharder().shard(inputs, sharding)
    for name in batch:
        _assert_placed(out[name], batch[name], sharding)
        assert {s.data.shape[0] for s in out[name].addressable_shards} == {2}


@pytest.mark.parametrize("as_jax", [False, True], ids=["numpy", "jax"])
@pytest.mark.parametrize(
    ("spec", "image_shard", "label_shard"),
    [
        (P("data"), (4, 4, 6), (4,)),
        (P("data", None, "model"), (4, 4, 3), None),
        (P(("data", "model")), (2, 4, 6), (2,)),
        (P(), (16, 4, 6), (16,)),
    ],
)
def test_2d_mesh_shard_shapes(mesh_2d: Mesh, as_jax: bool, spec, image_shard, label_shard) -> None:
    batch = _batch()
    if label_shard is None:  # a rank-3 spec does not fit the rank-1 labels
        batch = {"image": batch["image"]}
    inputs = jax.tree.map(jnp.asarray, batch) if as_jax else batch
    sharding = NamedSharding(mesh_2d, spec)
    out = ArraySharder().shard(inputs, sharding)
    _assert_placed(out["image"], batch["image"], sharding)
    assert {s.data.shape for s in out["image"].addressable_shards} == {image_shard}
    if label_shard is not None:
        assert {s.data.shape for s in out["label"].addressable_shards} == {label_shard}


def test_partial_replication_keeps_copies_on_model_axis(mesh_2d: Mesh) -> None:
    labels = np.arange(16, dtype=np.int32)
    out = ArraySharder().shard(labels, NamedSharding(mesh_2d, P("data")))
    by_rows: dict[tuple[int, int], int] = {}
    for shard in out.addressable_shards:
        rows = shard.index[0].indices(16)[:2]
        by_rows[rows] = by_rows.get(rows, 0) + 1
    assert by_rows == {(0, 4): 2, (4, 8): 2, (8, 12): 2, (12, 16): 2}


def test_reshards_jax_leaves_between_mesh_types() -> None:
    devices = np.array(jax.devices())
    auto = Mesh(devices, ("data",), axis_types=(jax.sharding.AxisType.Auto,))
    explicit = Mesh(
        devices.reshape(2, 4), ("a", "b"), axis_types=(jax.sharding.AxisType.Explicit,) * 2
    )
    x = np.arange(32.0, dtype=np.float32).reshape(8, 4)
    sharder = ArraySharder()
    on_auto = sharder.shard(x, NamedSharding(auto, P("data")))
    on_explicit = sharder.shard(on_auto, NamedSharding(explicit, P("b", "a")))
    _assert_placed(on_explicit, x, NamedSharding(explicit, P("b", "a")))
    back = sharder.shard(on_explicit, NamedSharding(auto, P()))
    _assert_placed(back, x, NamedSharding(auto, P()))


def test_single_device_sharding_target() -> None:
    device = jax.devices()[3]
    x = jax.device_put(np.arange(8.0), NamedSharding(jax.make_mesh((8,), ("data",)), P("data")))
    out = ArraySharder().shard({"x": x, "y": np.ones(3)}, single_device_sharding(device))
    assert out["x"].devices() == {device} and out["y"].devices() == {device}
    np.testing.assert_array_equal(np.asarray(out["x"]), np.arange(8.0))


def test_none_leaves_scalars_and_nesting(mesh_1d: Mesh) -> None:
    batch = {
        "pair": (np.arange(8), [np.ones((8, 2))]),
        "mask": None,
        "step": 3,
        "scale": np.float32(0.5),
    }
    out = ArraySharder().shard(batch, NamedSharding(mesh_1d, P("data")))
    assert out["mask"] is None
    assert isinstance(out["pair"], tuple) and isinstance(out["pair"][1], list)
    assert out["step"].shape == () and int(out["step"]) == 3
    assert out["step"].sharding.is_fully_replicated
    assert float(out["scale"]) == 0.5
    np.testing.assert_array_equal(np.asarray(out["pair"][0]), np.arange(8))


def test_input_left_unchanged(mesh_1d: Mesh) -> None:
    batch = {**_batch(), "extra": [np.arange(8.0)] * 2}
    before = jax.tree.map(np.copy, batch)
    ArraySharder().shard(
        {k: v for k, v in batch.items() if k != "extra"}, NamedSharding(mesh_1d, P("data"))
    )
    assert jax.tree.structure(batch) == jax.tree.structure(before)
    jax.tree.map(np.testing.assert_array_equal, batch, before)


def test_logical_names_follow_the_rules(mesh_2d: Mesh) -> None:
    sharder = ArraySharder(axis_rules={"batch": "data", "height": None, "width": "model"})
    assert sharder.get_partition_spec(("batch", "height", "width")) == P("data", None, "model")
    image = _batch()["image"]
    out = sharder.shard_with_logical_names(image, mesh_2d, ("batch", None, "width"))
    _assert_placed(out, image, NamedSharding(mesh_2d, P("data", None, "model")))


def test_logical_names_without_rules_are_mesh_axes(mesh_1d: Mesh) -> None:
    assert ArraySharder().get_named_sharding(mesh_1d, ("data",)).spec == P("data")


def test_parallel_transform_runs_per_device_blocks(mesh_1d: Mesh) -> None:
    x = np.arange(32.0).reshape(8, 4)
    sharder = ArraySharder()

    def centre(block):
        return block - block.mean()

    out = sharder.parallel_transform(x, centre, mesh_1d, P("data"))
    np.testing.assert_allclose(np.asarray(out), x - x.mean(axis=1, keepdims=True))
    total = sharder.parallel_transform(
        x, lambda b: jax.lax.psum(b.sum(keepdims=True), "data"), mesh_1d, P("data"), P()
    )
    assert float(np.asarray(total).ravel()[0]) == x.sum()


@pytest.mark.parametrize("source_type", ["auto", "explicit"])
@pytest.mark.parametrize("target_type", ["auto", "explicit"])
def test_reshard_across_meshes_with_other_axis_names(source_type: str, target_type: str) -> None:
    kinds = {"auto": jax.sharding.AxisType.Auto, "explicit": jax.sharding.AxisType.Explicit}
    devices = np.array(jax.devices())
    source = Mesh(devices, ("data",), axis_types=(kinds[source_type],))
    target = Mesh(devices.reshape(2, 4), ("a", "b"), axis_types=(kinds[target_type],) * 2)
    x = np.arange(32.0, dtype=np.float32).reshape(8, 4)
    sharder = ArraySharder()
    placed = sharder.shard(x, NamedSharding(source, P("data")))
    moved = sharder.shard(placed, NamedSharding(target, P("b", "a")))
    _assert_placed(moved, x, NamedSharding(target, P("b", "a")))
    back = sharder.shard(moved, NamedSharding(source, P()))
    _assert_placed(back, x, NamedSharding(source, P()))
