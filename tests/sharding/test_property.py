"""ArraySharder.shard over generated batches: jax.device_put per leaf, or our named error.

Every dtype (those JAX takes and those it refuses), memory layout (C and Fortran order,
strided and reversed views, 0-d arrays and numpy scalars, zero-size dimensions, jax
arrays, deleted ones), pytree shape (nested dicts, lists and tuples, None, python
numbers, dict keys of mixed types) and sharding (1-D and 2-D meshes, Auto and Explicit,
a permuted device order, every spec form, one device): the result equals
``jax.device_put(leaf, sharding for that leaf)`` in values, dtype and sharding, or
shard raises a TypeError/ValueError that names a leaf device_put refused, and the
input is left exactly as it was.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from _support.snapshots import snapshot
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from jax.sharding import AxisType, Mesh, NamedSharding, Sharding
from jax.sharding import PartitionSpec as P

from datarax._compat import single_device_sharding
from datarax.sharding import ArraySharder

ACCEPTED = [
    np.dtype(dtype)
    for dtype in (
        bool,
        np.int8,
        np.int16,
        np.int32,
        np.int64,
        np.uint8,
        np.uint16,
        np.uint32,
        np.uint64,
        np.float16,
        np.float32,
        np.float64,
        jnp.bfloat16,
        jnp.float8_e4m3fn,
        jnp.float8_e5m2,
        ml_dtypes.float4_e2m1fn,
        jnp.int4,
        jnp.uint4,
        ml_dtypes.int2,
        np.complex64,
        np.complex128,
    )
]
REFUSED = [  # by JAX, or (float6) by the CPU backend
    np.dtype(dtype)
    for dtype in (
        "datetime64[s]",
        "timedelta64[ms]",
        object,
        "U3",
        "S2",
        np.longdouble,
        np.clongdouble,
        ">i4",
        ">f8",
        ml_dtypes.float6_e2m3fn,
    )
]
LAYOUTS = ["C", "Fortran", "strided", "reversed", "transposed", "numpy scalar", "jax", "deleted"]


def _shardings() -> list[Sharding]:
    devices = np.array(jax.devices())
    permuted = devices[np.random.default_rng(0).permutation(len(devices))]
    result: list[Sharding] = [single_device_sharding(devices[5])]
    for axis_type in (AxisType.Auto, AxisType.Explicit):
        line = Mesh(devices, ("data",), axis_types=(axis_type,))
        result += [NamedSharding(line, spec) for spec in (P(), P("data"))]
        for order in (devices, permuted):
            grid = Mesh(order.reshape(4, 2), ("data", "model"), axis_types=(axis_type,) * 2)
            specs = (P(), P("data"), P("data", "model"), P(("data", "model")), P(None, "model"))
            result += [NamedSharding(grid, spec) for spec in specs]
    return result


SHARDINGS = _shardings()


def _values(dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    small = np.asarray(np.arange(math.prod(shape)).reshape(shape) % 3)
    if dtype.kind == "b":
        return np.asarray(small == 1)
    return small.astype(dtype)


def _array(dtype: np.dtype, shape: tuple[int, ...], layout: str) -> Any:
    if layout in ("jax", "deleted"):
        try:
            placed = jax.device_put(_values(dtype, shape), jax.devices()[1])
        except Exception:  # a dtype JAX refuses stays a numpy array
            return _values(dtype, shape)
        if layout == "deleted":
            placed.delete()
        return placed
    if not shape:
        values = _values(dtype, shape)
        return values[()] if layout == "numpy scalar" else values
    if layout == "Fortran":
        return np.asfortranarray(_values(dtype, shape))
    if layout == "strided":
        return _values(dtype, (2 * shape[0], *shape[1:]))[::2]
    if layout == "reversed":
        return _values(dtype, shape)[::-1]
    if layout == "transposed":
        return _values(dtype, shape[::-1]).T
    return _values(dtype, shape)


@st.composite
def _leaf(draw: st.DrawFn, rows: int, clean: bool) -> Any:
    kind = draw(st.sampled_from(["array"] * 6 + ["python number", "None"]))
    if kind == "None":
        return None
    if kind == "python number":
        return draw(
            st.one_of(
                st.booleans(),
                st.integers(-(2**40), 2**40),
                st.floats(allow_nan=False, width=32),
                st.complex_numbers(allow_nan=False, max_magnitude=1e3),
            )
        )
    rank = draw(st.integers(0, 3))
    lead = draw(st.sampled_from([rows, rows, rows, 24]))  # now and then, rows of its own
    shape = (lead, *draw(st.lists(st.sampled_from([0, 1, 2, 3, 4]), min_size=2, max_size=2)))
    refused = not clean and draw(st.integers(0, 3)) == 0
    dtype = draw(st.sampled_from(REFUSED if refused else ACCEPTED))
    layouts = LAYOUTS[:-1] if clean else LAYOUTS
    return _array(dtype, shape[:rank], draw(st.sampled_from(layouts)))


@st.composite
def _batches(draw: st.DrawFn) -> Any:
    # Half the batches hold only dtypes and arrays JAX takes, so that whole batches
    # are placed (or refused for their shapes) often enough.
    leaves = _leaf(draw(st.sampled_from([0, 6, 8, 16])), clean=draw(st.booleans()))
    keys = st.sampled_from(["image", "label", "mask", "text", "x", "y", "z", 0])
    return draw(
        st.recursive(
            leaves,
            lambda inner: st.one_of(
                st.dictionaries(keys, inner, max_size=3),
                st.lists(inner, max_size=3),
                st.tuples(inner, inner),
            ),
            max_leaves=5,
        )
    )


def _target(leaf: Any, sharding: Sharding) -> Sharding:
    """The sharding shard() promises a leaf: a 0-d leaf on a mesh is replicated."""
    if isinstance(sharding, NamedSharding) and np.ndim(leaf) == 0:
        return NamedSharding(sharding.mesh, P())
    return sharding


def _reference(path_leaves: list[Any], sharding: Sharding) -> tuple[list[Any], list[str]]:
    """jax.device_put of each leaf, and the names of the leaves it refused."""
    placed, refused = [], []
    for path, leaf in path_leaves:
        try:
            placed.append(jax.device_put(leaf, _target(leaf, sharding)))
        except Exception:
            placed.append(None)
            refused.append("batch" + jax.tree_util.keystr(path))
    return placed, refused


def _ragged(leaves: list[Any], sharding: Sharding) -> bool:
    """Whether leaves split by rows have different row counts (shard refuses that)."""
    if not isinstance(sharding, NamedSharding) or not sharding.spec or not sharding.spec[0]:
        return False
    return len({np.shape(leaf)[0] for leaf in leaves if np.ndim(leaf)}) > 1


@given(batch=_batches(), sharding=st.sampled_from(SHARDINGS))
@settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
def test_shard_is_device_put_per_leaf_or_a_named_error(batch: Any, sharding: Sharding) -> None:
    before = snapshot(batch)
    try:
        path_leaves, treedef = jax.tree_util.tree_flatten_with_path(batch)
    except (TypeError, ValueError):  # a dict whose keys JAX cannot sort
        path_leaves, treedef = None, None
    try:
        result, error = ArraySharder().shard(batch, sharding), None
    except (TypeError, ValueError) as raised:
        result, error = None, raised
    assert snapshot(batch) == before
    if path_leaves is None:
        event("refused: dict keys of mixed types")
        assert isinstance(error, TypeError)
        assert "is a dict with keys of different types" in str(error)
        return
    names = ["batch" + jax.tree_util.keystr(path) for path, _ in path_leaves]
    expected, refused = _reference(path_leaves, sharding)
    ragged = _ragged([leaf for _, leaf in path_leaves], sharding)
    if refused or ragged:
        event("refused: " + ("a leaf device_put refuses" if refused else "leaves differ in rows"))
        assert error is not None, f"shard accepted what device_put refused: {refused}"
        message = str(error)
        named = [name for name in names if name in message]
        assert named, f"the error names no leaf: {message}"
        assert set(named) & set(refused) or (ragged and "differ in their number of rows" in message)
        return
    event(f"placed: {len(expected)} leaves" if expected else "placed: no leaves")
    assert error is None, f"device_put took every leaf, but shard raised {error!r}"
    assert jax.tree_util.tree_structure(result) == treedef
    for ours, reference in zip(jax.tree_util.tree_leaves(result), expected, strict=True):
        assert isinstance(ours, jax.Array)
        assert (ours.dtype, ours.shape, ours.weak_type) == (
            reference.dtype,
            reference.shape,
            reference.weak_type,
        )
        assert ours.sharding.is_equivalent_to(reference.sharding, reference.ndim)
        assert np.asarray(ours).tobytes() == np.asarray(reference).tobytes()
