"""How a pipeline's source and stages are pickled for its worker processes: once, when
the pipeline is built (with ``workers="auto"``, once it chooses workers), with
memory-mapped files shared by path, not copied; `_refusals` words the errors.

The rule: an array that views a file mapped for reading or for reading and writing
(``np.memmap`` in mode ``"r"``, ``"r+"`` or ``"w+"``) reaches a worker as that file's path
and where in it the array lies, and the worker maps the same file again; anything else is
pickled as `pickle` would.

This holds wherever the array sits in what is pickled: a memmap, a slice or other view
of one (``mm[100:200]``, ``mm[:, ::2]``, ``mm.T``), or a plain array viewing one (the
leaves of an `ArraySource` over ``np.load(path, mmap_mode="r")``), alone or inside
lists, dicts and objects. In the worker it is the same kind of array (a memmap stays a
memmap) with the same dtype, shape, strides (so Fortran order too) and place in the file,
read-only where it was read-only. A 400 MB file thus costs each worker a few hundred bytes
of pickle instead of two copies of 400 MB: the file's pages live in the operating system's
page cache, once for every process that maps them (a worker's VmRSS counts the pages it
has mapped, but what it holds alone, its RssAnon, does not grow with the file).

Mode ``"w+"`` is mapped again as ``"r+"``: ``"w+"`` would empty the file. Writes this
process makes through an ``"r+"`` or ``"w+"`` mapping are seen by the workers (they map
the same file), as ``workers=0`` would see them: in the batches read after the write,
which with workers are those not already made ahead. Mode ``"c"`` (copy on write) is
pickled whole: its array may hold changes that live only in this process's memory, which
the file does not have. So is a memmap whose file is gone, or shorter than the mapping,
or which was made from a file object without a name, or an empty array.

The worker checks the file before mapping it: if its size or its inode (another file now
at that path) differs from when the pipeline was built, or, for mode ``"r"``, its time of
last modification (``st_mtime_ns``), the worker would read other data than this process,
so its batches raise `SourceFileChangedError` naming the file. The modification time of
an ``"r+"`` or ``"w+"`` file is not compared: this process's own writes through its
mapping move it, and the workers see those writes.
"""

from __future__ import annotations

import io
import mmap
import os
import pickle
import pickletools
import sys
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np

from datarax._syscompat import give_memmap_handle, memmap_handle
from datarax.errors import SourceFileChangedError
from datarax.pipeline.workers._refusals import not_pickled, refusal

# How a worker maps again a file mapped in each mode here; "c" is absent: pickled whole.
Mode = Literal["r", "r+"]
_REOPENED: dict[str, Mode] = {"r": "r", "r+": "r+", "w+": "r+"}
Stamp = tuple[int, int, int | None]  # (size, inode, modification time in ns or None)


def pickled_for_workers(source: Any, stages: Sequence[Callable[[Any], Any]]) -> bytes:
    """`source` and `stages` pickled for the workers, each part on its own.

    Raises:
        NotPicklableError: one of them cannot be pickled, or is defined in an
            interactive ``__main__`` (a notebook cell), which a worker cannot import.
    """
    main = sys.modules.get("__main__")
    # A worker re-imports a script's __main__ by its path, but not a notebook's, an
    # interactive session's or a module's run with -m.
    unimportable = not hasattr(main, "__file__") or getattr(main, "__spec__", None) is not None
    # Protocol 2 names every global a pickle needs in its GLOBAL opcodes, which is how
    # a reference to __main__ is found; otherwise the default protocol.
    protocol = 2 if unimportable else pickle.DEFAULT_PROTOCOL
    parts = []
    for part, what in (("source", source), *((f"stages[{i}]", s) for i, s in enumerate(stages))):
        try:
            dumped = dumps_for_workers(what, protocol)
        except Exception as error:  # pickle raises several types: each one is this refusal
            raise not_pickled(part, what, error) from error
        if unimportable and "__main__" in _modules_named(dumped):
            why = "is defined in __main__ (a notebook, a session or a module run with -m)"
            raise refusal(part, what, why)
        parts.append(dumped)
    return pickle.dumps(parts)


def _modules_named(payload: bytes) -> set[str]:
    """The modules a protocol-2 pickle imports to load (its GLOBAL opcodes)."""
    return {
        str(argument).split(" ")[0]
        for opcode, argument, _ in pickletools.genops(payload)
        if opcode.name == "GLOBAL"
    }


def dumps_for_workers(obj: Any, protocol: int) -> bytes:
    """`obj` pickled with `protocol`, every array that views a shared file mapping as the
    file's path and place in it (see the module's docstring)."""
    buffer = io.BytesIO()
    _WorkerPickler(buffer, protocol).dump(obj)
    return buffer.getvalue()


def _stamp(stat: os.stat_result, mode: str) -> Stamp:
    return stat.st_size, stat.st_ino, stat.st_mtime_ns if mode == "r" else None


def _mapping_of(array: np.ndarray) -> np.memmap | None:
    """The memmap that made the file mapping `array` views, if any: the one whose base is
    the `mmap.mmap` itself."""
    owner: object = array
    while isinstance(owner, np.ndarray):
        if isinstance(owner, np.memmap) and isinstance(owner.base, mmap.mmap):
            return owner
        owner = owner.base
    return None


class _MappedFile:
    """A file mapping as a worker makes it again: pickled as a call to `_map_again`.

    One per mapping of this process, so the pickle memoizes it and a worker maps the
    file once for every array that views it, as here."""

    __slots__ = ("length", "mode", "offset", "path", "stamp")

    def __init__(
        self, path: str | os.PathLike[str], mode: Mode, offset: int, length: int, stamp: Stamp
    ):
        self.path, self.mode, self.stamp = path, mode, stamp
        self.offset, self.length = offset, length

    def __reduce__(self) -> tuple[Any, ...]:
        return _map_again, (self.path, self.mode, self.offset, self.length, self.stamp)


class _WorkerPickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO, protocol: int):
        super().__init__(file, protocol=protocol)
        # id of a mapping's memmap -> (that memmap, kept alive so the id stays its own;
        # its _MappedFile, or None when it is pickled whole)
        self._files: dict[int, tuple[np.memmap, _MappedFile | None]] = {}

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is not np.ndarray and type(obj) is not np.memmap:
            return NotImplemented  # a user's subclass pickles as it chooses
        return self._as_view(obj) or NotImplemented

    def _file(self, mapping: np.memmap) -> _MappedFile | None:
        if id(mapping) not in self._files:
            self._files[id(mapping)] = mapping, _shared_file(mapping)
        return self._files[id(mapping)][1]

    def _as_view(self, array: np.ndarray) -> tuple[Any, ...] | None:
        mapping = _mapping_of(array)
        if mapping is None or array.size == 0:
            return None
        file = self._file(mapping)
        if file is None:
            return None
        start = array.__array_interface__["data"][0] - mapping.__array_interface__["data"][0]
        reach = [stride * (n - 1) for stride, n in zip(array.strides, array.shape, strict=True)]
        low = start + sum(r for r in reach if r < 0)
        high = start + sum(r for r in reach if r > 0) + array.itemsize
        if low < 0 or high > mapping.nbytes:  # not inside the mapping (as_strided can do it)
            return None
        layout = (array.shape, array.dtype, array.strides, start)
        memmap = None
        if isinstance(array, np.memmap):  # whether it names its file, and its offset
            memmap = memmap_handle(array) is not None, array.offset
        return _view, (file, layout, array.flags.writeable, memmap)


def _shared_file(mapping: np.memmap) -> _MappedFile | None:
    """How a worker maps again the file of `mapping`, or None to pickle it whole."""
    mode = _REOPENED.get(mapping.mode or "")
    path = mapping.filename
    if mode is None or not isinstance(path, (str, os.PathLike)):
        return None  # np.memmap names no file it was given as a file object without a name
    try:
        stat = os.stat(path)
    except OSError:
        return None  # gone: the mapping is all that is left of it
    if stat.st_size < mapping.offset + mapping.nbytes:
        return None  # not the file that was mapped
    return _MappedFile(path, mode, mapping.offset, mapping.nbytes, _stamp(stat, mode))


def _changed(path: str | os.PathLike[str], why: str) -> SourceFileChangedError:
    return SourceFileChangedError(
        f"The pipeline's source maps the file {path}, which is no longer as it was when "
        f"the pipeline was built: {why}. Its worker processes would read other data than "
        "this process does; build a new Pipeline over the file as it is now.",
        path=os.fspath(path),
    )


def _map_again(
    path: str | os.PathLike[str], mode: Mode, offset: int, length: int, stamp: Stamp
) -> np.memmap:
    """In a worker: the bytes ``offset:offset + length`` of `path`, mapped in `mode`.

    Raises:
        SourceFileChangedError: the file is not the one the pipeline's process mapped.
    """
    try:
        now = _stamp(os.stat(path), mode)
    except OSError as error:
        raise _changed(path, f"it cannot be found or read ({error})") from None
    if now != stamp:
        size, inode, modified = stamp
        if now[0] != size:
            why = f"its size was {size} bytes, it is {now[0]} now"
        elif now[1] != inode:
            why = "another file is at that path now"
        else:
            why = f"it was modified (st_mtime_ns {modified} then, {now[2]} now)"
        raise _changed(path, why)
    return np.memmap(path, dtype=np.uint8, mode=mode, offset=offset, shape=(length,))


def _view(
    file: np.memmap,
    layout: tuple[tuple[int, ...], np.dtype[Any], tuple[int, ...], int],
    writeable: bool,
    memmap: tuple[bool, int] | None,
) -> np.ndarray:
    """In a worker: the array of `layout` (shape, dtype, strides, start in bytes) in the
    mapped `file`; a memmap when `memmap` is given: (whether it names its file, like
    np.memmap's own arrays, and the offset it states)."""
    shape, dtype, strides, start = layout
    if memmap is None:
        array = np.ndarray(shape, dtype, buffer=file, offset=start, strides=strides)
    else:
        array = np.ndarray.__new__(
            np.memmap, shape, dtype, buffer=file, offset=start, strides=strides
        )
        names_its_file, offset = memmap
        if names_its_file:  # what np.memmap sets on the arrays it makes and on their slices
            give_memmap_handle(array, memmap_handle(file))
            array.filename, array.mode, array.offset = file.filename, file.mode, offset
    if not writeable:
        array.flags.writeable = False
    return array
