"""Which block of an array every device and every host holds under a sharding.

This is the one module that computes it: the `RowLedger`, `shard_data(sharding=)`,
global arrays and global batches all ask it. Everything is read off
``Sharding.devices_indices_map`` (JAX's own placement, for any mesh, spec and device
order) and kept in Python ints, so any host id is exact. A mesh that lists a device
twice is refused, as JAX refuses to place arrays on one.

`global_to_local_shape` and `local_to_global_shape` convert a leaf's shape between the
global array and one host's part of it; `local_index` says which part that is. They
agree with what ``jax.make_array_from_process_local_data`` expects from each host.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, Sharding

from datarax._caches import cached
from datarax._validate import check_int, check_shape
from datarax.sharding._checks import check_sharding_type, named_leaf_sharding, ways_out

Spans = tuple[tuple[int, int], ...]  # a block: (start, stop) in every dimension
Index = tuple[slice | np.ndarray, ...]
HostOf = Mapping[int, int] | Callable[[Any], int] | None


def check_distinct_devices(sharding: Sharding) -> None:
    """Raises ValueError when the sharding's mesh lists a device more than once.

    Example:
        >>> from jax.sharding import Mesh
        >>> d = jax.devices()
        >>> check_distinct_devices(NamedSharding(Mesh(np.array([d[0], d[0]]), ("x",)), P()))
        Traceback (most recent call last):
        ...
        ValueError: The mesh lists device 0 more than once...
    """
    mesh = getattr(sharding, "mesh", None)
    devices = getattr(mesh, "devices", None)
    if not isinstance(devices, np.ndarray):
        return  # other shardings name each device once (a set)
    counts = collections.Counter(devices.flat)
    repeated = sorted(device.id for device, count in counts.items() if count > 1)
    if repeated:
        listed = ", ".join(map(str, repeated))
        raise ValueError(
            f"The mesh lists device {listed} more than once ({devices.size} entries, "
            f"{len(counts)} distinct devices); JAX cannot place an array on it. Build the "
            "mesh from distinct devices, e.g. with jax.make_mesh."
        )


def device_spans(sharding: Sharding, shape: tuple[int, ...]) -> dict[Any, Spans]:
    """Every device's block of a `shape` array: ``{device: ((start, stop), ...)}``."""
    placed = sharding.devices_indices_map(tuple(shape))
    return {
        device: tuple(part.indices(size)[:2] for part, size in zip(index, shape, strict=True))
        for device, index in placed.items()
    }


def host_ids(devices: Iterable[Any], host_of: HostOf = None) -> list[int]:
    """The host of each device, as exact Python ints.

    `host_of` is None (each device's ``process_index``), a mapping ``{device id: host}``
    or a function ``device -> host``.

    Raises:
        TypeError: `host_of` is none of those, or gives a host that is not an int.
        ValueError: the mapping misses a device, or a host is negative.
    """
    devices = list(devices)
    if host_of is None:
        return [int(device.process_index) for device in devices]
    if isinstance(host_of, Mapping):
        missing = [device.id for device in devices if device.id not in host_of]
        if missing:
            raise ValueError(
                f"host_of has no host for device id(s) {missing[:8]}; give every device of "
                "the sharding a host, e.g. with datarax.sharding.pretend_hosts(num_hosts)."
            )
        hosts = [host_of[device.id] for device in devices]
    elif callable(host_of):
        hosts = [host_of(device) for device in devices]
    else:
        raise TypeError(
            "host_of must be a mapping {device id: host}, a function device -> host, or "
            f"None (each device's process_index), got {type(host_of).__name__}."
        )
    return [check_int("a host index", host, minimum=0) for host in hosts]


def merge_spans(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted (start, stop) ranges, overlapping or touching ones joined.

    Example:
        >>> merge_spans([(4, 8), (0, 2), (2, 4), (10, 12)])
        [(0, 8), (10, 12)]
    """
    merged: list[list[int]] = []
    for start, stop in sorted({(int(a), int(b)) for a, b in spans}):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], stop)
        else:
            merged.append([start, stop])
    return [(a, b) for a, b in merged]


def host_blocks(
    sharding: Sharding, shape: tuple[int, ...], host: int, host_of: HostOf = None
) -> list[list[tuple[int, int]]]:
    """Per dimension, the merged ranges that `host`'s devices hold of a `shape` array."""
    spans = device_spans(sharding, shape)
    hosts = host_ids(spans, host_of)
    mine = [block for block, owner in zip(spans.values(), hosts, strict=True) if owner == host]
    return [merge_spans(block[dim] for block in mine) for dim in range(len(shape))]


@cached("blocks per dimension", 256)
def _dim_blocks(sharding: Sharding, rank: int, host: int) -> tuple[tuple[int, int], ...]:
    """Per dimension: (blocks in all, distinct blocks `host`'s devices hold)."""
    spans = device_spans(sharding, (len(sharding.device_set),) * rank)
    hosts = host_ids(spans)
    return tuple(
        (
            len({block[dim] for block in spans.values()}),
            len({block[dim] for block, h in zip(spans.values(), hosts, strict=True) if h == host}),
        )
        for dim in range(rank)
    )


def _this_host(process_index: int | None) -> int:
    if process_index is None:
        return jax.process_index()
    return check_int("process_index", process_index, minimum=0)


def _checked_shape(name: str, sharding: Sharding, value: Any, *, splits: bool) -> tuple[int, ...]:
    """`value` as a shape (ints >= 0) that the sharding's spec fits: no more entries than
    its rank, and, with `splits`, every split dimension divisible. A 0-d shape is
    replicated, so any spec fits it."""
    shape = check_shape(name, value)
    if shape and isinstance(sharding, NamedSharding):
        if splits or len(sharding.spec) > len(shape):
            named_leaf_sharding(name, shape, sharding)  # names a rank or divisibility error
    elif shape and splits:
        sharding.shard_shape(shape)
    return shape


def global_to_local_shape(
    sharding: Sharding, global_shape: tuple[int, ...], *, process_index: int | None = None
) -> tuple[int, ...]:
    """The shape of the part of a `global_shape` array that a host's devices hold.

    Example:
        >>> mesh = jax.make_mesh((len(jax.devices()),), ("data",))
        >>> global_to_local_shape(NamedSharding(mesh, P("data")), (16, 3))
        (16, 3)
    """
    check_sharding_type(sharding)
    check_distinct_devices(sharding)
    shape = _checked_shape("global_shape", sharding, global_shape, splits=True)
    if not shape:
        return ()  # a 0-d array is replicated: every host holds it whole
    blocks = _dim_blocks(sharding, len(shape), _this_host(process_index))
    return tuple(size // total * held for size, (total, held) in zip(shape, blocks, strict=True))


def local_to_global_shape(
    sharding: Sharding, local_shape: tuple[int, ...], *, process_index: int | None = None
) -> tuple[int, ...]:
    """The global shape of an array of which a host's devices hold `local_shape`.

    Raises:
        ValueError: the host holds no part of such an array (its devices are not in
            the mesh), or `local_shape` does not split over the host's blocks.

    Example:
        >>> mesh = jax.make_mesh((len(jax.devices()),), ("data",))
        >>> local_to_global_shape(NamedSharding(mesh, P("data")), (16, 3))
        (16, 3)
    """
    check_sharding_type(sharding)
    check_distinct_devices(sharding)
    host = _this_host(process_index)
    shape = _checked_shape("local_shape", sharding, local_shape, splits=False)
    if not shape:
        return ()
    result = []
    for dim, (size, (total, held)) in enumerate(
        zip(shape, _dim_blocks(sharding, len(shape), host), strict=True)
    ):
        if held == 0:
            raise ValueError(
                f"Host {host} holds no part of an array with this sharding (none of its "
                "devices is in the mesh), so its local shape says nothing about the global one."
            )
        if size % held:
            raise ValueError(
                f"Dimension {dim} has size {size} on host {host}, which holds {held} of its "
                f"{total} blocks, so the size must be a multiple of {held}. " + ways_out(dim, held)
            )
        result.append(size // held * total)
    return tuple(result)


def local_index(
    sharding: Sharding, global_shape: tuple[int, ...], *, process_index: int | None = None
) -> Index:
    """Which part of a `global_shape` array a host's devices hold, per dimension.

    Each entry is a slice (the host's blocks are contiguous) or an integer array (they
    are not); ``np.asarray(x)[i0][:, i1]...`` gives the host's data in the order
    ``jax.make_array_from_process_local_data`` expects. Blocks come in increasing
    global order.

    Example:
        >>> mesh = jax.make_mesh((len(jax.devices()),), ("data",))
        >>> local_index(NamedSharding(mesh, P("data")), (16,))
        (slice(0, 16, None),)
    """
    check_sharding_type(sharding)
    check_distinct_devices(sharding)
    shape = _checked_shape("global_shape", sharding, global_shape, splits=True)
    if not shape:
        return ()
    index: list[slice | np.ndarray] = []
    for merged in host_blocks(sharding, shape, _this_host(process_index)):
        if len(merged) <= 1:
            start, stop = merged[0] if merged else (0, 0)
            index.append(slice(start, stop))
        else:
            index.append(np.concatenate([np.arange(a, b) for a, b in merged]))
    return tuple(index)
