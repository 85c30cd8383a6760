"""Data files out of the page cache before a candidate reads them, and how much of them
is in it after: `benchmarks.store` measures reads of a corpus far larger than memory.

`drop` writes a file's dirty pages back (``fdatasync``) and then asks the kernel to
forget its cached pages (``posix_fadvise(POSIX_FADV_DONTNEED)``): a page no process maps
is dropped, so the next read of it comes from the disk (Linux; a page a live process
maps stays, and the benchmark drops files only between candidates, when none does).
`cached_bytes` asks which pages of each file are in the page cache now (``mincore`` on
a shared read-only map of the file, made with libc's ``mmap``: mapping reads nothing,
and ``mincore`` looks up the file's pages, touched or not, without faulting them in);
after a candidate whose files were dropped first, that is every byte of them read from
the disk by any process, read-ahead included, each page once.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

_PROT_READ, _MAP_SHARED = 1, 1
_MAP_FAILED = ctypes.c_void_p(-1).value
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc


def files_under(*roots: str | Path) -> list[str]:
    """Every regular file under `roots` (folders or files), sorted."""
    found: list[str] = []
    for root in map(Path, roots):
        if root.is_file():
            found.append(str(root))
        elif root.is_dir():
            found += [str(path) for path in root.rglob("*") if path.is_file()]
    return sorted(found)


def drop(paths: Iterable[str]) -> None:
    """Each file's pages written back, then dropped from the page cache."""
    for path in paths:
        descriptor = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(descriptor)
            os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(descriptor)


def sync(paths: Iterable[str]) -> None:
    """Each file's pages written to the disk (``fdatasync``); kept in the cache."""
    for path in paths:
        descriptor = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(descriptor)
        finally:
            os.close(descriptor)


def cached_bytes(paths: Iterable[str]) -> int:
    """Bytes of the files `paths` in the page cache now (whole pages, the last one's
    bytes past the end of its file left out)."""
    libc, total = _libc(), 0
    for path in paths:
        size = os.path.getsize(path)
        if size == 0:
            continue
        descriptor = os.open(path, os.O_RDONLY)
        try:
            address = libc.mmap(None, size, _PROT_READ, _MAP_SHARED, descriptor, 0)
            if address in (None, _MAP_FAILED):
                raise OSError(ctypes.get_errno(), f"mmap of {path} failed")
            try:
                pages = -(-size // _PAGE)
                vector = (ctypes.c_ubyte * pages)()
                if libc.mincore(address, size, vector) != 0:
                    raise OSError(ctypes.get_errno(), f"mincore of {path} failed")
                resident = np.frombuffer(vector, np.uint8) & 1
                count = int(np.count_nonzero(resident))
                total += count * _PAGE - (_PAGE * pages - size if resident[-1] else 0)
            finally:
                libc.munmap(address, size)
        finally:
            os.close(descriptor)
    return total
