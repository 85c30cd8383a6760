"""A leaf's shape on one host and in the global array, and which part a host holds.

`global_to_local_shape` and `local_to_global_shape` convert a leaf's shape between the
global array and one host's part of it, in every dimension; `local_index` says which
part of a global array that is. All three read ``Sharding.devices_indices_map``, so
they follow JAX's placement for any mesh, spec and device order, and they agree with
what ``jax.make_array_from_process_local_data`` expects from each host.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
from jax.sharding import Sharding

from datarax.sharding._checks import check_int, check_sharding_type, ways_out

Index = tuple[slice | np.ndarray, ...]


def merge_spans(blocks: np.ndarray) -> list[tuple[int, int]]:
    """Sorted (start, stop) rows, overlapping or touching ones joined."""
    merged: list[list[int]] = []
    for start, stop in sorted({(int(a), int(b)) for a, b in blocks}):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], stop)
        else:
            merged.append([start, stop])
    return [(a, b) for a, b in merged]


@functools.lru_cache(maxsize=256)
def _dim_blocks(sharding: Sharding, rank: int, host: int) -> tuple[tuple[int, int], ...]:
    """Per dimension: (blocks in all, distinct blocks `host`'s devices hold)."""
    probe = (len(sharding.device_set),) * rank
    placed = sharding.devices_indices_map(probe)
    result = []
    for dim in range(rank):
        starts = {index[dim].indices(probe[dim])[0] for index in placed.values()}
        held = {
            index[dim].indices(probe[dim])[0]
            for device, index in placed.items()
            if device.process_index == host
        }
        result.append((len(starts), len(held)))
    return tuple(result)


def _this_host(process_index: int | None) -> int:
    if process_index is None:
        return jax.process_index()
    return check_int("process_index", process_index, minimum=0)


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
    shape = tuple(global_shape)
    sharding.shard_shape(shape)  # raises on shapes that do not divide
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
    host = _this_host(process_index)
    shape = tuple(local_shape)
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
    host = _this_host(process_index)
    shape = tuple(global_shape)
    sharding.shard_shape(shape)
    placed = sharding.devices_indices_map(shape)
    index: list[slice | np.ndarray] = []
    for dim, size in enumerate(shape):
        spans = sorted(
            {
                tuple(i[dim].indices(size)[:2])
                for device, i in placed.items()
                if device.process_index == host
            }
        )
        merged = merge_spans(np.array(spans, dtype=np.int64).reshape(-1, 2))
        if len(merged) <= 1:
            start, stop = merged[0] if merged else (0, 0)
            index.append(slice(start, stop))
        else:
            index.append(np.concatenate([np.arange(a, b) for a, b in merged]))
    return tuple(index)
