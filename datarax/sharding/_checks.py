"""Every validation of the library and its error text, in one place.

Arguments (positive ints, bools, process indices), leaves (names, kinds, dtypes, row
counts) and shardings (type, devices, spec against mesh and shape) are checked here,
so that one rule has one wording wherever it applies.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec, Sharding

_SCALAR_TYPES = (bool, int, float, complex, np.generic)


def check_int(
    name: str, value: Any, *, minimum: int = 1, maximum: int | None = None, meaning: str = ""
) -> int:
    """Returns `value` as an int when it is an integer in [minimum, maximum].

    Bools are not ints here; numpy integers are.

    Raises:
        TypeError: `value` is not an integer.
        ValueError: `value` is outside the range.

    Example:
        >>> check_int("batch_size", np.int64(4))
        4
    """
    allowed = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
    what = f"{name} must be an int {allowed}" + (f" ({meaning})" if meaning else "")
    if not isinstance(value, numbers.Integral) or isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{what}, got {type(value).__name__}: {value!r:.100}.")
    number = int(value)
    if number < minimum or (maximum is not None and number > maximum):
        raise ValueError(f"{what}, got {value!r}.")
    return number


def check_bool(name: str, value: Any) -> bool:
    """Returns `value` when it is a bool; ``"no"`` or 0 are not accepted as False.

    Example:
        >>> check_bool("shuffle", True)
        True
    """
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__}: {value!r}.")
    return bool(value)


def check_process(process_index: Any, process_count: Any) -> tuple[int, int]:
    """Returns ``(index, count)`` after checking that ``0 <= index < count``."""
    count = check_int("process_count", process_count)
    index = check_int("process_index", process_index, minimum=0)
    if index >= count:
        raise ValueError(
            f"process_index must be in [0, {count - 1}] for process_count={count}, got {index}."
        )
    return index, count


def leaf_name(path: Sequence[Any], root: str = "batch") -> str:
    """The user-facing name of a leaf, e.g. ``batch['label']`` or ``batch[0]``."""
    return root + jax.tree_util.keystr(tuple(path))


def flatten_with_names(tree: Any, root: str = "batch") -> tuple[list[tuple[str, Any]], Any]:
    """``([(leaf name, leaf), ...], treedef)``, with a clear error for unsortable dict keys.

    Example:
        >>> flatten_with_names({"b": 1, "a": [2]})[0]
        [("batch['a'][0]", 2), ("batch['b']", 1)]
    """
    try:
        path_leaves, treedef = jax.tree_util.tree_flatten_with_path(tree)
    except (TypeError, ValueError) as error:
        cause = error.__cause__ or error
        if "not supported between" not in str(cause) and "sorting" not in str(error):
            raise
        raise TypeError(
            f"A dict in {root} has keys of different types that cannot be sorted ({cause}). "
            "JAX orders dict entries by key, so use keys of one type, e.g. all strings."
        ) from None
    return [(leaf_name(path, root), leaf) for path, leaf in path_leaves], treedef


def check_sharding_type(sharding: object) -> Sharding:
    """Returns `sharding` when it is a `jax.sharding.Sharding`, else raises TypeError."""
    if not isinstance(sharding, Sharding):
        hint = ""
        if isinstance(sharding, PartitionSpec):
            hint = (
                " A PartitionSpec alone does not say which devices to use: wrap it as "
                "jax.sharding.NamedSharding(mesh, spec)."
            )
        elif isinstance(sharding, jax.sharding.Mesh):
            hint = " Pass jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(...))."
        raise TypeError(
            "sharding must be a jax.sharding.Sharding (for example "
            f"NamedSharding(mesh, PartitionSpec('data'))), got {type(sharding).__name__}: "
            f"{sharding!r:.200}.{hint}"
        )
    return sharding


def check_devices_known(sharding: Sharding) -> None:
    """Raises ValueError when `sharding` uses devices that ``jax.devices()`` does not list."""
    known = set(jax.devices())
    unknown = sorted((d for d in sharding.device_set if d not in known), key=lambda d: d.id)
    if unknown:
        raise ValueError(
            f"The sharding uses {len(unknown)} device(s) that jax.devices() does not list, "
            f"e.g. {unknown[0]!r}. Build the mesh from jax.devices() (for example with "
            "jax.make_mesh), not from another backend's or an earlier runtime's devices."
        )


def spec_axis_names(entry: Any) -> tuple[str, ...]:
    """The mesh axis names one PartitionSpec entry shards over (empty for None)."""
    if entry is None or entry is PartitionSpec.UNCONSTRAINED:
        return ()
    if isinstance(entry, (tuple, list)):
        return tuple(entry)
    return (entry,)


def describe_axes(names: Sequence[str]) -> str:
    """``mesh axis 'data'`` or ``mesh axes ('data', 'model')``."""
    return f"mesh axis {names[0]!r}" if len(names) == 1 else f"mesh axes {tuple(names)}"


def check_spec_against_mesh(spec: PartitionSpec, mesh_shape: dict[str, int]) -> None:
    """Raises ValueError if `spec` names an axis the mesh lacks or uses one twice."""
    seen: set[str] = set()
    for entry in spec:
        for name in spec_axis_names(entry):
            if name not in mesh_shape:
                raise ValueError(
                    f"PartitionSpec {spec} names mesh axis {name!r}, but the mesh has "
                    f"axes {dict(mesh_shape)}. Use one of {tuple(mesh_shape)} or build "
                    "the mesh with that axis name."
                )
            if name in seen:
                raise ValueError(
                    f"PartitionSpec {spec} uses mesh axis {name!r} more than once; each "
                    "mesh axis can shard at most one array dimension."
                )
            seen.add(name)


def ways_out(dim: int, size: int) -> str:
    """What to do when dimension `dim` does not split into `size` equal parts."""
    if dim == 0:
        return (
            f"Use a batch size that is a multiple of {size}, pad the batch and carry a mask "
            "(datarax.sharding.pad_to_multiple), or drop the remainder in the pipeline "
            "(drop_remainder=True)."
        )
    return (
        f"Pad or crop dimension {dim} to a multiple of {size}, shard it over mesh axes "
        "whose sizes divide it, or leave it unsplit (None in that PartitionSpec entry)."
    )


@functools.cache
def _jax_accepts(dtype: np.dtype) -> bool:
    """Whether JAX takes arrays of `dtype` (decided by JAX itself, without a device)."""
    try:
        jax.eval_shape(lambda x: x, np.zeros((0,), dtype))
    except TypeError:
        return False
    return True


def check_leaf_kind(name: str, leaf: Any) -> None:
    """Raises TypeError for a leaf that cannot become a jax.Array.

    Every dtype JAX accepts passes, bfloat16, int4 and float8 included; strings,
    objects, datetimes, long doubles, byte-swapped dtypes and deleted arrays do not.
    """
    if isinstance(leaf, (str, bytes)):
        raise TypeError(
            f"{name} is a {type(leaf).__name__} ({leaf!r:.40}); only numeric arrays and "
            "scalars can be placed on devices. Encode text as integer ids on the host, "
            "or remove the leaf from the batch before sharding."
        )
    if isinstance(leaf, jax.Array) and leaf.is_deleted():
        raise TypeError(
            f"{name} is a jax.Array that has been deleted or donated (shape {leaf.shape}), "
            "so it holds no data any more. Pass the array a jitted step returned instead "
            "of one it consumed with donate_argnums, or keep a copy."
        )
    if isinstance(leaf, (np.ndarray, np.generic, jax.Array)):
        dtype = np.dtype(leaf.dtype)
        if not _jax_accepts(dtype):
            fix = "Convert it to a numeric dtype (for example integer ids)"
            if dtype.kind in "Mm":
                fix = "Convert it to numbers first (e.g. x.astype('int64') for epoch units)"
            elif not dtype.isnative:
                fix = "Convert it to native byte order first (x.astype(x.dtype.newbyteorder('='))"
            elif dtype == np.longdouble:
                fix = "Convert it to float64 or float32 first"
            raise TypeError(
                f"{name} has dtype {dtype} (shape {np.shape(leaf)}), which JAX does not "
                f"accept on devices. {fix}, or remove it from the batch."
            )
        return
    if not isinstance(leaf, _SCALAR_TYPES):
        raise TypeError(
            f"{name} is a {type(leaf).__name__}, which is neither an array nor a "
            "number. A batch is a pytree (dicts, lists, tuples) whose leaves are numpy "
            "arrays, jax arrays or python numbers."
        )


def check_rows_agree(rows: Sequence[tuple[str, int]]) -> None:
    """Raises ValueError when the named leaves differ in their number of rows."""
    if len({count for _, count in rows}) > 1:
        listed = ", ".join(f"{name} has {count} rows" for name, count in rows)
        raise ValueError(
            f"The leaves differ in their number of rows: {listed}. Every leaf needs one "
            "row per example; slice or pad them to the same number of rows."
        )


def named_leaf_sharding(
    name: str, shape: tuple[int, ...], sharding: NamedSharding
) -> NamedSharding:
    """The sharding for one leaf, after checking rank and divisibility.

    A spec shorter than the leaf's rank shards its leading axes; a rank-0 leaf (a
    python number or 0-d array) has nothing to split and is replicated.
    """
    spec = sharding.spec
    if not shape:
        return NamedSharding(sharding.mesh, PartitionSpec())
    if len(spec) > len(shape):
        raise ValueError(
            f"{name} has shape {shape} (rank {len(shape)}), but the PartitionSpec {spec} "
            f"has {len(spec)} entries. Use a spec with at most {len(shape)} entries "
            f"(trailing dimensions are replicated when left out), or reshape {name}."
        )
    try:
        sharding.shard_shape(shape)
    except ValueError:
        mesh_shape = dict(sharding.mesh.shape)
        for dim, entry in enumerate(spec):
            names = spec_axis_names(entry)
            size = math.prod(mesh_shape[n] for n in names)
            if shape[dim] % size:
                what = f"{shape[dim]} rows" if dim == 0 else f"size {shape[dim]} in dimension {dim}"
                raise ValueError(
                    f"{name} has {what} (shape {shape}), which cannot be split evenly over "
                    f"{describe_axes(names)} ({size} devices). " + ways_out(dim, size)
                ) from None
        raise
    return sharding


def leaf_shardings(batch: Any, sharding: Sharding) -> tuple[Sharding, ...]:
    """One validated sharding per leaf of `batch`, in `jax.tree_util` leaf order.

    Raises:
        TypeError: `sharding` is not a Sharding, or a leaf cannot be placed.
        ValueError: the spec does not fit the mesh, a leaf's rank or its shape.
    """
    check_sharding_type(sharding)
    named = isinstance(sharding, NamedSharding)
    if named:
        check_spec_against_mesh(sharding.spec, dict(sharding.mesh.shape))
    path_leaves = jax.tree_util.tree_flatten_with_path(batch)[0]
    names = [leaf_name(path) for path, _ in path_leaves]
    for name, (_, leaf) in zip(names, path_leaves, strict=True):
        check_leaf_kind(name, leaf)
    shapes = [tuple(np.shape(leaf)) for _, leaf in path_leaves]
    if named and len(sharding.spec) and spec_axis_names(sharding.spec[0]):
        check_rows_agree([(n, s[0]) for n, s in zip(names, shapes, strict=True) if s])
    result: list[Sharding] = []
    for name, shape in zip(names, shapes, strict=True):
        if named:
            result.append(named_leaf_sharding(name, shape, sharding))
            continue
        try:
            sharding.shard_shape(shape)
        except ValueError as error:
            raise ValueError(
                f"{name} (shape {shape}) cannot be placed with {sharding}: {error}"
            ) from None
        result.append(sharding)
    return tuple(result)
