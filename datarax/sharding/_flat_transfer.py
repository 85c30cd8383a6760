"""Sending a batch flat: each image-like leaf crosses to a TPU as one 2-D array.

A TPU stores an array in tiles over its two minor dimensions. For a leaf like
``(256, 224, 224, 3)`` uint8, JAX's TPU layout puts another dimension minor-most (three
channels would waste most of a 128-wide tile), so the copy from the host rearranges
every byte on the way: about 1 GB/s on a TPU v5e, where the same bytes shaped
``(256, 150528)`` cross at about 4.6 GB/s (docs/benchmarks/tpu_copy.md). Sending the 2-D
shape and reshaping on the chip, from its own memory, is the fast way.

The rule, in one sentence: with ``send_flat=True`` every numpy leaf of rank 3 or more
is sent as ``(rows, everything else)`` and reshaped on the devices when they are TPUs,
and placed as it is elsewhere (a CPU's or GPU's memory has no such tiles, so there is
nothing to win). A sharding that splits a dimension after the first cannot be sent
flat, and is refused on every platform, so code tried on a laptop behaves the same on
a TPU.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec, Sharding, SingleDeviceSharding

from datarax._caches import cached
from datarax.sharding._checks import flatten_with_names

FLAT_PLATFORMS = ("tpu",)


def _flat_sharding(sharding: Sharding, ndim: int) -> Sharding | None:
    """The sharding of the ``(rows, rest)`` copy, or None when `sharding` splits a
    dimension after the first (or is of a kind that cannot say)."""
    if isinstance(sharding, SingleDeviceSharding):
        return sharding
    if isinstance(sharding, NamedSharding):
        spec = tuple(sharding.spec)[:ndim]
        if any(entry is not None for entry in spec[1:]):
            return None
        return NamedSharding(sharding.mesh, PartitionSpec(*spec[:1]))
    return None


@cached("flat-to-shape reshapes", 256)
def _reshape_on_devices(shape: tuple[int, ...], sharding: Sharding) -> Callable[[Any], Any]:
    return jax.jit(lambda flat: flat.reshape(shape), out_shardings=sharding)


def _per_leaf(leaves: list[Any], shardings: Sharding | list[Sharding]) -> list[Sharding]:
    return shardings if isinstance(shardings, list) else [shardings] * len(leaves)


def flat_shardings(
    batch: Any, leaves: list[Any], shardings: Sharding | list[Sharding]
) -> list[Sharding | None]:
    """Per leaf, the sharding of its flat copy, or None for a leaf placed as it is.

    Raises:
        ValueError: a numpy leaf of rank 3 or more has a sharding that splits a
            dimension after its first (the message names the leaf).
    """
    flats: list[Sharding | None] = []
    for index, (leaf, sharding) in enumerate(
        zip(leaves, _per_leaf(leaves, shardings), strict=True)
    ):
        flat = None
        if isinstance(leaf, np.ndarray) and leaf.ndim >= 3:
            flat = _flat_sharding(sharding, leaf.ndim)
            if flat is None:
                name = flatten_with_names(batch)[0][index][0]
                raise ValueError(
                    f"{name} (shape {leaf.shape}) cannot be sent flat: its sharding "
                    f"{sharding} splits a dimension after the first, so a (rows, rest) "
                    "copy would not hold the same blocks. Pass send_flat=False for this "
                    "batch, or shard only the first dimension."
                )
        flats.append(flat)
    return flats


def place_flat(
    leaves: list[Any], shardings: Sharding | list[Sharding], flats: list[Sharding | None]
) -> list[Any]:
    """`jax.device_put(leaves, shardings)`, with the leaves `flats` names sent as
    ``(rows, rest)`` and reshaped on the devices, when those are TPUs."""
    per_leaf = _per_leaf(leaves, shardings)
    platform = next(iter(per_leaf[0].device_set)).platform
    if platform not in FLAT_PLATFORMS or all(flat is None for flat in flats):
        return jax.device_put(leaves, shardings)
    sent = [
        leaf if flat is None else leaf.reshape(leaf.shape[0], math.prod(leaf.shape[1:]))
        for leaf, flat in zip(leaves, flats, strict=True)
    ]
    targets = [
        sharding if flat is None else flat for sharding, flat in zip(per_leaf, flats, strict=True)
    ]
    placed = jax.device_put(sent, targets)
    return [
        array if flat is None else _reshape_on_devices(leaf.shape, sharding)(array)
        for array, leaf, sharding, flat in zip(placed, leaves, per_leaf, flats, strict=True)
    ]
