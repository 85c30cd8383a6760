"""Every private CPython or numpy attribute, every read of ``/proc`` and every call into
the C library, in one place.

As `datarax._compat` does for JAX: each is guarded, falls back to a public answer or
to "unknown" when the private name is gone, and says on which versions it was checked
(CPython 3.11.7, 3.12.1 and 3.13.0; numpy 2.0 to 2.4). Nothing else in the library
reads a private attribute of the standard library or numpy, or parses ``/proc``; glibc's
``mallopt``, which only glibc has, is called here too.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import dataclasses
import inspect
import multiprocessing
import platform
import types
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any


def importing_main() -> bool:
    """Whether this process is a multiprocessing child still importing its parent's
    script (or unpickling what it is to run).

    ``BaseProcess._inheriting`` is set by multiprocessing's spawn and forkserver
    preparation for exactly that time, and multiprocessing reads it itself to refuse
    starting processes from there. Fallback: False (a script without a main guard then
    shows as "a worker died" instead of its own error).
    """
    return bool(getattr(multiprocessing.current_process(), "_inheriting", False))


def running_inside(code: types.CodeType | None) -> bool:
    """Whether a frame of `code` is on this thread's stack (the public frame API)."""
    frame = inspect.currentframe()
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


def memmap_handle(array: Any) -> Any:
    """The ``mmap.mmap`` that an ``np.memmap`` made from a file names (``memmap._mmap``),
    or None: arrays numpy made from a memmap carry it, plain views of one do not."""
    return getattr(array, "_mmap", None)


def give_memmap_handle(array: Any, handle: Any) -> None:
    """Makes `array` (a memmap built over a mapped buffer) name `handle` as its file's
    mapping, as numpy's own memmaps do (so ``flush`` and ``filename`` work on it)."""
    with contextlib.suppress(AttributeError):
        array._mmap = handle


@dataclasses.dataclass(frozen=True)
class ProcStat:
    """What ``/proc/<pid>/stat`` says of a process (see proc_pid_stat(5))."""

    state: str  # "R", "S", "Z" (a zombie), ...
    parent: int
    flags: int  # the kernel's PF_* flags of the process (<linux/sched.h>)
    start_time: int  # clock ticks since boot: with the pid, names the process for good


def proc_stat(pid: int) -> ProcStat | None:
    """`pid`'s state, parent and start time from ``/proc`` (Linux); None when the process
    is gone or there is no ``/proc``. The command name, in parentheses, may hold any
    character, so the fields are read after its last ``)``."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return ProcStat(fields[0], int(fields[1]), int(fields[6]), int(fields[19]))
    except (OSError, IndexError, ValueError):
        return None


def proc_gone(pid: int) -> bool:
    """Whether `pid` has no entry in ``/proc`` (Linux): it ended and was reaped; False
    where there is no ``/proc`` to tell."""
    return Path("/proc/self").is_dir() and proc_stat(pid) is None


def proc_children(pid: int) -> list[int]:
    """The pids of `pid`'s children, from ``/proc/<pid>/task/<tid>/children`` (Linux, a
    kernel built with it since 4.2); [] when unknown."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError):
                found += [int(child) for child in (task / "children").read_text().split()]
    return found


def proc_environ(pid: int) -> list[bytes] | None:
    """`pid`'s environment as ``NAME=value`` entries, from ``/proc/<pid>/environ`` (Linux);
    None when the process is gone, another user's, or there is no ``/proc``."""
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None


def proc_resident_pages(pid: int) -> int | None:
    """How many pages of memory `pid` holds in RAM, from ``/proc/<pid>/statm`` (Linux);
    None when the process is gone or there is no ``/proc``."""
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None


def proc_local_port_range() -> tuple[int, int] | None:
    """The first and last port Linux hands out for outgoing connections, from
    ``/proc/sys/net/ipv4/ip_local_port_range``; None where that is not known."""
    try:
        first, last = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(first), int(last)
    except (OSError, ValueError):
        return None


def proc_pids() -> Iterator[int]:
    """The pid of every process ``/proc`` shows (none without ``/proc``)."""
    with contextlib.suppress(OSError):
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                yield int(entry.name)


def glibc_mallopt(settings: Iterable[tuple[int, int]]) -> bool:
    """Gives glibc's allocator each ``(option, value)`` of `settings` (``mallopt``, from
    ``<malloc.h>``); whether it took them all. False where the C library is not glibc
    (macOS, musl) or has no ``mallopt``.

    Example:
        >>> import platform
        >>> glibc_mallopt([]) == (platform.libc_ver()[0] == "glibc")
        True
    """
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    return all(mallopt(option, ctypes.c_int(value)) == 1 for option, value in settings)
