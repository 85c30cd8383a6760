"""Functions that the processes of a local cluster run for the launcher's tests.

Each process prints ``pid <its pid>`` first, so a test can check afterwards that the
process is gone. `launch_sleepers` is the launching process of the tests that kill it.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils

from _support.processes import running
from datarax.distributed import launch_local


def _announce() -> None:
    print(f"pid {os.getpid()}", flush=True)


def sleep_with_a_child(ready_dir: str) -> int:
    """Starts a child that sleeps, marks this process ready in `ready_dir`, then sleeps.

    The marker file holds this process's pid and its child's, one per line.
    """
    _announce()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    marker = Path(ready_dir) / f"ready-{jax.process_index()}"
    marker.with_suffix(".tmp").write_text(f"{os.getpid()}\n{child.pid}\n")
    marker.with_suffix(".tmp").rename(marker)
    time.sleep(300)
    return 0


def exit_early(process: int) -> int:
    """Process `process` leaves without a result; the others wait for it in a collective."""
    _announce()
    if jax.process_index() == process:
        os._exit(0)
    multihost_utils.sync_global_devices("never completes")
    return 0


def hang_while_others_return(process: int) -> int:
    """Process `process` never returns; the others return and wait for it at shutdown."""
    _announce()
    if jax.process_index() == process:
        time.sleep(300)
    return 0


def print_a_long_line(characters: int) -> int:
    """Process 1 prints one line of `characters` characters, then raises."""
    _announce()
    if jax.process_index() == 1:
        print("x" * characters, flush=True)
        raise RuntimeError("y" * characters)
    return 0


def combine(left: int, right: int, *, scale: int = 1) -> dict[str, Any]:
    """A result made of the arguments, the process index and an environment variable."""
    _announce()
    return {
        "value": (left + right) * scale + jax.process_index(),
        "env": os.environ.get("DATARAX_LAUNCHER_TEST"),
    }


def environment_seen() -> tuple[str | None, str | None, int, str | None]:
    """XLA_FLAGS, JAX_PLATFORMS, the local device count and the variable X, as seen here."""
    env = os.environ
    return env.get("XLA_FLAGS"), env.get("JAX_PLATFORMS"), jax.local_device_count(), env.get("X")


def launch_sleepers(ready_dir: str, fork_when_ready: bool) -> None:
    """Runs `sleep_with_a_child` on a 2-process cluster, until this process is killed.

    With `fork_when_ready`, once both processes are ready this process forks a child
    that keeps a copy of every file descriptor, the write end of the launcher's pipe
    included, and writes the child's pid to ``ready_dir/forked``.
    """
    ready = Path(ready_dir)

    def fork() -> None:
        while len(list(ready.glob("ready-?"))) < 2:
            time.sleep(0.05)
        child = os.fork()
        if child == 0:
            time.sleep(60)
            os._exit(0)
        (ready / "forked.tmp").write_text(str(child))
        (ready / "forked.tmp").rename(ready / "forked")

    if fork_when_ready:
        threading.Thread(target=fork, daemon=True).start()
    launch_local(sleep_with_a_child, num_processes=2, args=(ready_dir,), timeout_s=120)


def kill_one_after_a_collective(process: int) -> int:
    """Process `process` is killed with SIGKILL; the other then fails in a collective."""
    _announce()
    multihost_utils.sync_global_devices("both arrived")
    if jax.process_index() == process:
        os.kill(os.getpid(), signal.SIGKILL)
    multihost_utils.sync_global_devices("never completes")
    return 0


def end_one_then_fail_the_other(process: int, how: str) -> int:
    """Process `process` ends by a signal: `how` is 'kill' (SIGKILL) or 'crash' (SIGSEGV).

    The others raise as soon as it is gone (dead, even if not yet reaped), as a process
    whose collective lost its peer does, but without waiting for a collective to notice.
    """
    _announce()
    pids = multihost_utils.process_allgather(np.array(os.getpid()))
    if jax.process_index() == process:
        if how == "crash":
            ctypes.string_at(0)  # reads address 0: SIGSEGV
        os.kill(os.getpid(), signal.SIGKILL)
    peer = int(pids[process])
    while running(peer):
        time.sleep(0.01)
    raise RuntimeError(f"process {process} is gone")


def hang_in_a_hook_after_returning() -> int:
    """Returns its process index, then hangs at exit in an atexit hook."""
    _announce()
    atexit.register(time.sleep, 300)
    return jax.process_index()


_DAEMON = (
    "import os, subprocess, sys; os.setsid(); "
    "grandchild = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'], "
    "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
    "print(grandchild.pid, flush=True); os._exit(0)"
)


def start_processes_that_leave_the_group(kill_self: bool) -> list[int]:
    """Starts a child in its own session and a daemon orphaned by a double fork.

    Returns their pids; with `kill_self`, process 1 writes them to its output and
    kills itself with SIGKILL at once, likely before the launcher has seen them.
    """
    _announce()
    in_a_session = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True
    )
    daemon = subprocess.run(
        [sys.executable, "-c", _DAEMON], capture_output=True, text=True, timeout=60, check=True
    )
    pids = [in_a_session.pid, int(daemon.stdout)]
    print(f"started {pids}", flush=True)
    if kill_self and jax.process_index() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return pids
