"""A candidate's peak host memory, watched while it runs, and a bound that stops it.

The memory of this process and every process below it (a loader's workers), summed as
proportional set sizes (``Pss`` in ``/proc/PID/smaps_rollup``: a page that several
processes map, shared-memory slots included, counts once in all), sampled every
`EVERY_S`. Where the kernel gives no ``smaps_rollup`` (gVisor's sandbox on the TPU host),
the measure is the machine's used memory instead (``MemTotal - MemAvailable`` in
``/proc/meminfo``), which also counts a shared page once; summing resident sizes, which
count such a page in every process that maps it, gave 130 GB there on a 40 GB machine.

Past the bound, the watcher sends SIGINT to the main thread, which ends
the candidate's run there (its stream closed, its processes with it), and the run
raises `MemoryBoundError` naming the candidate: the machine stays usable, where a
loader that read far ahead once filled its 40 GB and took it down.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

EVERY_S = 0.25
PROC = Path("/proc")


class MemoryBoundError(RuntimeError):
    """A candidate passed the memory bound and was stopped."""


def _children(pid: int) -> list[int]:
    found = []
    with contextlib.suppress(OSError):
        for task in (PROC / str(pid) / "task").iterdir():
            found += [int(child) for child in (task / "children").read_text().split()]
    return found


def _pss(pid: int) -> int:
    """Bytes process `pid` holds, its Pss (0 once it is gone)."""
    with contextlib.suppress(OSError), open(PROC / str(pid) / "smaps_rollup") as file:
        for line in file:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    return 0


def _machine_used() -> int:
    """Bytes the machine uses: ``MemTotal - MemAvailable`` of ``/proc/meminfo``."""
    fields = {}
    for line in (PROC / "meminfo").read_text().splitlines():
        name, value = line.split(":", 1)
        fields[name] = int(value.split()[0]) * 1024
    return fields["MemTotal"] - fields["MemAvailable"]


def measure() -> str:
    """``"pss"`` where this kernel gives ``smaps_rollup``, else ``"machine"``."""
    return "pss" if (PROC / "self" / "smaps_rollup").exists() else "machine"


def tree_memory(pid: int | None = None) -> int:
    """Bytes held by process `pid` (this one) and every process below it, as `measure`
    names: their Pss summed, or the machine's used memory."""
    if measure() == "machine":
        return _machine_used()
    pending, total = [os.getpid() if pid is None else pid], 0
    while pending:
        current = pending.pop()
        total += _pss(current)
        pending += _children(current)
    return total


@dataclass
class Watch:
    """What a watch saw: bytes before it began, the peak, and whether it stopped the run."""

    before: int = 0
    peak: int = 0
    stopped: bool = False


@contextlib.contextmanager
def watched(name: str, bound: int, watch: Watch) -> Iterator[None]:
    """Watches this process tree while the block runs, into `watch`; past `bound` bytes
    (0: no bound), stops the block.

    Raises:
        MemoryBoundError: the block was stopped; the message names `name` and the sizes.
    """
    watch.before, done = tree_memory(), threading.Event()
    main = threading.main_thread().ident
    # The stop is Python's own SIGINT handler raising KeyboardInterrupt; a process started
    # with SIGINT ignored (`nohup ... &`: a shell's background job) would never stop, so
    # the block runs with that handler, and whatever was there comes back after.
    previous = None
    in_main = threading.current_thread() is threading.main_thread()
    if in_main and signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)

    def sample() -> None:
        while not done.wait(EVERY_S):
            used = tree_memory()
            watch.peak = max(watch.peak, used)
            if bound and used > bound and not watch.stopped and main is not None:
                watch.stopped = True
                signal.pthread_kill(main, signal.SIGINT)  # ends a wait in a system call too

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield
    except KeyboardInterrupt:
        if not watch.stopped:
            raise  # a Ctrl-C of the user's own
        raise MemoryBoundError(
            f"{name} was stopped: its processes held {watch.peak / 1e9:.1f} GB, past the "
            f"bound of {bound / 1e9:.1f} GB (--memory-bound-gb)."
        ) from None
    finally:
        done.set()
        thread.join()
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        watch.peak = max(watch.peak, tree_memory())
