"""Watches the processes of a local cluster: which failed first, how far each got.

`datarax.distributed.launch_local` starts the processes; `watch` waits for them and
`stop` kills what is left of each, its children included.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

GRACE_S = 2.0  # after a failure, how long the others get to finish on their own


def stage(job_dir: Path, index: int) -> str:
    """How far process `index` got: 'starting', 'joining' or 'joined'."""
    for name in ("joined", "joining"):
        if (job_dir / f"{name}-{index}").exists():
            return name
    return "starting"


def watch(
    processes: Sequence[subprocess.Popen[bytes]],
    job_dir: Path,
    timeout_s: float,
    join_deadline_s: float,
    shutdown_timeout_s: float,
) -> tuple[int | None, str, list[int | None]]:
    """Waits until all exit, one fails (then `GRACE_S` more), or time runs out.

    A process fails when it exits with a non-zero code, or with code 0 but no result
    file (it left its target early, e.g. through ``os._exit``). One thread per process
    waits for it, so failures are seen in the order they happen. Once a process has
    returned, the others get `shutdown_timeout_s` (and `GRACE_S`) to return too: newer
    jax aborts the waiting processes itself by then, jax 0.7 would wait 5 minutes.

    Returns:
        The first process that failed (None if none did), why the launcher stopped
        the others ('' if they ended on their own) and each exit code (None: still
        running).
    """
    ended: queue.SimpleQueue[tuple[int, int]] = queue.SimpleQueue()
    for index, process in enumerate(processes):
        threading.Thread(
            target=lambda i=index, p=process: ended.put((i, p.wait())),
            name=f"datarax-cluster-wait-{index}",
            daemon=True,
        ).start()
    codes: list[int | None] = [None] * len(processes)
    start = time.monotonic()
    first, reason, failed_at, returned_at = None, "", None, None
    results = [job_dir / f"result-{i}.pkl" for i in range(len(processes))]
    while None in codes:
        now = time.monotonic()
        if failed_at is not None and now - failed_at > GRACE_S:
            break
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
            if first is None and (code != 0 or not (job_dir / f"result-{index}.pkl").exists()):
                first, failed_at = index, time.monotonic()
    return first, reason, codes


def stop(processes: Sequence[subprocess.Popen[bytes]]) -> None:
    """Kills each worker's whole process group: the worker and whatever it started."""
    for process in processes:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    for process in processes:
        process.wait()
