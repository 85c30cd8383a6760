"""Which block of an array every device and every host holds under a sharding.

This is the one module that computes it: the `RowLedger`, `shard_data(sharding=)`,
global arrays and global batches all ask it. Everything is read off
``Sharding.devices_indices_map`` (JAX's own placement, for any mesh, spec and device
order) and kept in Python ints, so any host id is exact.

`global_to_local_shape` and `local_to_global_shape` convert a leaf's shape between the
global array and one host's part of it; `local_index` says which part that is. They
agree with what ``jax.make_array_from_process_local_data`` expects from each host. These
three check the sharding they are given (`check_sharding`); the other functions here
trust theirs, which the public function that called them has checked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, Sharding

from datarax._caches import cached
from datarax._validate import check_int, check_shape
from datarax.errors import LeafShapeError
from datarax.sharding._sharding_checks import check_sharding, named_leaf_sharding, ways_out

Spans = tuple[tuple[int, int], ...]  # a block: (start, stop) in every dimension
Index = tuple[slice | np.ndarray, ...]
HostOf = Mapping[int, int] | Callable[[Any], int] | None


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


def blocks_to_index(blocks: Sequence[tuple[int, int]]) -> slice | np.ndarray:
    """The index that takes sorted, disjoint ``(start, stop)`` blocks out of an axis, in
    order: a slice for one block (or none), else an integer array of their positions.

    Example:
        >>> blocks_to_index([(4, 8)]), blocks_to_index([(0, 2), (6, 8)])
        (slice(4, 8, None), array([0, 1, 6, 7]))
    """
    if len(blocks) <= 1:
        start, stop = blocks[0] if blocks else (0, 0)
        return slice(start, stop)
    return np.concatenate([np.arange(start, stop, dtype=np.int64) for start, stop in blocks])


def host_index(sharding: Sharding, shape: tuple[int, ...], host: int) -> Index:
    """Which part of a `shape` array `host`'s devices hold, per dimension (see
    `local_index`, which checks its arguments; this trusts them)."""
    if not shape:
        return ()  # a 0-d array is replicated: every host holds it whole
    spans = device_spans(sharding, shape)
    mine = [
        block for block, owner in zip(spans.values(), host_ids(spans), strict=True) if owner == host
    ]
    return tuple(
        blocks_to_index(merge_spans(block[dim] for block in mine)) for dim in range(len(shape))
    )


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


def host_global_shape(
    sharding: Sharding, local_shape: tuple[int, ...], host: int
) -> tuple[int, ...]:
    """The global shape of an array of which `host`'s devices hold `local_shape` (see
    `local_to_global_shape`, which checks its arguments; this trusts them).

    Raises:
        ValueError: the host holds no part of such an array.
        LeafShapeError: `local_shape` does not split over the host's blocks.
    """
    if not local_shape:
        return ()
    result = []
    blocks = _dim_blocks(sharding, len(local_shape), host)
    for dim, (size, (total, held)) in enumerate(zip(local_shape, blocks, strict=True)):
        if held == 0:
            raise ValueError(
                f"Host {host} holds no part of an array with this sharding (none of its "
                "devices is in the mesh), so its local shape says nothing about the global one."
            )
        if size % held:
            raise LeafShapeError(
                f"Dimension {dim} has size {size} on host {host}, which holds {held} of its "
                f"{total} blocks, so the size must be a multiple of {held}. " + ways_out(dim, held),
                leaf="local_shape",
                shape=local_shape,
                dim=dim,
                parts=held,
            )
        result.append(size // held * total)
    return tuple(result)


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
    check_sharding(sharding, live_devices=False)
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
    check_sharding(sharding, live_devices=False)
    host = _this_host(process_index)
    shape = _checked_shape("local_shape", sharding, local_shape, splits=False)
    return host_global_shape(sharding, shape, host)


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
    check_sharding(sharding, live_devices=False)
    shape = _checked_shape("global_shape", sharding, global_shape, splits=True)
    return host_index(sharding, shape, _this_host(process_index))


def describe_sharding(sharding: Sharding) -> str:
    """A sharding in one line: its spec and mesh for a NamedSharding, else its repr.

    Example:
        >>> describe_sharding(NamedSharding(jax.make_mesh((8,), ("data",)), P("data", None)))
        "P('data', None) on mesh {'data': 8}"
    """
    if isinstance(sharding, NamedSharding):
        spec = ", ".join(repr(entry) for entry in sharding.spec)
        return f"P({spec}) on mesh {dict(sharding.mesh.shape)}"
    return repr(sharding)
