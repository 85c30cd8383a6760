"""A seeded permutation of ``[0, size)`` computed per position, with no array of `size`
entries: a pipeline's epoch order and a packing plan's order over billions of rows.

Position p maps to the index a small block cipher gives it: a balanced Feistel network
of six rounds over the smallest even number of bits that counts `size`, each round a
64-bit mix of one half with a round key drawn from the seed, and values that land past
`size` enciphered again until they fall inside (cycle walking: the cipher is a bijection
of its whole domain, so walking from a position inside returns inside, after fewer than
four steps on average since the domain is less than four times `size`). Every host that
builds it from the same size and seed computes the same order, position by position.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import numpy as np

_ROUNDS = 6
_MULTIPLIERS = (np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))


def _mixed(values: np.ndarray) -> np.ndarray:
    """A bijective scramble of 64-bit words (shifts, xors and odd multipliers)."""
    values = values ^ (values >> np.uint64(30))
    values = values * _MULTIPLIERS[0]
    values = values ^ (values >> np.uint64(27))
    values = values * _MULTIPLIERS[1]
    return values ^ (values >> np.uint64(31))


_WORD = (1 << 64) - 1


def _mixed_int(value: int) -> int:
    """`_mixed` of one word, in Python ints (wrapped to 64 bits)."""
    value ^= value >> 30
    value = (value * 0xBF58476D1CE4E5B9) & _WORD
    value ^= value >> 27
    value = (value * 0x94D049BB133111EB) & _WORD
    return value ^ (value >> 31)


class Permutation:
    """A random order of ``[0, size)`` from `seed`: ``order[p]`` is the index at
    position p, for an int, a slice or an array of positions.

    Example:
        >>> order = Permutation(10, [1, 2])
        >>> sorted(order[:].tolist()) == list(range(10))
        True
        >>> int(order[3]) == int(order[np.array([3])][0]) == order.one(3)
        True
    """

    def __init__(self, size: int, seed: Sequence[int]):
        self.size = int(size)
        bits = max(2, (self.size - 1).bit_length())
        self._half = np.uint64((bits + bits % 2) // 2)
        self._mask = np.uint64((1 << int(self._half)) - 1)
        words = [int(word) for word in seed]
        self._keys = np.random.default_rng(words).integers(0, 2**63, _ROUNDS, dtype=np.uint64)
        self._key_list = [int(key) for key in self._keys]

    def __len__(self) -> int:
        return self.size

    def _enciphered(self, values: np.ndarray) -> np.ndarray:
        left, right = values >> self._half, values & self._mask
        for key in self._keys:
            left, right = right, left ^ (_mixed(right ^ key) & self._mask)
        return (left << self._half) | right

    def one(self, position: int) -> int:
        """The index at `position` (in ``[0, size)``), in plain Python arithmetic: a
        single position costs microseconds, not numpy's per-call overhead."""
        half, mask, value = int(self._half), int(self._mask), operator.index(position)
        while True:
            left, right = value >> half, value & mask
            for key in self._key_list:
                left, right = right, left ^ (_mixed_int(right ^ key) & mask)
            value = (left << half) | right
            if value < self.size:
                return value

    def __getitem__(self, positions: int | slice | np.ndarray) -> np.ndarray:
        if isinstance(positions, slice):
            positions = np.arange(*positions.indices(self.size))
        elif np.ndim(positions) == 0:
            return self[np.array([operator.index(positions)])][0]
        asked = np.asarray(positions)
        if asked.size and (asked.min() < 0 or asked.max() >= self.size):
            raise IndexError(
                f"positions must be in [0, {self.size}); got {asked.min()}..{asked.max()}"
            )
        values = self._enciphered(asked.astype(np.uint64))
        outside = np.flatnonzero(values >= self.size)
        while outside.size:
            values[outside] = self._enciphered(values[outside])
            outside = outside[values[outside] >= self.size]
        return values.astype(np.int64)
