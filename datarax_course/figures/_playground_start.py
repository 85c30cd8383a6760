"""`playground()`: checks its starting values and opens the interactive playground."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jax.sharding import PartitionSpec

from datarax_course._checks import check_int, is_sequence, spec_axis_names

from ._playground import Playground
from ._playground_model import (
    AXIS_TYPES,
    DTYPES,
    MAX_AXES,
    MAX_AXIS_SIZE,
    MAX_BATCH,
    MAX_DIM,
    MAX_HOSTS,
    MAX_RANK,
    ORDERS,
    Entry,
    Settings,
    check_names,
)


def playground(
    *,
    mesh_shape: Sequence[int] = (4, 2),
    axis_names: Sequence[str] = ("data", "model"),
    spec: PartitionSpec | Sequence[Any] | str = ("data",),
    batch_size: int = 16,
    feature_shape: Sequence[int] = (8,),
    hosts: int = 2,
    device_order: str = "in order",
    axis_types: str = "Auto",
    dtype: str = "float32",
) -> Playground:
    """An interactive sharding playground: choose a mesh, hosts and a spec, see the result.

    The controls set the mesh (up to 3 axes, their names and sizes, Auto or Explicit
    axis types), how many hosts the devices are split into and in which order the
    mesh lists them (in order, or interleaved across hosts), and a batch leaf (its
    global batch size, rank 1 to 4, dimension sizes, dtype) with a PartitionSpec
    entry per dimension. On every change the playground places a real `jax.Array`
    with `ArraySharder` (a mesh bigger than the runtime is laid out on stand-in
    devices instead, and says so) and shows the `plot_sharding` picture, the
    `plot_ledger` picture, a table per device and per host, and the code that builds
    the layout; a choice JAX rejects shows the library's error instead.

    The arguments are starting values for the controls. A combination that JAX
    rejects is allowed (the playground shows why); a value no control can take is not.

    Args:
        mesh_shape: the size of each mesh axis; 1 to 3 axes of 1 to 16 devices.
        axis_names: one name per mesh axis, distinct Python identifiers.
        spec: the leaf's PartitionSpec, e.g. ``P("data")`` or ``("data", None)``; at
            most one entry per dimension of the leaf, naming axes of the mesh.
        batch_size: the global batch size, dimension 0 of the leaf (1 to 512).
        feature_shape: the leaf's dimensions after the batch: 0 to 3 sizes of 1 to 64.
        hosts: how many (pretend) hosts split the mesh's devices, 1 to 16.
        device_order: ``"in order"`` or ``"interleaved"`` (neighbours on other hosts).
        axis_types: ``"Auto"`` or ``"Explicit"``.
        dtype: one of ``"float32"``, ``"bfloat16"``, ``"int32"``, ``"uint8"``.

    Returns:
        A `Playground`; as the last line of a cell it shows the widget, and where no
        kernel runs, a snapshot of the picture and tables.

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: an argument is outside what the controls offer.
        ImportError: ipywidgets is not installed.

    Example:
        >>> pg = playground(mesh_shape=(8,), axis_names=("data",), spec=P("data"), batch_size=32)
        >>> pg.view.device_rows[1].index[0], pg.view.host_rows[1].blocks
        ((4, 8), ((16, 32),))
        >>> pg.controls["batch_size"].value = 30
        >>> print(pg.message)  # doctest: +ELLIPSIS
        batch has 30 rows (shape (30, 8)), which cannot be split evenly over mesh axis 'data' ...
    """
    shape = _sizes("mesh_shape", mesh_shape, 1, MAX_AXES, MAX_AXIS_SIZE)
    names = _names(axis_names, len(shape))
    features = _sizes("feature_shape", feature_shape, 0, MAX_RANK - 1, MAX_DIM)
    start = Settings(
        mesh_shape=shape,
        axis_names=names,
        spec=_spec(spec, names, 1 + len(features)),
        batch_size=check_int("batch_size", batch_size, maximum=MAX_BATCH),
        feature_shape=features,
        hosts=check_int("hosts", hosts, maximum=MAX_HOSTS),
        device_order=_choice("device_order", device_order, ORDERS),
        axis_types=_choice("axis_types", axis_types, AXIS_TYPES),
        dtype=_choice("dtype", dtype, DTYPES),
    )
    return Playground(start)


def _sizes(name: str, sizes: Any, least: int, most: int, largest: int) -> tuple[int, ...]:
    if not is_sequence(sizes):
        raise TypeError(f"{name} must be a tuple of ints, e.g. (4, 2), got {sizes!r}.")
    if not least <= len(sizes) <= most:
        raise ValueError(
            f"{name} must have {least} to {most} entries, got {len(sizes)}: {sizes!r}."
        )
    return tuple(check_int(f"each entry of {name}", size, maximum=largest) for size in sizes)


def _names(names: Any, axes: int) -> tuple[str, ...]:
    if isinstance(names, str) or not isinstance(names, Sequence):
        raise TypeError(f"axis_names must be a tuple of strings, e.g. ('data',), got {names!r}.")
    if not all(isinstance(name, str) for name in names):
        raise TypeError(f"axis_names must be strings, got {tuple(names)!r}.")
    if len(names) != axes:
        raise ValueError(
            f"axis_names must name each of the {axes} mesh axes, got {len(names)}: "
            f"{tuple(names)!r}."
        )
    check_names(tuple(names))
    return tuple(names)


def _spec(spec: Any, names: tuple[str, ...], rank: int) -> tuple[Entry, ...]:
    entries = (spec,) if isinstance(spec, str) else spec
    if not isinstance(entries, (PartitionSpec, Sequence)):
        raise TypeError(f"spec must be a PartitionSpec such as P('data'), got {spec!r}.")
    if len(entries) > rank:
        raise ValueError(
            f"spec {spec!r} has {len(entries)} entries but the leaf has rank {rank} (batch "
            f"plus feature_shape); give at most {rank}, or a longer feature_shape."
        )
    positions: list[Entry] = []
    for entry in entries:
        if entry is not None and not isinstance(entry, (str, tuple, list)):
            raise TypeError(
                f"Each spec entry must be None, an axis name or a tuple of names, got {entry!r}."
            )
        used = spec_axis_names(entry)
        unknown = [name for name in used if name not in names]
        if unknown:
            raise ValueError(
                f"spec {spec!r} names mesh axis {unknown[0]!r}, but the mesh axes are "
                f"{names}; use one of them or add it to axis_names."
            )
        if len(set(used)) < len(used):
            raise ValueError(f"spec entry {entry!r} names a mesh axis twice; name each once.")
        positions.append(tuple(names.index(name) for name in used))
    return tuple(positions) + ((),) * (rank - len(positions))


def _choice(name: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {allowed}, got {value!r}.")
    return value
