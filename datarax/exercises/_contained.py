"""Running one submission's processes so that nothing of theirs outlives it.

`run_contained` starts a command in a session (and process group) of its own and, when
it ends, is stopped, runs out of time or its processes together hold more memory than
allowed, kills its group and every process descended from it. On Linux the grader
first makes itself a child subreaper
(`datarax.distributed._descendants.become_subreaper`, as a cluster's workers do): a
process that detaches itself (``setsid``, a double fork) is then adopted by the grader
instead of by init, so it is still found among the grader's descendants and killed with
the rest. Elsewhere only the process group is killed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from datarax._syscompat import proc_pids, proc_resident_pages, proc_stat

_STOPPED_FOR = 1.0  # seconds a process may stay stopped before it counts as stopped


def _parents() -> dict[int, tuple[int, str]]:
    """{pid: (parent pid, state)} of every process /proc shows, or {} without /proc."""
    stats = {pid: proc_stat(pid) for pid in proc_pids()}
    return {pid: (stat.parent, stat.state) for pid, stat in stats.items() if stat is not None}


def descendants(roots: set[int]) -> set[int]:
    """Every process descended from `roots` (roots included if still there), from /proc.

    Example:
        >>> os.getpid() in descendants({os.getppid()})
        True
    """
    table = _parents()
    found = {pid for pid in roots if pid in table}
    grew = True
    while grew:
        children = {pid for pid, (parent, _) in table.items() if parent in found} - found
        found |= children
        grew = bool(children)
    return found


def _stopped(pid: int) -> bool:
    return _parents().get(pid, (0, ""))[1] in ("T", "t")


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_bytes(pids: set[int]) -> int:
    """The memory the processes `pids` hold in RAM together (0 where /proc is missing).

    Example:
        >>> resident_bytes({os.getpid()}) > 0
        True
    """
    return sum(pages * _PAGE for pid in pids if (pages := proc_resident_pages(pid)))


def _kill_all(process: subprocess.Popen[bytes], children_before: set[int]) -> None:
    """Kills `process`'s group, its descendants and any process the grader adopted
    during the run, until none is left (a few rounds: some may fork meanwhile)."""
    with contextlib.suppress(OSError):
        os.killpg(process.pid, signal.SIGKILL)
    for _ in range(10):
        others = descendants(children_before) | {os.getpid()}
        left = (descendants({os.getpid()}) - others) | descendants({process.pid})
        left = {pid for pid in left if pid != process.pid or process.poll() is None}
        if not left:
            break
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for pid in left - {process.pid}:  # reap those the grader adopted (zombies else)
            with contextlib.suppress(OSError):
                os.waitpid(pid, os.WNOHANG)
        time.sleep(0.05)
    process.wait()


def run_contained(
    command: Sequence[str],
    cwd: Path,
    env: dict[str, str],
    limit: float,
    log: Path,
    given: bytes = b"",
    memory: int = 0,
) -> str:
    """Runs `command` in its own session; kills it and all it started when it ends.

    Args:
        command: the program and its arguments.
        cwd: its working folder.
        env: its whole environment.
        limit: seconds it may run.
        log: where its output goes.
        given: what it reads on stdin.
        memory: bytes its processes may hold in RAM together (0: no limit).

    Returns:
        How it ended: ``"exited"`` (with any status), ``"killed by signal 9"``,
        ``"stopped"`` (stopped, by SIGSTOP say, for over a second), ``"time"`` (still
        running after `limit` seconds) or ``"memory"`` (over `memory` bytes).

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> run_contained(["sleep", "30"], folder, dict(os.environ), 0.5, folder / "log")
        'time'
    """
    children_before = descendants({os.getpid()}) - {os.getpid()}
    deadline = time.monotonic() + limit
    with open(log, "wb") as output:
        process = subprocess.Popen(
            list(command),
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    with contextlib.suppress(OSError):  # a command that does not read its input
        assert process.stdin is not None
        process.stdin.write(given)
        process.stdin.close()
    stopped_since = None
    how = "time"
    try:
        while time.monotonic() < deadline:
            code = process.poll()
            if code is not None:
                how = "exited" if code >= 0 else f"killed by signal {-code}"
                break
            if memory and resident_bytes(descendants({process.pid})) > memory:
                how = "memory"
                break
            if _stopped(process.pid):
                stopped_since = stopped_since or time.monotonic()
                if time.monotonic() - stopped_since > _STOPPED_FOR:
                    how = "stopped"
                    break
            else:
                stopped_since = None
            time.sleep(0.1)
    finally:
        _kill_all(process, children_before)
    return how
