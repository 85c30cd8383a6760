"""Finding and killing every process a worker started, those that left its group too.

A process that calls ``setsid`` (``start_new_session=True``, a daemon's double fork)
leaves its parent's process group, so killing the group misses it. On Linux each
worker therefore makes itself a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``):
an orphan among its descendants becomes its child instead of init's, so the tree
under the worker stays whole while it lives. `descendants` walks that tree through
``/proc/<pid>/task/<tid>/children``; a process is named by (pid, start time), so a pid
reused by an unrelated process is never killed. Elsewhere (no ``/proc``) the tree
is unknown and only process groups are killed.

A worker killed by a signal takes its subreaper role along: what it orphaned then
goes to init. So every worker also carries a mark in its environment
(`MARK_VARIABLE`, unique to the run), which whatever it starts inherits, and `marked`
finds each process that still carries it, wherever it now hangs in the tree. A
worker whose launcher died kills every marked process (`kill_marked`): a peer may
end on its own before it cleans up (JAX ends a process whose coordinator vanished).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from collections.abc import Iterable

from datarax._syscompat import proc_children, proc_environ, proc_pids, proc_stat

_PR_SET_CHILD_SUBREAPER = 36  # from <linux/prctl.h>
_PF_EXITING, _PF_SIGNALED = 0x4, 0x400  # from <linux/sched.h>: a process's flags
MARK_VARIABLE = "DATARAX_CLUSTER_RUN"  # in every worker's environment: the run's folder
Process = tuple[int, int]  # (pid, start time in clock ticks since boot)


def become_subreaper() -> bool:
    """Makes orphaned descendants of this process its children (Linux); False elsewhere."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def start_time(pid: int) -> int | None:
    """When `pid` started (clock ticks since boot); None if it is gone, a zombie or unknown."""
    stat = proc_stat(pid)
    if stat is None or stat.state in ("Z", "X"):  # dead, waiting to be reaped: nothing to kill
        return None
    return stat.start_time


def ending(pid: int) -> bool:
    """Whether `pid` is on its way out on its own (Linux): a signal has ended it or it is
    exiting (``PF_SIGNALED``, ``PF_EXITING``, set before a core dump or the memory is
    freed), or it is dead and waiting to be reaped; False when unknown."""
    stat = proc_stat(pid)
    if stat is None:
        return False
    return stat.state in ("Z", "X") or bool(stat.flags & (_PF_EXITING | _PF_SIGNALED))


def descendants(pid: int) -> set[Process]:
    """Every process below `pid` in the process tree, as (pid, start time)."""
    found: set[Process] = set()
    waiting = proc_children(pid)
    while waiting:
        child = waiting.pop()
        started = start_time(child)
        if started is None or (child, started) in found:
            continue
        found.add((child, started))
        waiting.extend(proc_children(child))
    return found


def marked(mark: str) -> set[Process]:
    """Every process whose environment holds ``MARK_VARIABLE=mark`` (Linux); else none."""
    entry = f"{MARK_VARIABLE}={mark}".encode()
    found: set[Process] = set()
    for pid in proc_pids():
        environment = proc_environ(pid)  # None: gone meanwhile, or another user's
        started = start_time(pid)
        if environment is not None and entry in environment and started is not None:
            found.add((pid, started))
    return found


def kill(processes: Iterable[Process], signum: int = signal.SIGKILL) -> None:
    """Sends `signum` to each process that still is the one recorded (same start time)."""
    for pid, started in processes:
        if start_time(pid) == started:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signum)


def kill_descendants(pid: int, rounds: int = 5) -> None:
    """Kills every descendant of `pid`, again while new ones appear (a fork meanwhile)."""
    for _ in range(rounds):
        found = descendants(pid)
        if not found:
            return
        kill(found)


def kill_marked(mark: str, within_s: float = 1.0) -> None:
    """Kills every process but this one that carries `mark`, and waits until they are gone.

    The youngest go first, so the cluster's processes, which started before anything
    they started, go last: when two of them do this at once and one kills the other,
    the killer has already killed what both had started. Waits at most `within_s`; a
    process forked meanwhile carries the mark and is found on the next look.
    """
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        found = [process for process in marked(mark) if process[0] != os.getpid()]
        if not found:
            return
        kill(sorted(found, key=lambda process: process[1], reverse=True))
        time.sleep(0.01)
