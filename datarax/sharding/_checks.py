"""Validation of a batch against a sharding, with errors that say what to do next.

These checks run once per (tree structure, leaf shapes, sharding) combination;
`ArraySharder` caches their result, so the per-call cost is a dictionary lookup.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec, Sharding

_SCALAR_TYPES = (bool, int, float, complex, np.generic)
_WAYS_OUT = (
    "Use a batch size that is a multiple of {size}, pad the batch and carry a mask "
    "(datarax.sharding.pad_to_multiple), or drop the remainder in the pipeline "
    "(drop_remainder=True)."
)


def leaf_name(path: Sequence[Any], root: str = "batch") -> str:
    """The user-facing name of a leaf, e.g. ``batch['label']`` or ``batch[0]``."""
    return root + jax.tree_util.keystr(tuple(path))


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
            f"{sharding!r}.{hint}"
        )
    return sharding


def spec_axis_names(entry: Any) -> tuple[str, ...]:
    """The mesh axis names one PartitionSpec entry shards over (empty for None)."""
    if entry is None or entry is PartitionSpec.UNCONSTRAINED:
        return ()
    if isinstance(entry, (tuple, list)):
        return tuple(entry)
    return (entry,)


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


def _describe_axes(names: tuple[str, ...]) -> str:
    if len(names) == 1:
        return f"mesh axis {names[0]!r}"
    return f"mesh axes {names}"


def check_leaf_kind(name: str, leaf: Any) -> None:
    """Raises TypeError for leaves that cannot become a jax.Array (strings, objects)."""
    if isinstance(leaf, (str, bytes)):
        raise TypeError(
            f"{name} is a {type(leaf).__name__} ({leaf!r:.40}); only numeric arrays and "
            "scalars can be placed on devices. Encode text as integer ids on the host, "
            "or remove the leaf from the batch before sharding."
        )
    if isinstance(leaf, (np.ndarray, jax.Array)):
        if np.dtype(leaf.dtype).kind in "OUSV":
            raise TypeError(
                f"{name} has dtype {leaf.dtype} (shape {leaf.shape}); only numeric and "
                "boolean arrays can be placed on devices. Convert it to a numeric dtype "
                "(for example integer ids) or remove it from the batch."
            )
        return
    if not isinstance(leaf, _SCALAR_TYPES):
        raise TypeError(
            f"{name} is a {type(leaf).__name__}, which is neither an array nor a "
            "number. A batch is a pytree (dicts, lists, tuples) whose leaves are numpy "
            "arrays, jax arrays or python numbers."
        )


def check_leading_dims(named_shapes: Sequence[tuple[str, tuple[int, ...]]]) -> None:
    """Raises ValueError when leaves that are split along dimension 0 differ in rows."""
    if not named_shapes:
        return
    first_name, first_shape = named_shapes[0]
    for name, shape in named_shapes[1:]:
        if shape[0] != first_shape[0]:
            raise ValueError(
                f"The batch is ragged: {first_name} has {first_shape[0]} rows (shape "
                f"{first_shape}) but {name} has {shape[0]} rows (shape {shape}). Every "
                "leaf that is split along its first dimension must have the same number "
                "of rows; slice or pad them to one batch size."
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
    mesh_shape = dict(sharding.mesh.shape)
    for dim, entry in enumerate(spec):
        names = spec_axis_names(entry)
        size = math.prod(mesh_shape[n] for n in names)
        if shape[dim] % size:
            what = f"{shape[dim]} rows" if dim == 0 else f"size {shape[dim]} in dimension {dim}"
            raise ValueError(
                f"{name} has {what} (shape {shape}), which cannot be split evenly over "
                f"{_describe_axes(names)} ({size} devices). " + _WAYS_OUT.format(size=size)
            )
    return sharding


def leaf_shardings(batch: Any, sharding: Sharding) -> tuple[Sharding, ...]:
    """One validated sharding per leaf of `batch`, in `jax.tree_util` leaf order.

    Raises:
        TypeError: `sharding` is not a Sharding, or a leaf is a string or object.
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
        check_leading_dims([(n, s) for n, s in zip(names, shapes, strict=True) if s])
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
