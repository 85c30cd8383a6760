"""How a pipeline worker hands a batch to the pipeline's process without pickling arrays.

The pipeline's process owns a set of *slots*: files in shared memory (``/dev/shm`` where
there is one) of one size, each mapped in its own memory and in every worker's. With each
task it lends a worker a slot; the worker copies every numpy array of the batch into it
(the one copy of the transport) and answers with the batch's structure, in which each
array is replaced by its place in the slot. The pipeline's process turns that back into
numpy arrays that are views of the slot, with no copy. The rest of the batch (strings,
numbers, object arrays) is pickled as before.

A slot is lent again only once nothing refers to the arrays in it: no leaf of the batch,
no view of one, no jax array that aliases one. So a batch the user keeps is never
overwritten; dropping it is what gives its slot back. Slots are made at the size the
largest batch so far needed and reused, so a worker writes into memory it has already
touched; a batch that does not fit its slot is pickled whole and its size makes the next
slots larger. The very first batch has no slot (no size is known yet), so the workers
make it alone, before any other (`Slots.sized`): batches asked for earlier would all
come back pickled.

Slots live as long as the pool of workers: closing it deletes their files (a slot still
holding a kept batch stays mapped until the batch is dropped). Their names start with
``datarax-batch-<pid>-``, so a worker whose pipeline's process is gone, even killed,
deletes them all before it exits.
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

_ALIGN = 64  # each array starts on a cache line (and where jax's CPU client can alias it)
_PAGE = mmap.PAGESIZE
# Each mapping is filled in at once, so neither side takes a page fault per page later.
_MAP_FLAGS = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)


def _shared_folder() -> str:
    """Where slot files go: /dev/shm (memory) where it exists, else the temp folder."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        return "/dev/shm"
    return tempfile.gettempdir()


def _map(path: str, size: int) -> mmap.mmap:
    fd = os.open(path, os.O_RDWR)
    try:
        return mmap.mmap(fd, size, flags=_MAP_FLAGS)
    finally:
        os.close(fd)  # the mapping keeps the memory


@dataclass(frozen=True)
class _InSlot:
    """Where one array of a batch lies in its slot."""

    offset: int
    dtype: np.dtype
    shape: tuple[int, ...]
    writeable: bool


@dataclass(frozen=True)
class Lent:
    """A slot lent to a worker with one task: the worker writes the batch there."""

    path: str
    size: int


@dataclass(frozen=True)
class Answer:
    """A worker's answer to a task: the batch with each array replaced by its `_InSlot`
    (`written`: the arrays are in the slot lent with the task), or the batch itself,
    pickled (it did not fit, or no slot was lent); `needed` is the bytes it takes."""

    batch: Any
    written: bool
    needed: int


def _shared(leaf: Any) -> bool:
    """Whether `leaf` goes through a slot: a numpy array of plain (non-object) data."""
    return type(leaf) in (np.ndarray, np.memmap) and not leaf.dtype.hasobject


def _layout(batch: Any) -> tuple[Any, list[tuple[_InSlot, np.ndarray]], int]:
    """`batch` with each shared array replaced by its `_InSlot`, the (place, array)
    pairs, and the bytes they take."""
    pairs: list[tuple[_InSlot, np.ndarray]] = []
    end = 0

    def place(leaf: Any) -> Any:
        nonlocal end
        if not _shared(leaf):
            return leaf
        offset = -(-end // _ALIGN) * _ALIGN
        end = offset + leaf.nbytes
        pairs.append((_InSlot(offset, leaf.dtype, leaf.shape, bool(leaf.flags.writeable)), leaf))
        return pairs[-1][0]

    return jax.tree_util.tree_map(place, batch), pairs, end


class WorkerSide:
    """In a worker: the slots it was lent, each mapped once, and the answers it writes."""

    def __init__(self) -> None:
        self._maps: dict[str, mmap.mmap] = {}

    def answer(self, batch: Any, slot: Lent | None) -> Answer:
        """`batch` written into `slot` when it fits, as the answer to send back."""
        skeleton, pairs, needed = _layout(batch)
        if slot is None or needed > slot.size:
            return Answer(batch, False, needed)
        memory = self._maps.get(slot.path)
        if memory is None:
            try:
                memory = _map(slot.path, slot.size)
            except OSError:  # its pool is closing and deleted the file: nobody waits
                return Answer(batch, False, needed)
            # Smaller slots are never lent again (the parent deleted them): unmapped.
            for path in [path for path, old in self._maps.items() if len(old) < slot.size]:
                self._maps.pop(path).close()
            self._maps[slot.path] = memory
        for place, array in pairs:
            if array.size:
                np.copyto(np.ndarray(array.shape, array.dtype, memory, place.offset), array)
        return Answer(skeleton, True, needed)


def _prefix(owner: int) -> str:
    """The start of the names of the slot files of the process `owner`."""
    return f"datarax-batch-{owner}-"


def delete_files_of(owner: int) -> None:
    """Deletes the slot files of the process `owner` (it is gone: a worker calls this)."""
    for path in glob.glob(os.path.join(_shared_folder(), glob.escape(_prefix(owner)) + "*")):
        _unlink(path)


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):  # deleted already (by another worker, or at close)
        os.unlink(path)


def _delete_files(slots: dict[str, _Slot]) -> None:
    for path in list(slots):
        _unlink(path)


class _Slot:
    def __init__(self, size: int):
        fd, self.path = tempfile.mkstemp(prefix=_prefix(os.getpid()), dir=_shared_folder())
        try:
            # Allocates the memory now: a full /dev/shm is an OSError here, not a SIGBUS
            # in a worker writing to a page that cannot be had.
            if hasattr(os, "posix_fallocate"):
                os.posix_fallocate(fd, 0, size)
            else:
                os.ftruncate(fd, size)
            self.memory = mmap.mmap(fd, size, flags=_MAP_FLAGS)
        except OSError:
            os.close(fd)
            os.unlink(self.path)
            raise
        os.close(fd)
        self.size = size


class Slots:
    """The pipeline's process's side: slots to lend, and batches made from answers.

    `lend` gives a slot for a task (None while no batch size is known or when shared
    memory is full: the batch is then pickled); `batch` turns an answer into the batch;
    `give_back` returns a slot whose answer will never be read. Safe to call from any
    thread: slots come back from finalizers and futures' callbacks.
    """

    def __init__(self) -> None:
        self._free: collections.deque[_Slot] = collections.deque()
        self._files: dict[str, _Slot] = {}
        self._size = 0  # the size of new slots: the most any batch needed so far
        self._full = False  # making a slot failed: every batch is pickled from then on
        self._answered = False  # whether a batch came back, telling the size slots need
        self._closed = False
        # Files left when this set is collected, or at exit, are deleted then.
        weakref.finalize(self, _delete_files, self._files)

    def lend(self) -> Lent | None:
        """A slot for one task, or None: that task's batch comes back pickled."""
        while self._free:
            try:
                slot = self._free.popleft()
            except IndexError:  # taken by another thread between the test and the pop
                break
            if slot.size >= self._size:
                return Lent(slot.path, slot.size)
            self._delete(slot)  # too small for the batches now
        if self._closed or self._full or not self._size:
            return None
        try:
            slot = _Slot(-(-self._size // _PAGE) * _PAGE)
        except OSError:
            self._full = True
            return None
        self._files[slot.path] = slot
        return Lent(slot.path, slot.size)

    @property
    def sized(self) -> bool:
        """Whether a batch came back, telling the size slots need (none when it held no
        array), or no slot will be lent (closed, or shared memory full)."""
        return self._answered or self._closed or self._full

    def give_back(self, lent: Lent | None) -> None:
        """`lent` can be lent again (its task was cancelled, failed or was not needed)."""
        if lent is not None:
            self._release(self._files.get(lent.path))

    def batch(self, answer: Answer, lent: Lent | None) -> Any:
        """The batch of the `answer` to the task `lent` went with. Its arrays are views of
        that slot, lent again once all of them (and any view of them) are gone."""
        self._size = max(self._size, answer.needed)
        self._answered = True
        if not answer.written or not answer.needed:  # nothing of the batch is in the slot
            self.give_back(lent)
            return answer.batch
        assert lent is not None, "a worker wrote into a slot it was not lent"
        slot = self._files[lent.path]
        whole = np.frombuffer(slot.memory, np.uint8, count=answer.needed)
        weakref.finalize(whole, self._release, slot).atexit = False

        def view(leaf: Any) -> Any:
            if not isinstance(leaf, _InSlot):
                return leaf
            stop = leaf.offset + math.prod(leaf.shape) * leaf.dtype.itemsize
            array = whole[leaf.offset : stop].view(leaf.dtype).reshape(leaf.shape)
            array.flags.writeable = leaf.writeable
            return array

        return jax.tree_util.tree_map(view, answer.batch, is_leaf=lambda x: isinstance(x, _InSlot))

    def _release(self, slot: _Slot | None) -> None:
        if slot is None:
            return
        if self._closed:
            self._delete(slot)
        else:
            self._free.append(slot)

    def _delete(self, slot: _Slot) -> None:
        if self._files.pop(slot.path, None) is not None:
            _unlink(slot.path)

    def close(self) -> None:
        """Deletes every slot file; a slot holding a kept batch stays mapped until then."""
        self._closed = True
        for slot in list(self._files.values()):
            self._delete(slot)
        self._free.clear()

    def __len__(self) -> int:
        """How many slots exist now (lent or free)."""
        return len(self._files)
