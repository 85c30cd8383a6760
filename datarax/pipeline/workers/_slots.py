"""How a pipeline worker hands a batch to the pipeline's process without pickling arrays.

A *slot* is a file in shared memory (``/dev/shm`` where there is one), mapped in the
pipeline's process and in the workers. With each task the pipeline's process lends a
worker a free slot, when it has one of the size recent batches needed; the worker copies
every numpy array of the batch into it (the one copy of the transport), except those its
stages made there with `output_array` (`datarax.pipeline.workers._worker_side`), and
answers with the batch's structure, each array replaced by its place in the slot, and
the pipeline's process turns that back into numpy arrays that are views of the slot:
same dtype (byte order included), shape and writeable flag as the worker's arrays.
Without a slot that fits, the worker makes one itself, of the size the batch needs, and
the pipeline's process adopts it. The rest of a batch (strings, numbers, object arrays)
is pickled.

A slot is lent again only once nothing refers to the arrays in it: no leaf of the
batch, no view of one, no jax array that aliases one, so a batch the user keeps is
never overwritten. A batch that fills less than a quarter of its slot is copied out
and the slot lent again at once, so kept batches hold at most four times their bytes.
New slots are sized for the largest batch among the last `WINDOW` answers, and a free
slot more than four times that size is deleted: memory goes back after one large batch.

Every slot file is named ``datarax-slots-<pid>-<start>-<token>-<set>-...`` after the
process that owns it and the set of slots (one per pool) it belongs to; the owner holds
a lock for its life (`datarax.pipeline.workers._owners`). Closing a set deletes its
files; a worker whose pipeline's process is gone, even killed, or runs another program
(``exec``) deletes that process's files; and a new set first deletes the files of every
owner proven gone (`sweep`), so files left by a process killed together with its
workers (a kernel restart) go at the next start, and files of a live pipeline in
another PID namespace stay.
"""

from __future__ import annotations

import collections
import contextlib
import glob
import math
import mmap
import os
import tempfile
import weakref
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from datarax.pipeline.workers._owners import shared_folder, sweep, this_owner

WINDOW = 16  # answers whose sizes decide the size of new slots
_ALIGN = 64  # each array starts on a cache line (and where jax's CPU client can alias it)
_PAGE = mmap.PAGESIZE
# Each mapping is filled in at once, so neither side takes a page fault per page later.
_MAP_FLAGS = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):  # deleted already (by a worker, or at close)
        os.unlink(path)


def _map(path: str, size: int) -> mmap.mmap:
    fd = os.open(path, os.O_RDWR)
    try:
        return mmap.mmap(fd, size, flags=_MAP_FLAGS)
    finally:
        os.close(fd)  # the mapping keeps the memory


def _make_file(prefix: str, size: int) -> tuple[str, mmap.mmap]:
    """A new slot file of `size` bytes, allocated now, and its mapping."""
    fd, path = tempfile.mkstemp(prefix=prefix, dir=shared_folder())
    try:
        # Allocates the memory now: a full /dev/shm is an OSError here, not a SIGBUS in
        # a process writing to a page that cannot be had.
        if hasattr(os, "posix_fallocate"):
            os.posix_fallocate(fd, 0, size)
        else:
            os.ftruncate(fd, size)
        return path, mmap.mmap(fd, size, flags=_MAP_FLAGS)
    except OSError:
        os.unlink(path)
        raise
    finally:
        os.close(fd)


@dataclass(frozen=True)
class _InSlot:
    """Where one array of a batch lies in its slot (or in `Answer.arrays`)."""

    offset: int
    dtype: np.dtype
    shape: tuple[int, ...]
    writeable: bool


@dataclass(frozen=True)
class Lent:
    """A slot: its file and size. Lent to a worker with a task, or made by one."""

    path: str
    size: int


@dataclass(frozen=True)
class Answer:
    """A worker's answer: the batch with each array replaced by its `_InSlot`, the arrays
    in `slot` (None: the batch held no array with bytes, or shared memory was full and
    the arrays travel pickled in `arrays`, in order); `needed` is the bytes they take."""

    batch: Any
    slot: Lent | None
    needed: int
    arrays: tuple[np.ndarray, ...] = ()
    seconds: tuple[float, float, float] = (0.0, 0.0, 0.0)  # reading, stages, into the slot
    copied: int = 0  # bytes copied to cross (into the slot, or pickled)


def shared(leaf: Any) -> bool:
    """Whether `leaf` goes through a slot: a numpy array of plain (non-object) data."""
    return type(leaf) in (np.ndarray, np.memmap) and not leaf.dtype.hasobject


class _Slot:
    def __init__(self, path: str, memory: mmap.mmap):
        self.path, self.memory, self.size = path, memory, len(memory)


def _delete_files(slots: dict[str, _Slot]) -> None:
    for path in list(slots):
        _unlink(path)


class Slots:
    """The pipeline's process's side: slots to lend, and batches made from answers.

    `lend` gives a free slot for a task (None while none fits: the worker makes one);
    `batch` turns an answer into the batch; `give_back` returns a slot whose answer will
    never be read. Safe to call from any thread: slots come back from finalizers.
    """

    def __init__(self) -> None:
        sweep()
        self.prefix = f"{this_owner()}{id(self):x}-"
        self._free: collections.deque[_Slot] = collections.deque()
        self._files: dict[str, _Slot] = {}
        self._recent: collections.deque[int] = collections.deque(maxlen=WINDOW)
        self._closed = False
        # Files left when this set is collected, or at exit, are deleted then.
        weakref.finalize(self, _delete_files, self._files)

    @property
    def target(self) -> int:
        """The size new slots get: the most any of the last `WINDOW` batches needed."""
        return -(-max(self._recent, default=0) // _PAGE) * _PAGE

    def lend(self) -> Lent | None:
        """A free slot for one task, or None: the worker then makes one of its own."""
        target = self.target
        while self._free:
            try:
                slot = self._free.popleft()
            except IndexError:  # taken by another thread between the test and the pop
                break
            if target <= slot.size <= 4 * target:
                return Lent(slot.path, slot.size)
            self._delete(slot)  # too small for the batches now, or far too large
        if self._closed or not target:
            return None
        try:
            path, memory = _make_file(self.prefix, target)
        except OSError:
            return None  # shared memory is full: the worker tries, or pickles
        self._files[path] = _Slot(path, memory)
        return Lent(path, target)

    def give_back(self, lent: Lent | None) -> None:
        """`lent` can be lent again (its task was abandoned, failed or not needed)."""
        if lent is not None:
            self._release(self._files.get(lent.path))

    def discard(self, answer: Answer | None, lent: Lent | None) -> None:
        """Frees the slots of an answer that will never be read (None: the task failed)."""
        self.give_back(lent)
        if answer is not None and answer.slot is not None and answer.slot != lent:
            self._release(self._adopt(answer.slot))

    def batch(self, answer: Answer, lent: Lent | None) -> Any:
        """The batch of the `answer` to the task `lent` went with. Its arrays are views of
        the answer's slot, lent again once all of them (and any view of them) are gone."""
        if answer.slot != lent:
            self.give_back(lent)  # not used: the worker made a slot, or needed none
        if answer.needed:
            self._recent.append(answer.needed)
        if answer.slot is None:  # no bytes to share, or shared memory was full
            arrays = iter(answer.arrays)
            return _rebuilt(answer.batch, lambda place: next(arrays, None))
        slot = self._adopt(answer.slot)
        whole = np.frombuffer(slot.memory, np.uint8, count=answer.needed)
        if answer.needed * 4 < slot.size:  # small for its slot: copied out, slot free again
            batch = _rebuilt(answer.batch, lambda place: _view(whole, place).copy())
            self._release(slot)
            return batch
        weakref.finalize(whole, self._release, slot).atexit = False
        return _rebuilt(answer.batch, lambda place: _view(whole, place))

    def _adopt(self, lent: Lent) -> _Slot:
        """The slot of `lent`, mapped here first when a worker made it."""
        slot = self._files.get(lent.path)
        if slot is None:
            slot = self._files[lent.path] = _Slot(lent.path, _map(lent.path, lent.size))
        return slot

    def _release(self, slot: _Slot | None) -> None:
        if slot is None:
            return
        if self._closed or slot.size > 4 * max(self.target, _PAGE):
            self._delete(slot)  # closed, or far larger than the batches now: memory back
        else:
            self._free.append(slot)

    def _delete(self, slot: _Slot) -> None:
        if self._files.pop(slot.path, None) is not None:
            _unlink(slot.path)

    def paths(self) -> set[str]:
        """The slot files this set holds now."""
        return set(self._files)

    def close(self) -> None:
        """Deletes every slot file, those made by workers for answers never read
        included; a slot holding a kept batch stays mapped until the batch is dropped."""
        self._closed = True
        for slot in list(self._files.values()):
            self._delete(slot)
        self._free.clear()
        for path in glob.glob(os.path.join(shared_folder(), glob.escape(self.prefix) + "*")):
            _unlink(path)

    def __len__(self) -> int:
        """How many slots exist now (lent or free)."""
        return len(self._files)


def _view(whole: np.ndarray, place: _InSlot) -> np.ndarray:
    stop = place.offset + math.prod(place.shape) * place.dtype.itemsize
    array = whole[place.offset : stop].view(place.dtype).reshape(place.shape)
    array.flags.writeable = place.writeable
    return array


def _rebuilt(skeleton: Any, array_of: Any) -> Any:
    """`skeleton` with each `_InSlot` replaced by ``array_of(place)`` (an empty array of
    its shape when that is None), with the worker's writeable flag."""

    def fill(leaf: Any) -> Any:
        if not isinstance(leaf, _InSlot):
            return leaf
        array = array_of(leaf)
        if array is None:
            array = np.empty(leaf.shape, leaf.dtype)
        if not leaf.writeable:
            array.flags.writeable = False
        return array

    return jax.tree_util.tree_map(fill, skeleton, is_leaf=lambda x: isinstance(x, _InSlot))
