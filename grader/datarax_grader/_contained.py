"""Running one submission's processes so that nothing of theirs outlives it.

`run_contained` starts a command in a session (and process group) of its own and, when
it ends, is stopped, runs out of time, its processes together hold more memory than
allowed, write more than allowed into its folders or to their terminal, kills its group
and every process descended from it. On Linux the grader first makes itself a child
subreaper (``PR_SET_CHILD_SUBREAPER``, in `datarax_grader.grade`, as the library's cluster
workers do): a process that detaches itself (``setsid``, a double fork) is then adopted
by the grader instead of by init, so it is still found among the grader's descendants
and killed with the rest. Elsewhere only the process group is killed. The process table
is read through psutil.

The grader's disk is bounded too: no process of the run may write a file larger than
the disk allowance (``RLIMIT_FSIZE``, set on Linux before the command reads its input,
inherited by all it starts, and not raised by a process without privileges), the files
in its folders together are counted as it runs, and what its processes write to their
terminal (``os.system``'s commands, say) comes through a pipe that the grader reads as
it comes, counts, and keeps only the first and last `OUTPUT_KEPT` bytes of in the log.
"""

from __future__ import annotations

import contextlib
import os
import resource
import select
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import psutil

_STOPPED_FOR = 1.0  # seconds a process may stay stopped before it counts as stopped
_CHECK_EVERY = 0.1  # seconds between two looks at the run's processes
OUTPUT_KEPT = 64 << 10  # bytes of a run's terminal output kept from its start, and its end


def descendants(roots: set[int]) -> set[int]:
    """Every process descended from `roots` (roots included if still there).

    Example:
        >>> os.getpid() in descendants({os.getppid()})
        True
    """
    found: set[int] = set()
    for root in roots:
        with contextlib.suppress(psutil.Error):  # gone: neither it nor its tree is there
            tree = psutil.Process(root).children(recursive=True)
            found |= {root, *(process.pid for process in tree)}
    return found


_STOPPED = (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)


def _stopped(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() in _STOPPED
    except psutil.Error:  # gone
        return False


def _resident(pid: int) -> int:
    try:
        return psutil.Process(pid).memory_info().rss
    except psutil.Error:  # gone, or not to be read
        return 0


def resident_bytes(pids: set[int]) -> int:
    """The memory the processes `pids` hold in RAM together.

    Example:
        >>> resident_bytes({os.getpid()}) > 0
        True
    """
    return sum(_resident(pid) for pid in pids)


def disk_bytes(folders: Sequence[Path]) -> int:
    """The bytes the files under `folders` take on disk (their blocks: a sparse file
    counts what it holds). A file that goes meanwhile counts nothing.

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> _ = (folder / "data").write_bytes(bytes(100_000))
        >>> disk_bytes([folder]) >= 100_000
        True
    """
    total, waiting = 0, [str(folder) for folder in folders]
    while waiting:
        try:
            entries = list(os.scandir(waiting.pop()))
        except OSError:  # gone, or not a folder
            continue
        for entry in entries:
            with contextlib.suppress(OSError):
                if entry.is_dir(follow_symlinks=False):
                    waiting.append(entry.path)
                total += entry.stat(follow_symlinks=False).st_blocks * 512
    return total


class _Output:
    """What a run writes to its terminal (stdout and stderr, one pipe), read as it comes:
    counted in `total`, its first and last `OUTPUT_KEPT` bytes kept."""

    def __init__(self, pipe: IO[bytes]):
        self._pipe, self._fd = pipe, pipe.fileno()
        os.set_blocking(self._fd, False)
        self.total, self.closed = 0, False
        self._head, self._tail = bytearray(), bytearray()

    def read_for(self, seconds: float) -> None:
        """Reads what comes during the next `seconds`."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            if self.closed:
                time.sleep(left)
                return
            if select.select([self._fd], [], [], left)[0]:
                self._read()

    def _read(self) -> bool:
        """Reads what the pipe holds now (up to 1 MiB); False when it held nothing."""
        try:
            chunk = os.read(self._fd, 1 << 20)
        except BlockingIOError:
            return False
        except OSError:
            chunk = b""
        if not chunk:
            self.closed = True
            return False
        self.total += len(chunk)
        room = max(0, OUTPUT_KEPT - len(self._head))
        self._head += chunk[:room]
        self._tail = (self._tail + chunk[room:])[-OUTPUT_KEPT:]
        return True

    def finish(self, log: Path) -> None:
        """Reads what is left (without waiting), closes the pipe, writes what was kept to
        `log`, with a line saying how much was left out between."""
        for _ in range(64):  # a pipe holds at most a few of these reads
            if self.closed or not self._read():
                break
        self._pipe.close()
        left_out = self.total - len(self._head) - len(self._tail)
        with contextlib.suppress(OSError), open(log, "wb") as file:  # its folder may be gone
            file.write(self._head)
            if left_out:
                file.write(f"\n[grading: {left_out:,} bytes of output left out]\n".encode())
            file.write(self._tail)


def _cap_file_size(pid: int, disk: int) -> None:
    """No process `pid` is or starts may write a file past `disk` bytes (Linux)."""
    if disk and hasattr(resource, "prlimit"):
        with contextlib.suppress(OSError):  # ended already: nothing to cap
            resource.prlimit(pid, resource.RLIMIT_FSIZE, (disk, disk))


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
    disk: int = 0,
    folders: Sequence[Path] = (),
    output: int = 0,
) -> str:
    """Runs `command` in its own session; kills it and all it started when it ends.

    Args:
        command: the program and its arguments.
        cwd: its working folder.
        env: its whole environment.
        limit: seconds it may run.
        log: where the first and last `OUTPUT_KEPT` bytes of its output go.
        given: what it reads on stdin.
        memory: bytes its processes may hold in RAM together (0: no limit).
        disk: bytes the files in `folders` may take together, and the largest file
            any of its processes may write anywhere (0: no limit).
        folders: the folders whose files count against `disk`.
        output: bytes its processes may write to their terminal (0: no limit).

    Returns:
        How it ended: ``"exited"`` (with any status), ``"killed by signal 9"``,
        ``"stopped"`` (stopped, by SIGSTOP say, for over a second), ``"time"`` (still
        running after `limit` seconds), ``"memory"`` (over `memory` bytes), ``"disk"``
        (over `disk` bytes in `folders`) or ``"output"`` (over `output` bytes written).

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> run_contained(["sleep", "30"], folder, dict(os.environ), 0.5, folder / "log")
        'time'
    """
    children_before = descendants({os.getpid()}) - {os.getpid()}
    deadline = time.monotonic() + limit
    process = subprocess.Popen(
        list(command),
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    _cap_file_size(process.pid, disk)  # before it reads its input, so before it runs any
    with contextlib.suppress(OSError):  # a command that does not read its input
        assert process.stdin is not None
        process.stdin.write(given)
        process.stdin.close()
    assert process.stdout is not None
    written = _Output(process.stdout)
    stopped_since = None
    next_disk_check = 0.0
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
            if output and written.total > output:
                how = "output"
                break
            if disk and time.monotonic() >= next_disk_check:
                counting = time.monotonic()
                if disk_bytes(folders) > disk:
                    how = "disk"
                    break
                # Many small files take long to count: count less often then.
                next_disk_check = time.monotonic() + 10 * (time.monotonic() - counting)
            if _stopped(process.pid):
                stopped_since = stopped_since or time.monotonic()
                if time.monotonic() - stopped_since > _STOPPED_FOR:
                    how = "stopped"
                    break
            else:
                stopped_since = None
            written.read_for(min(_CHECK_EVERY, deadline - time.monotonic()))
    finally:
        _kill_all(process, children_before)
        written.finish(log)
    return how
