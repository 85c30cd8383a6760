"""The checks of shardings, alone and against each leaf, and their error text.

`check_sharding` is the door: every public function that takes a sharding passes it
through once, where it enters, and everything inside trusts what it passed. The leaf
checks that do not involve a sharding (names, kinds, dtypes, row counts) are in
`datarax._trees`.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec, Sharding

from datarax._trees import (
    check_leaf_kind,
    check_rows_agree,
    flatten_with_names,
)
from datarax.errors import LeafShapeError, MeshError


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


def check_distinct_devices(sharding: Sharding) -> None:
    """Raises MeshError when the sharding's mesh lists a device more than once.

    Example:
        >>> from jax.sharding import Mesh
        >>> d = jax.devices()
        >>> check_distinct_devices(NamedSharding(Mesh(np.array([d[0], d[0]]), ("x",)), P()))
        Traceback (most recent call last):
        ...
        datarax.errors.MeshError: The mesh lists device 0 more than once...
    """
    mesh = getattr(sharding, "mesh", None)
    devices = getattr(mesh, "devices", None)
    if not isinstance(devices, np.ndarray):
        return  # other shardings name each device once (a set)
    counts = collections.Counter(devices.flat)
    repeated = sorted(device.id for device, count in counts.items() if count > 1)
    if repeated:
        listed = ", ".join(map(str, repeated))
        raise MeshError(
            f"The mesh lists device {listed} more than once ({devices.size} entries, "
            f"{len(counts)} distinct devices); JAX cannot place an array on it. Build the "
            "mesh from distinct devices, e.g. with jax.make_mesh."
        )


def _started_devices(platform: str) -> set[Any]:
    """The devices JAX lists now for `platform` (none when no backend of it started)."""
    try:
        return set(jax.devices(platform))
    except RuntimeError:
        return set()


def check_live_devices(sharding: Sharding) -> None:
    """Raises MeshError when `sharding` uses a device that no started backend lists.

    Any backend counts, not only the default one: a one-chip TPU beside simulated CPU
    devices serves shardings over either. A device its backend no longer lists (one of
    an earlier runtime) is refused.
    """
    unknown = []
    for platform in sorted({device.platform for device in sharding.device_set}):
        known = _started_devices(platform)
        unknown += [d for d in sharding.device_set if d.platform == platform and d not in known]
    if unknown:
        first = min(unknown, key=lambda device: device.id)
        raise MeshError(
            f"The sharding uses {len(unknown)} device(s) that jax.devices({first.platform!r}) "
            f"does not list, e.g. {first!r}. Build the mesh from the devices JAX lists now "
            "(for example with jax.make_mesh), not from an earlier runtime's devices."
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
                raise MeshError(
                    f"PartitionSpec {spec} names mesh axis {name!r}, but the mesh has "
                    f"axes {dict(mesh_shape)}. Use one of {tuple(mesh_shape)} or build "
                    "the mesh with that axis name."
                )
            if name in seen:
                raise MeshError(
                    f"PartitionSpec {spec} uses mesh axis {name!r} more than once; each "
                    "mesh axis can shard at most one array dimension."
                )
            seen.add(name)


def check_sharding(sharding: object, *, live_devices: bool = True) -> Sharding:
    """Returns `sharding` once it is checked: where a sharding enters the public API.

    It must be a `jax.sharding.Sharding` whose mesh lists each device once and, with
    `live_devices` (needed to place data, not to plan), whose devices are all listed by
    a started backend. JAX itself refuses a NamedSharding whose spec does not fit its
    mesh. What passed here is trusted inside the library.

    Raises:
        TypeError: `sharding` is not a Sharding.
        MeshError: a device is repeated, or (with `live_devices`) unknown.

    Example:
        >>> check_sharding(P("data"))
        Traceback (most recent call last):
        ...
        TypeError: sharding must be a jax.sharding.Sharding ... A PartitionSpec alone does not...
    """
    checked = check_sharding_type(sharding)
    check_distinct_devices(checked)
    if live_devices:
        check_live_devices(checked)
    return checked


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
        raise LeafShapeError(
            f"{name} has shape {shape} (rank {len(shape)}), but the PartitionSpec {spec} "
            f"has {len(spec)} entries. Use a spec with at most {len(shape)} entries "
            f"(trailing dimensions are replicated when left out), or reshape {name}.",
            leaf=name,
            shape=shape,
            dim=len(shape),
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
                raise LeafShapeError(
                    f"{name} has {what} (shape {shape}), which cannot be split evenly over "
                    f"{describe_axes(names)} ({size} devices). " + ways_out(dim, size),
                    leaf=name,
                    shape=shape,
                    dim=dim,
                    axes=names,
                    parts=size,
                ) from None
        raise
    return sharding


def leaf_sharding(name: str, shape: tuple[int, ...], sharding: Sharding) -> Sharding:
    """The sharding of leaf `name` of `shape`, after checking that it fits (see
    `named_leaf_sharding`); any other kind of sharding must split `shape` evenly.

    Raises:
        LeafShapeError: the spec has more entries than the leaf has dimensions, or a
            dimension does not split evenly.
    """
    if isinstance(sharding, NamedSharding):
        return named_leaf_sharding(name, shape, sharding)
    try:
        sharding.shard_shape(shape)
    except ValueError as error:
        raise LeafShapeError(
            f"{name} (shape {shape}) cannot be placed with {sharding}: {error}",
            leaf=name,
            shape=shape,
            dim=0,
        ) from None
    return sharding


def leaf_shardings(batch: Any, sharding: Sharding) -> tuple[Sharding, ...]:
    """One validated sharding per leaf of `batch`, in `jax.tree_util` leaf order, after
    `check_sharding` (this is where a sharding enters `ArraySharder.shard`).

    Raises:
        TypeError: `sharding` is not a Sharding, a dict's keys cannot be sorted, or a
            leaf cannot be placed on the sharding's devices.
        ValueError: the sharding cannot be used (`check_sharding`), the spec does not
            fit a leaf's rank or its shape, or a python int does not fit JAX's
            integer type.
    """
    check_sharding(sharding)
    leaves = flatten_with_names(batch)[0]
    device = next(iter(sharding.device_set))
    for name, leaf in leaves:
        check_leaf_kind(name, leaf, device)
    shapes = [tuple(np.shape(leaf)) for _, leaf in leaves]
    rows_split = isinstance(sharding, NamedSharding) and any(
        spec_axis_names(entry) for entry in tuple(sharding.spec)[:1]
    )
    if rows_split:
        check_rows_agree([(name, s[0]) for (name, _), s in zip(leaves, shapes, strict=True) if s])
    return tuple(
        leaf_sharding(name, shape, sharding)
        for (name, _), shape in zip(leaves, shapes, strict=True)
    )
