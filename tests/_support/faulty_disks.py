"""Disks that fail: a small tmpfs where this machine allows mounting one, and a file
system layer that runs out of space after a quota, which works everywhere.

Child processes of the tests import this module too, so it has no pytest in it.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import functools
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


@functools.cache
def can_mount() -> bool:
    """Whether this process may mount a tmpfs (Linux, root, allowed): tried once."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return False
    with tempfile.TemporaryDirectory() as folder:
        try:
            with small_tmpfs(Path(folder)):
                return True
        except (OSError, subprocess.SubprocessError):
            return False


def read_only(name: str) -> BaseException:
    """The error a write on a read-only file system raises."""
    return OSError(errno.EROFS, os.strerror(errno.EROFS), name)


@contextlib.contextmanager
def small_tmpfs(folder: Path, size: str = "2m") -> Iterator[Path]:
    """A tmpfs of `size` mounted on `folder` for the block; raises OSError if none."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    if mounted.returncode:
        raise OSError(f"cannot mount a tmpfs on {folder}: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], timeout=30, check=False)


def remount_read_only(folder: Path) -> None:
    """Makes the tmpfs on `folder` read-only."""
    subprocess.run(["mount", "-o", "remount,ro", str(folder)], timeout=30, check=True)


def _disk_full(name: str) -> BaseException:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), name)


class _QuotaFile:
    """A file opened for writing whose writes fail past the quota (ENOSPC by default)."""

    def __init__(self, file: Any, quota: list[int], error: Callable[[str], BaseException]):
        self._file, self._quota, self._error = file, quota, error

    def write(self, data: Any) -> int:
        if len(data) > self._quota[0]:
            self._file.write(data[: self._quota[0]])  # a partial write, then the failure
            self._quota[0] = 0
            self._file.flush()
            raise self._error(self._file.name)
        self._quota[0] -= len(data)
        return self._file.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)

    def __enter__(self) -> _QuotaFile:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._file.close()


@contextlib.contextmanager
def disk_with_quota(
    root: Path, quota_bytes: int, error: Callable[[str], BaseException] = _disk_full
) -> Iterator[list[int]]:
    """Python writes of files under `root` fail with ENOSPC after `quota_bytes` bytes.

    Orbax writes its metadata and the pipeline's JSON state through Python's ``open``
    (arrays go through TensorStore), so a save fails as on a full disk. `error` makes
    the exception instead (a KeyboardInterrupt for an interrupted save). Yields the
    remaining quota as a one-element list, which the caller may raise again.
    """
    quota = [quota_bytes]
    real_open = builtins.open
    prefix = str(root)

    def open_with_quota(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        opened = real_open(file, mode, *args, **kwargs)
        writing = any(flag in mode for flag in "wax+")
        if writing and isinstance(file, (str, os.PathLike)) and os.fspath(file).startswith(prefix):
            return _QuotaFile(opened, quota, error)
        return opened

    builtins.open = open_with_quota
    try:
        yield quota
    finally:
        builtins.open = real_open
