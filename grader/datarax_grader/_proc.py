"""What the grader reads of ``/proc`` (Linux), and the one ``prctl`` it makes.

The grader's own copies, so that it borrows nothing private of the library: each read
returns None (or nothing) when the process is gone or there is no ``/proc``.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path

_PR_SET_CHILD_SUBREAPER = 36  # from <linux/prctl.h>


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


def proc_resident_pages(pid: int) -> int | None:
    """How many pages of memory `pid` holds in RAM, from ``/proc/<pid>/statm`` (Linux);
    None when the process is gone or there is no ``/proc``."""
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None


def proc_pids() -> Iterator[int]:
    """The pid of every process ``/proc`` shows (none without ``/proc``)."""
    with contextlib.suppress(OSError):
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                yield int(entry.name)


def become_subreaper() -> bool:
    """Makes orphaned descendants of this process its children (Linux); False elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
