"""A worker's side of the slots (`datarax.pipeline.workers._slots`): the slot it was lent
with a task, where its stages' `output_array` calls make their arrays, and the answer
that hands the batch over.

While a worker makes a batch, `output_array` carves its arrays out of the lent slot, one
after the other, each on a cache line (`begin`). Answering, a leaf of the batch that lies
in that slot and is C-contiguous (one of those arrays, or a view of one) is sent as its
place there, with no copy; every other array is copied in after them. When they do not
fit, or nothing was lent, the whole batch goes to a slot of the worker's own, as before
`output_array` existed. The answer says how many bytes were copied.
"""

from __future__ import annotations

import mmap
import os
import threading
from typing import Any

import jax
import numpy as np

from datarax.pipeline.workers._slots import (
    _ALIGN,
    _PAGE,
    Answer,
    Lent,
    _InSlot,
    _make_file,
    _map,
    shared,
)

Placed = dict[int, int]  # where an array made in the slot starts in it, by its address


class _Area:
    """The lent slot's memory, handed out front to back to one batch's output arrays."""

    def __init__(self, memory: mmap.mmap):
        self.whole = np.frombuffer(memory, np.uint8)
        self.base = self.whole.__array_interface__["data"][0]
        self.end = 0
        self._lock = threading.Lock()  # a stage may fill its batch from threads

    def __call__(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray | None:
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        with self._lock:
            offset = -(-self.end // _ALIGN) * _ALIGN
            if offset + nbytes > len(self.whole):
                return None  # no room: a plain array, copied once
            self.end = offset + nbytes
        return self.whole[offset : offset + nbytes].view(dtype).reshape(shape)

    def offset_of(self, leaf: np.ndarray) -> int | None:
        """Where `leaf` lies in the slot, when it is a C-contiguous run of it."""
        if not leaf.flags.c_contiguous:
            return None
        start = leaf.__array_interface__["data"][0] - self.base
        return start if start >= 0 and start + leaf.nbytes <= self.end else None


def _layout(
    batch: Any, start: int = 0, area: _Area | None = None
) -> tuple[Any, list[tuple[_InSlot, np.ndarray]], int]:
    """`batch` with each shared array replaced by its `_InSlot`, the (place, array) pairs
    to copy (placed from `start` on), and the bytes the slot needs. An array already in
    `area` keeps its place there and is not copied."""
    pairs: list[tuple[_InSlot, np.ndarray]] = []
    end = start

    def place(leaf: Any) -> Any:
        nonlocal end
        if not shared(leaf):
            return leaf
        writeable = bool(leaf.flags.writeable)
        offset = None if area is None else area.offset_of(leaf)
        if offset is not None:
            return _InSlot(offset, leaf.dtype, leaf.shape, writeable)
        offset = -(-end // _ALIGN) * _ALIGN
        end = offset + leaf.nbytes
        pairs.append((_InSlot(offset, leaf.dtype, leaf.shape, writeable), leaf))
        return pairs[-1][0]

    return jax.tree_util.tree_map(place, batch), pairs, end


class WorkerSide:
    """In a worker: the slots it was lent or made, each mapped once, and its answers."""

    def __init__(self) -> None:
        self._maps: dict[str, mmap.mmap] = {}
        self._area: _Area | None = None

    def begin(self, lent: Lent | None) -> _Area | None:
        """The area that `output_array` makes this batch's arrays in (None: nothing was
        lent, so they are plain arrays)."""
        self._unmap_deleted()
        self._area = None if lent is None else _Area(self._mapped(lent))
        return self._area

    def answer(self, batch: Any, lent: Lent | None, prefix: str) -> Answer:
        """`batch` written into `lent`, or into a slot made for it (its file named with
        `prefix`, the set of slots that adopts it), as the answer to send back."""
        area, self._area = self._area, None
        if area is not None and area.end and lent is not None:
            skeleton, pairs, needed = _layout(batch, area.end, area)
            if needed <= lent.size:
                return self._copied(skeleton, pairs, lent, self._mapped(lent), needed)
            lent = None  # its arrays lie where the others would go: the batch moves whole
        skeleton, pairs, needed = _layout(batch)
        if not pairs:
            return Answer(batch, None, 0)
        if not needed:  # only empty arrays: rebuilt there from their places alone
            return Answer(skeleton, None, 0)
        try:
            slot, memory = self._slot_for(needed, lent, prefix)
        except OSError:  # shared memory is full: the arrays travel pickled
            arrays = tuple(array for _, array in pairs)
            return Answer(skeleton, None, needed, arrays, copied=needed)
        return self._copied(skeleton, pairs, slot, memory, needed)

    @staticmethod
    def _copied(
        skeleton: Any,
        pairs: list[tuple[_InSlot, np.ndarray]],
        slot: Lent,
        memory: mmap.mmap,
        needed: int,
    ) -> Answer:
        for place, array in pairs:
            np.copyto(np.ndarray(array.shape, array.dtype, memory, place.offset), array)
        copied = sum(array.nbytes for _, array in pairs)
        return Answer(skeleton, slot, needed, copied=copied)

    def _mapped(self, lent: Lent) -> mmap.mmap:
        memory = self._maps.get(lent.path)
        if memory is None:
            memory = self._maps[lent.path] = _map(lent.path, lent.size)
        return memory

    def _slot_for(self, needed: int, lent: Lent | None, prefix: str) -> tuple[Lent, mmap.mmap]:
        if lent is not None and needed <= lent.size:
            return lent, self._mapped(lent)
        path, memory = _make_file(prefix, -(-needed // _PAGE) * _PAGE)
        self._maps[path] = memory
        return Lent(path, len(memory)), memory

    def _unmap_deleted(self) -> None:
        """Forgets the slots whose files the pipeline's process deleted: each is unmapped
        once no array of a stage's refers to it, and its memory goes back once no process
        maps it."""
        for path in [path for path in self._maps if not os.path.exists(path)]:
            del self._maps[path]
