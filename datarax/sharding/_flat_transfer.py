"""Copying host batches to TPUs the fast way: flat, and in pieces.

Two things slow a copy from the host to a TPU, measured on a TPU v5e
(docs/benchmarks/tpu_copy.md). The shape: a TPU stores an array in tiles over its two
minor dimensions, and for a leaf like ``(256, 224, 224, 3)`` uint8 the copy rearranges
every byte on the way (about 1 GB/s), where the same bytes shaped ``(256, 150528)`` cross
at about 4.5 GB/s. And one stream: an array crosses in one transfer, where the same bytes
in 16 pieces, sent in one call, cross at about 9 GB/s.

The rule, in one sentence: on TPUs, a numpy leaf of rank 3 or more whose sharding splits
only its first dimension crosses as ``(rows, everything else)`` and is reshaped on the
chips, and a C-contiguous numpy leaf of `PIECES_FROM_BYTES` or more bound for one chip
crosses in pieces of about `PIECE_BYTES` in one transfer and is joined there; every
other leaf, and every leaf on other platforms (a CPU's or GPU's memory has no such
tiles), is placed as it is. The result is the same arrays either way. ``send_flat``
chooses: ``"auto"`` (the default) applies the rule; True applies it too but refuses a
leaf of rank 3 or more that cannot cross flat, on every platform, so code tried on a
laptop behaves the same on a TPU; False places every leaf as it is.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec, Sharding

from datarax._caches import cached
from datarax._trees import flatten_with_names
from datarax.errors import LeafShapeError

FLAT_PLATFORMS = ("tpu",)
PIECES_FROM_BYTES = 8 * 2**20  # a leaf this large crosses to one chip in pieces
PIECE_BYTES = 2_500_000  # about this much a piece
MAX_PIECES = 32
SendFlat = bool | Literal["auto"]


@dataclasses.dataclass(frozen=True)
class _Way:
    """How one leaf crosses: as it is (neither), flat with `flat`, or in `pieces`."""

    flat: Sharding | None = None
    pieces: int = 0


_AS_IS = _Way()


def _flat_sharding(sharding: Sharding, ndim: int) -> Sharding | None:
    """The sharding of the ``(rows, rest)`` copy, or None when `sharding` splits a
    dimension after the first (or is of a kind that cannot say)."""
    if isinstance(sharding, NamedSharding):
        spec = tuple(sharding.spec)[:ndim]
        if any(entry is not None for entry in spec[1:]):
            return None
        return NamedSharding(sharding.mesh, PartitionSpec(*spec[:1]))
    if len(sharding.device_set) == 1:
        return sharding  # the whole array on one device, whatever its shape
    return None


def _pieces(leaf: np.ndarray, sharding: Sharding) -> int:
    """How many pieces, blocks of whole rows, `leaf` crosses in (0: not in pieces)."""
    if len(sharding.device_set) != 1 or leaf.nbytes < PIECES_FROM_BYTES:
        return 0
    if not leaf.flags.c_contiguous:
        return 0  # its bytes in order would need a copy on the host first
    return min(MAX_PIECES, len(leaf), max(2, round(leaf.nbytes / PIECE_BYTES)))


def _per_leaf(leaves: list[Any], shardings: Sharding | list[Sharding]) -> list[Sharding]:
    return shardings if isinstance(shardings, list) else [shardings] * len(leaves)


def sending_plan(
    batch: Any, leaves: list[Any], shardings: Sharding | list[Sharding], send_flat: SendFlat
) -> list[_Way] | None:
    """How each leaf crosses, by the rule above; None when every leaf crosses as it is.

    Raises:
        LeafShapeError: with ``send_flat=True``, a numpy leaf of rank 3 or more has a
            sharding that splits a dimension after its first (the message names it).
    """
    if send_flat is False:
        return None
    per_leaf = _per_leaf(leaves, shardings)
    ways: list[_Way] = []
    for index, (leaf, sharding) in enumerate(zip(leaves, per_leaf, strict=True)):
        flat = None
        if isinstance(leaf, np.ndarray) and leaf.ndim >= 3:
            flat = _flat_sharding(sharding, leaf.ndim)
            if flat is None and send_flat is True:
                name = flatten_with_names(batch)[0][index][0]
                raise LeafShapeError(
                    f"{name} (shape {leaf.shape}) cannot be sent flat: its sharding "
                    f"{sharding} splits a dimension after the first, so a (rows, rest) "
                    "copy would not hold the same blocks. Pass send_flat='auto' to send it "
                    "as it is, or shard only the first dimension.",
                    leaf=name,
                    shape=leaf.shape,
                    dim=1,
                )
        on_tpu = next(iter(sharding.device_set)).platform in FLAT_PLATFORMS
        if not on_tpu or not isinstance(leaf, np.ndarray) or not leaf.size:
            ways.append(_AS_IS)
            continue
        pieces = _pieces(leaf, sharding)
        ways.append(_Way(None, pieces) if pieces else _Way(flat) if flat else _AS_IS)
    return ways if any(way is not _AS_IS for way in ways) else None


@cached("flat-to-shape reshapes", 256)
def _reshape_on_devices(shape: tuple[int, ...], sharding: Sharding) -> Callable[[Any], Any]:
    return jax.jit(lambda flat: flat.reshape(shape), out_shardings=sharding)


@cached("piece joins", 256)
def _join_on_device(shape: tuple[int, ...], sharding: Sharding) -> Callable[..., Any]:
    return jax.jit(lambda *parts: jnp.concatenate(parts).reshape(shape), out_shardings=sharding)


def place(
    leaves: list[Any], shardings: Sharding | list[Sharding], ways: list[_Way] | None
) -> list[Any]:
    """`jax.device_put(leaves, shardings)`, each leaf crossing the way `ways` says, all
    in one transfer call."""
    if ways is None:
        return jax.device_put(leaves, shardings)
    per_leaf = _per_leaf(leaves, shardings)
    sent: list[Any] = []
    targets: list[Any] = []  # a sharding, or the device a piece goes to
    for leaf, sharding, way in zip(leaves, per_leaf, ways, strict=True):
        if way.pieces:  # row blocks of the (rows, rest) view: joined along the rows
            device = next(iter(sharding.device_set))
            rows = leaf.reshape(leaf.shape[0], -1) if leaf.ndim > 1 else leaf
            sent += np.array_split(rows, way.pieces)
            targets += [device] * way.pieces
        elif way.flat is not None:
            sent.append(leaf.reshape(leaf.shape[0], math.prod(leaf.shape[1:])))
            targets.append(way.flat)
        else:
            sent.append(leaf)
            targets.append(sharding)
    arrived = iter(jax.device_put(sent, targets))
    placed = []
    for leaf, sharding, way in zip(leaves, per_leaf, ways, strict=True):
        if way.pieces:
            parts = [next(arrived) for _ in range(way.pieces)]
            placed.append(_join_on_device(leaf.shape, sharding)(*parts))
        elif way.flat is not None:
            placed.append(_reshape_on_devices(leaf.shape, sharding)(next(arrived)))
        else:
            placed.append(next(arrived))
    return placed
