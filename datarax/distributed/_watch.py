"""Watches the processes of a local cluster: which failed first, how far each got.

`datarax.distributed.launch_local` starts the processes; `watch` waits for them and
`stop` kills what is left of each, its descendants included: those in its process
group, and on Linux every process below it in the process tree (one that called
``setsid`` too), seen by a sweep every `SWEEP_S` while it runs and once more at the
end, and every process that carries the workers' mark in its environment (see
`_descendants`).
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path

from datarax._syscompat import proc_gone
from datarax.distributed import _descendants
from datarax.distributed._descendants import Process

GRACE_S = 2.0  # after a failure, how long the others get to finish on their own
SWEEP_S = 0.5  # how often the processes each worker started are listed
_REAPED_WITHIN_S = 10.0  # a process killed with SIGKILL is gone by then (unless in D state)


class Workers:
    """The worker processes of a cluster and every descendant seen under them.

    `mark` is the value of `_descendants.MARK_VARIABLE` in the workers' environment.
    """

    def __init__(self, processes: list[subprocess.Popen[bytes]], mark: str):
        self.processes = processes  # the launcher's list, which it fills as it starts them
        self.mark = mark
        self.seen: set[Process] = set()

    def sweep(self, everywhere: bool = False) -> None:
        """Records the descendants of each worker that still runs; with `everywhere`,
        also every process that carries the workers' mark."""
        for process in self.processes:
            if process.returncode is None:
                self.seen |= _descendants.descendants(process.pid)
        if everywhere:
            self.seen |= _descendants.marked(self.mark)


def stage(job_dir: Path, index: int) -> str:
    """How far process `index` got: 'starting', 'joining' or 'joined'."""
    for name in ("joined", "joining"):
        if (job_dir / f"{name}-{index}").exists():
            return name
    return "starting"


def watch(
    workers: Workers,
    job_dir: Path,
    timeout_s: float,
    join_deadline_s: float,
    shutdown_timeout_s: float,
) -> tuple[int | None, str, list[int | None], list[int]]:
    """Waits until all exit, one fails (then `GRACE_S` more), or time runs out.

    A process fails when it exits with a non-zero code, or with code 0 but no result
    file (it left its target early, e.g. through ``os._exit``). One thread per process
    waits for it, so exits are seen about in the order they happen; under load a
    process that failed because its peer was killed may be seen first, which is why
    the report ranks a killed process above one that failed (`_report`). Once a
    process has returned, the others get `shutdown_timeout_s` (and `GRACE_S`) to
    return too: newer jax aborts the waiting processes itself by then, jax 0.7 would
    wait 5 minutes. Once every process has returned, those still running get as long
    to exit (a hook that hangs after the target returned): then they are stopped and
    their results kept. Before it returns, it waits for the exits of the processes
    that are already ending (`_see_the_dying`), so that each is seen with its own
    signal.

    Returns:
        The first process seen failing (None if none did), why the launcher stopped
        the others ('' if they ended on their own or had all returned), each exit code
        (None: still running) and the processes in the order their exits were seen.
    """
    processes = workers.processes
    ended: queue.SimpleQueue[tuple[int, int]] = queue.SimpleQueue()
    for index, process in enumerate(processes):
        threading.Thread(
            target=lambda i=index, p=process: ended.put((i, p.wait())),
            name=f"datarax-cluster-wait-{index}",
            daemon=True,
        ).start()
    codes: list[int | None] = [None] * len(processes)
    start = time.monotonic()
    order: list[int] = []
    first, reason, failed_at, returned_at, all_returned_at = None, "", None, None, None
    swept_at = start - SWEEP_S
    results = [job_dir / f"result-{i}.pkl" for i in range(len(processes))]
    while None in codes:
        now = time.monotonic()
        if now - swept_at >= SWEEP_S:
            workers.sweep()
            swept_at = now
        if failed_at is not None and now - failed_at > GRACE_S:
            break
        if all_returned_at is None and all(result.exists() for result in results):
            all_returned_at = now
        if (
            first is None
            and all_returned_at is not None
            and now - all_returned_at > shutdown_timeout_s + GRACE_S
        ):
            break  # every target returned; what still runs is stopped, results kept
        if returned_at is None:
            returned = [i for i, result in enumerate(results) if result.exists()]
            returned_at = now if returned else None
        elif first is None and now - returned_at > shutdown_timeout_s + GRACE_S:
            waiting = [i for i, result in enumerate(results) if not result.exists()]
            if waiting and all(codes[i] is None for i in waiting):
                first, failed_at = waiting[0], now
                who = f"process {waiting[0]}" if len(waiting) == 1 else f"processes {waiting}"
                reason = (
                    f"{who} had not returned {shutdown_timeout_s:g} s (shutdown_timeout_s) "
                    "after another process did"
                )
        if now - start > timeout_s:
            reason = reason or f"the cluster did not finish within {timeout_s:g} s"
            break
        if first is None and now - start > join_deadline_s:
            missing = [i for i in range(len(processes)) if not (job_dir / f"joined-{i}").exists()]
            if missing:
                first, failed_at = missing[0], now
                reason = (
                    f"processes {missing} never joined the cluster within {join_deadline_s:g} s"
                )
        with contextlib.suppress(queue.Empty):
            index, code = ended.get(timeout=0.05)
            codes[index] = code
            order.append(index)
            if first is None and (code != 0 or not (job_dir / f"result-{index}.pkl").exists()):
                first, failed_at = index, time.monotonic()
    _see_the_dying(processes, ended, codes, order)
    return first, reason, codes, order


def _see_the_dying(
    processes: list[subprocess.Popen[bytes]],
    ended: queue.SimpleQueue[tuple[int, int]],
    codes: list[int | None],
    order: list[int],
) -> None:
    """Waits, at most `_REAPED_WITHIN_S`, for the exits of the processes already ending.

    A process killed by a signal can take seconds to end on a loaded machine (its
    memory is freed, a core dump written) while its peers already failed because it
    was gone; stopped now, it would seem stopped by the launcher, not killed or crashed.
    One already reaped by its waiting thread, which has not yet set its return code (a
    thread preempted between the two, under load), is waited for too: its code is a
    moment away, and without it the peer that failed because it was gone is blamed.
    """
    deadline = time.monotonic() + _REAPED_WITHIN_S
    dying = {
        index
        for index, process in enumerate(processes)
        if codes[index] is None
        and (
            process.returncode is not None
            or _descendants.ending(process.pid)
            or proc_gone(process.pid)  # reaped: its code is a moment away
        )
    }
    while dying and time.monotonic() < deadline:
        with contextlib.suppress(queue.Empty):
            index, code = ended.get(timeout=0.05)
            codes[index] = code
            order.append(index)
            dying.discard(index)


def _signal_all(workers: Workers, signum: int) -> None:
    for process in workers.processes:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signum)
    _descendants.kill(workers.seen, signum)


def stop(workers: Workers) -> None:
    """Kills each worker, its process group and every descendant seen under it.

    The workers and their descendants are first stopped (SIGSTOP), so none can start
    another process, then listed once more and killed.
    """
    workers.sweep(everywhere=True)
    _signal_all(workers, signal.SIGSTOP)
    workers.sweep(everywhere=True)
    _signal_all(workers, signal.SIGKILL)
    for process in workers.processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=_REAPED_WITHIN_S)
