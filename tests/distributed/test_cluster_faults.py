"""A local cluster under faults and load: the process that died is named, with its signal.

- A process killed by a signal, or crashed, is named first, with what the signal
  means, however late its exit reaches the launcher: its peer fails at once, and
  the launcher is made to see the dead process's exit 5 s later (3 s past the grace
  it gives the others).
- The same, repeated while two busy loops hold both cores (marked `stress`).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from _support import launcher_targets as targets
from _support.processes import busy_cpus, running

from datarax.distributed import ClusterError, launch_local
from datarax.distributed._report import report
from datarax.distributed._watch import GRACE_S

LINUX_ONLY = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="a process's state is read from /proc"
)
HOW = {"kill": ("SIGKILL", "was killed by SIGKILL."), "crash": ("SIGSEGV", "crashed with SIGSEGV")}


def _end_one(process: int, how: str) -> ClusterError:
    """The error of a 2-process run in which `process` ends by a signal; both are gone."""
    with pytest.raises(ClusterError) as caught:
        launch_local(
            targets.end_one_then_fail_the_other,
            num_processes=2,
            devices_per_process=1,
            args=(process, how),
            timeout_s=90,
            shutdown_timeout_s=2,
        )
    pids = [
        int(pid) for out in caught.value.outputs for pid in re.findall(r"^pid (\d+)", out, re.M)
    ]
    assert len(pids) == 2 and not [pid for pid in pids if running(pid)], pids
    return caught.value


@pytest.fixture
def exit_seen_late(monkeypatch: pytest.MonkeyPatch) -> Iterator[float]:
    """Makes the launcher see the exit of its process 1 `GRACE_S` + 3 s after it died.

    The process stays dead and unreaped meanwhile (a zombie), as a process that a
    loaded machine has not finished tearing down would stay alive.
    """
    late_s = GRACE_S + 3
    wait = subprocess.Popen.wait

    def wait_late(self: subprocess.Popen, timeout: float | None = None) -> int:
        if timeout is None and "datarax.distributed._worker" in self.args and self.args[-2] == "1":
            os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)  # dead, not reaped
            time.sleep(late_s)
        return wait(self, timeout)

    monkeypatch.setattr(subprocess.Popen, "wait", wait_late)
    yield late_s


@pytest.mark.multihost
@LINUX_ONLY
@pytest.mark.parametrize("how", ["kill", "crash"])
def test_the_process_that_died_is_named_however_late_its_exit_is_seen(
    how: str, exit_seen_late: float
) -> None:
    started = time.monotonic()
    error = _end_one(1, how)
    name, phrase = HOW[how]
    assert error.process_index == 1, str(error)
    assert str(error).startswith(f"Process 1 of 2 {phrase}"), str(error)
    assert error.signal == name
    assert "Process 0 exited with code 1." in str(error)
    assert "RuntimeError: process 1 is gone" in error.outputs[0]
    assert time.monotonic() - started > exit_seen_late  # the late exit was waited for


@pytest.mark.parametrize(
    ("code", "first_line", "meaning"),
    [
        (
            -signal.SIGSEGV,
            "crashed with SIGSEGV, a segmentation fault.",
            "A crash: native code (JAX",
        ),
        (-signal.SIGBUS, "crashed with SIGBUS, a bus error.", "a full /dev/shm"),
        (-signal.SIGKILL, "was killed by SIGKILL.", "out-of-memory killer"),
        (-signal.SIGTERM, "was killed by SIGTERM.", "another process sent it"),
        (-signal.SIGABRT, "aborted with SIGABRT.", "JAX ends a process this way"),
    ],
)
def test_the_report_names_a_crash_a_crash_and_a_kill_a_kill(
    code: int, first_line: str, meaning: str
) -> None:
    records = [("error", "Traceback ...\nRuntimeError: Gloo error: connection closed"), None]
    culprit, message = report(0, "", [1, code], records, ["", ""], ["joined"] * 2, [0, 1])
    abort = code == -signal.SIGABRT  # a consequence as often as a cause: not ranked first
    assert culprit == (0 if abort else 1)
    if abort:
        assert f"Process 1 {first_line.rstrip('.')}." in message
        return
    assert message.splitlines()[0] == f"Process 1 of 2 {first_line}", message
    assert meaning in message.splitlines()[1], message


@pytest.mark.stress
@pytest.mark.multihost
@LINUX_ONLY
def test_the_process_that_died_is_named_every_time_under_load() -> None:
    runs = [(1, how) for how in ("kill", "crash") * 6]
    with busy_cpus(), ThreadPoolExecutor(2) as pool:
        errors = list(pool.map(lambda run: _end_one(*run), runs))
    wrong = [
        (how, error.process_index, error.signal, str(error).splitlines()[0])
        for (_, how), error in zip(runs, errors, strict=True)
        if (error.process_index, error.signal) != (1, HOW[how][0])
    ]
    assert not wrong, f"{len(wrong)} of {len(runs)} runs named another process: {wrong[:3]}"
