"""Every bad input raises ValueError/TypeError naming the leaf, the numbers and the way out."""

import re

import jax
import numpy as np
import pytest
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from datarax.errors import LeafShapeError, RowCountError
from datarax.pipeline import Pipeline
from datarax.sharding import ArraySharder, JaxProcessSharderModule


def _shard(batch, sharding):
    return ArraySharder().shard(batch, sharding)


def test_rows_not_divisible_by_axis(mesh_1d: Mesh) -> None:
    batch = {"image": np.zeros((10, 3)), "label": np.arange(10)}
    with pytest.raises(LeafShapeError) as info:
        _shard(batch, NamedSharding(mesh_1d, P("data")))
    error = info.value
    assert (error.leaf, error.shape, error.dim, error.axes, error.parts) == (
        "batch['image']",
        (10, 3),
        0,
        ("data",),
        8,
    )
    message = str(error)
    assert "batch['image'] has 10 rows" in message
    assert "mesh axis 'data' (8 devices)" in message
    for way_out in ("multiple of 8", "pad_to_multiple", "drop_remainder=True"):
        assert way_out in message
    assert batch["image"].shape == (10, 3)


def test_inner_dim_not_divisible_names_dimension(mesh_2d: Mesh) -> None:
    with pytest.raises(
        ValueError,
        match=r"batch\['x'\] has size 3 in dimension 1 .*mesh axis 'model' \(2 devices\)",
    ):
        _shard({"x": np.zeros((8, 3))}, NamedSharding(mesh_2d, P("data", "model")))


def test_combined_axes_report_their_product(mesh_2d: Mesh) -> None:
    with pytest.raises(ValueError, match=re.escape("mesh axes ('data', 'model') (8 devices)")):
        _shard(np.zeros(12), NamedSharding(mesh_2d, P(("data", "model"))))


def test_ragged_leading_dims(mesh_1d: Mesh) -> None:
    with pytest.raises(RowCountError, match="slice or pad them to the same number") as info:
        _shard(
            {"image": np.zeros((16, 2)), "label": np.zeros(8)}, NamedSharding(mesh_1d, P("data"))
        )
    assert info.value.rows == {"batch['image']": 16, "batch['label']": 8}


@pytest.mark.parametrize(
    ("batch", "match"),
    [
        ({"name": "cat"}, r"batch\['name'\] is a str"),
        ({"names": ["cat", "dog"]}, r"batch\['names'\]\[0\] is a str"),
        ({"ids": np.array(["a", "b"] * 4)}, r"batch\['ids'\] has dtype <U1"),
        ({"obj": np.array([object()] * 8)}, r"batch\['obj'\] has dtype object"),
        ({"thing": object()}, r"batch\['thing'\] is a object"),
    ],
)
def test_non_numeric_leaves(mesh_1d: Mesh, batch, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        _shard(batch, NamedSharding(mesh_1d, P("data")))


def test_missing_mesh_axis_through_logical_names(mesh_1d: Mesh) -> None:
    sharder = ArraySharder()
    with pytest.raises(
        ValueError, match=r"names mesh axis 'model', but the mesh has axes \{'data': 8\}"
    ):
        sharder.shard_with_logical_names(np.zeros(8), mesh_1d, ("model",))
    with pytest.raises(ValueError, match="mesh axis 'model'"):
        sharder.parallel_transform(np.zeros(8), lambda b: b, mesh_1d, P("model"))


def test_unknown_logical_name_lists_rules(mesh_1d: Mesh) -> None:
    sharder = ArraySharder(axis_rules={"batch": "data"})
    with pytest.raises(
        ValueError, match=r"Logical axis 'embed' has no rule; the rules cover \['batch'\]"
    ):
        sharder.get_partition_spec(("batch", "embed"))


def test_axis_used_twice(mesh_2d: Mesh) -> None:
    sharder = ArraySharder(axis_rules={"batch": "data", "length": "data"})
    with pytest.raises(ValueError, match="more than once"):
        sharder.get_named_sharding(mesh_2d, ("batch", "length"))


def test_spec_longer_than_rank(mesh_2d: Mesh) -> None:
    with pytest.raises(
        ValueError,
        match=r"batch\['label'\] has shape \(8,\) \(rank 1\), but the PartitionSpec .* 2 entries",
    ):
        _shard({"label": np.zeros(8)}, NamedSharding(mesh_2d, P("data", "model")))


@pytest.mark.parametrize("bad", [P("data"), "data", None, jax.devices()[0]])
def test_sharding_of_wrong_type(bad) -> None:
    with pytest.raises(TypeError, match=r"sharding must be a jax\.sharding\.Sharding"):
        _shard({"x": np.zeros(8)}, bad)


def test_partition_spec_hint() -> None:
    with pytest.raises(TypeError, match=r"wrap it as jax.sharding.NamedSharding\(mesh, spec\)"):
        _shard(np.zeros(8), P("data"))


@pytest.mark.parametrize(
    ("data", "error"), [(3, TypeError), ("abc", TypeError), (np.float32(1), TypeError)]
)
def test_shard_data_rejects_scalars_and_strings(data, error) -> None:
    with pytest.raises(error, match="no rows to split between hosts"):
        JaxProcessSharderModule(process_index=0, process_count=2).shard_data(data)


def test_shard_data_rejects_ragged_dict() -> None:
    data = {"image": np.zeros((10, 2)), "label": np.arange(9)}
    with pytest.raises(ValueError, match=r"data\['image'\] has 10 rows, data\['label'\] has 9 r"):
        JaxProcessSharderModule(process_index=0, process_count=2).shard_data(data)
    assert len(data["label"]) == 9


@pytest.mark.parametrize(("index", "count"), [(2, 2), (-1, 2), (0, 0)])
def test_process_index_out_of_range(index: int, count: int) -> None:
    with pytest.raises(ValueError, match=r"process_(index|count) must be"):
        JaxProcessSharderModule(process_index=index, process_count=count)


@pytest.mark.parametrize(
    ("batch_size", "error"),
    [(0, ValueError), (-4, ValueError), (2.5, TypeError), (True, TypeError), ("8", TypeError)],
)
def test_batch_size_must_be_positive_int(batch_size, error) -> None:
    with pytest.raises(error, match=r"batch_size must be an int >= 1, got .*" + f"{batch_size!r}"):
        Pipeline(source={"x": np.arange(8)}, batch_size=batch_size)


def test_source_leaves_differ_in_length() -> None:
    with pytest.raises(
        ValueError, match=r"source\['image'\] has 10 rows, source\['label'\] has 9 r"
    ):
        Pipeline(source={"image": np.zeros((10, 2)), "label": np.arange(9)}, batch_size=2)


def test_stage_not_callable() -> None:
    with pytest.raises(TypeError, match=r"stages\[1\] is a str, which is not callable"):
        Pipeline(source={"x": np.arange(8)}, stages=[lambda b: b, "normalize"], batch_size=2)


def test_shuffle_needs_rngs() -> None:
    with pytest.raises(ValueError, match=r"rngs=nnx.Rngs\(seed\)"):
        Pipeline(source={"x": np.arange(8)}, batch_size=2, shuffle=True)
    Pipeline(source={"x": np.arange(8)}, batch_size=2, shuffle=True, rngs=nnx.Rngs(1))


def test_batch_larger_than_source() -> None:
    with pytest.raises(ValueError, match=r"batch_size=16 is larger than the source \(8 rows\)"):
        Pipeline(source={"x": np.arange(8)}, batch_size=16)
    assert len(Pipeline(source={"x": np.arange(8)}, batch_size=16, drop_remainder=False)) == 1


def test_bad_state_is_rejected() -> None:
    pipeline = Pipeline(source={"x": np.arange(8)}, batch_size=2)
    with pytest.raises(ValueError, match="batch_index"):
        pipeline.set_state(pipeline.get_state() | {"batch_index": 9})
