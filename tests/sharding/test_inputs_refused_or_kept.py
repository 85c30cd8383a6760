"""Inputs once mishandled: masked arrays are refused naming the leaf, record sources with
jax.Array leaves stack as arrays, ints beyond int64 are refused, dataclass pytrees are
sources, a namedtuple is a container, and bad axis rules, logical specs and 0-d leaves of
a parallel transform get our error."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import flax.struct
import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from datarax.errors import LeafShapeError, LeafTypeError, LeafValueError
from datarax.pipeline import ArraySource, Pipeline
from datarax.sharding import ArraySharder, JaxProcessSharder

MESH = jax.make_mesh((8,), ("data",))
ROWS = NamedSharding(MESH, P("data"))


def _masked() -> np.ma.MaskedArray:
    return np.ma.masked_array(np.arange(16.0), mask=np.arange(16) % 3 == 0)


@pytest.mark.parametrize(
    "use",
    [
        lambda data: ArraySharder().shard(data, ROWS),
        lambda data: JaxProcessSharder().shard_data(data),
        lambda data: JaxProcessSharder().shard_data(data, ROWS),
        lambda data: ArraySource(data),
        lambda data: Pipeline(source=data, batch_size=8),
        lambda data: Pipeline(source=data, batch_size=8, sharding=ROWS),
    ],
    ids=["shard", "shard_data", "shard_data sharding", "ArraySource", "Pipeline", "global"],
)
def test_a_masked_array_is_refused_naming_the_leaf(use) -> None:
    data = {"x": _masked(), "y": np.arange(16)}
    with pytest.raises(LeafTypeError, match=r"is a numpy masked array .* mask would be lost") as e:
        use(data)
    assert e.value.leaf.endswith("['x']")
    assert data["x"].mask.sum() == 6  # the caller's data unchanged


def test_records_with_jax_array_leaves_stack_into_numpy_arrays() -> None:
    records = [{"x": jax.numpy.full((2,), i), "y": i} for i in range(8)]
    batch = next(iter(Pipeline(source=records, batch_size=4)))
    assert isinstance(batch["x"], np.ndarray) and batch["x"].shape == (4, 2)
    np.testing.assert_array_equal(batch["x"][:, 0], [0, 1, 2, 3])


@pytest.mark.parametrize("big", [2**63, 2**70, -(2**63) - 1])
def test_record_ints_beyond_int64_are_refused_naming_the_record(big: int) -> None:
    records = [{"n": 1}, {"n": big}, {"n": 3}, {"n": 4}]
    with pytest.raises(LeafValueError, match=r"source\[1\]\['n'\] is the python int") as e:
        next(iter(Pipeline(source=records, batch_size=4)))
    assert e.value.leaf == "batch['n']"


@flax.struct.dataclass
class _Flax:
    x: np.ndarray
    y: np.ndarray


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class _Registered:
    x: np.ndarray
    y: np.ndarray


@pytest.mark.parametrize("kind", [_Flax, _Registered])
def test_a_dataclass_pytree_is_a_source(kind) -> None:
    source = kind(x=np.arange(8), y=np.arange(8) * 10)
    batches = list(Pipeline(source=source, batch_size=4))
    assert isinstance(batches[0], kind)
    np.testing.assert_array_equal(batches[1].y, [40, 50, 60, 70])


class _Pair(NamedTuple):
    image: np.ndarray
    label: np.ndarray


def test_a_namedtuple_at_the_top_of_shard_data_is_a_container() -> None:
    pair = _Pair(np.arange(20).reshape(10, 2), np.arange(10))
    mine = JaxProcessSharder(process_index=1, process_count=2).shard_data(pair)
    assert isinstance(mine, _Pair)
    np.testing.assert_array_equal(mine.label, np.arange(5, 10))
    rows = JaxProcessSharder(process_index=1, process_count=2).shard_data((1, 2, 3, 4))
    assert rows == (3, 4)  # a plain tuple is a sequence of rows


@pytest.mark.parametrize("axes", [5, (1, "data"), ["data", 2.0]])
def test_axis_rules_map_to_mesh_axis_names_only(axes) -> None:
    with pytest.raises(TypeError, match=r"a logical axis maps to a mesh axis name"):
        ArraySharder(axis_rules=[("batch", axes)])


@pytest.mark.parametrize("spec", [None, 123, ("batch", 7)])
def test_a_logical_spec_of_another_kind_is_our_error(spec) -> None:
    with pytest.raises(TypeError, match=r"logical_spec must be a PartitionSpec, a logical axis"):
        ArraySharder(axis_rules={"batch": "data"}).get_partition_spec(spec)


def test_a_zero_d_leaf_in_a_parallel_transform_is_named() -> None:
    batch = {"x": np.arange(16.0).reshape(8, 2), "step": np.float32(3)}
    with pytest.raises(LeafShapeError, match=r"batch\['step'\] has shape \(\) \(rank 0\)") as e:
        ArraySharder().parallel_transform(batch, lambda b: b, MESH, P("data"))
    assert (e.value.leaf, e.value.dim) == ("batch['step']", 0)
