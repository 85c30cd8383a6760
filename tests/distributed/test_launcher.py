"""The local cluster launcher: killed launchers, blame, argument checks, capped output.

The clusters run the functions in `_support/launcher_targets.py`; the assertions run here.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from _support import launcher_targets as targets
from _support.processes import TESTS, running, still_running

from datarax.distributed import ClusterError, launch_local
from datarax.distributed._report import OUTPUT_BYTES, read_output, report, tail

KILL_SCRIPT = TESTS / "_support" / "multihost_kill_script.py"


def _announced_pids(outputs: list[str]) -> list[int]:
    return [int(m) for out in outputs for m in re.findall(r"^pid (\d+)", out, re.MULTILINE)]


def _failure(target: Any, within_s: float, announced: int = 2, **options: Any) -> ClusterError:
    """The ClusterError of a 2-process run, checked to come within `within_s`.

    The processes whose ``pid`` line is in the error's outputs (`announced` of them)
    are checked to be gone.
    """
    start = time.monotonic()
    with pytest.raises(ClusterError) as caught:
        launch_local(target, num_processes=2, **options)
    assert time.monotonic() - start < within_s
    pids = _announced_pids(caught.value.outputs)
    assert len(pids) == announced and not still_running(pids, 5), pids
    return caught.value


@pytest.fixture
def temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty folder that tempfile, and so the launcher, uses for its job folders."""
    folder = tmp_path / "temp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


LINUX_ONLY = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's"
)


@pytest.mark.multihost
@pytest.mark.parametrize(
    ("signum", "fork", "stopped"),
    [
        (signal.SIGKILL, False, None),
        (signal.SIGTERM, False, None),
        pytest.param(signal.SIGKILL, True, None, marks=LINUX_ONLY),
        pytest.param(signal.SIGTERM, False, 0, marks=LINUX_ONLY),
        pytest.param(signal.SIGTERM, False, 1, marks=LINUX_ONLY),
    ],
    ids=[
        "SIGKILL",
        "SIGTERM",
        "SIGKILL-pipe-held-by-a-fork",
        "SIGTERM-coordinator-stopped",
        "SIGTERM-process-1-stopped",
    ],
)
def test_a_killed_launcher_takes_its_processes_and_files_along(
    signum: signal.Signals, fork: bool, stopped: int | None, tmp_path: Path, temp_dir: Path
) -> None:
    # With `fork`, a forked child of the launcher keeps the pipe open, so only the
    # parent-death signal tells the processes that their launcher is gone. A `stopped`
    # process cannot clean up after itself, as one that JAX ends (its coordinator
    # vanished) or one stuck in C code cannot: the other process must do it.
    ready = tmp_path / "ready"
    ready.mkdir()
    code = (
        f"import sys; sys.path.insert(0, {str(TESTS)!r}); from _support import launcher_targets; "
        f"launcher_targets.launch_sleepers({str(ready)!r}, {fork})"
    )
    env = {**os.environ, "TMPDIR": str(temp_dir)}
    with open(tmp_path / "launcher.txt", "wb") as log:
        launcher = subprocess.Popen(
            [sys.executable, "-c", code], env=env, stdout=log, stderr=subprocess.STDOUT
        )
    pids: list[int] = []
    forked: list[int] = []
    try:
        deadline = time.monotonic() + 90
        while len(list(ready.glob("ready-?"))) < 2 or (fork and not (ready / "forked").exists()):
            assert launcher.poll() is None, (tmp_path / "launcher.txt").read_text()
            assert time.monotonic() < deadline, "the cluster did not start within 90 s"
            time.sleep(0.1)
        pids = [int(pid) for path in ready.glob("ready-?") for pid in path.read_text().split()]
        forked = [int((ready / "forked").read_text())] if fork else []
        assert len(pids) == 4  # 2 processes and a child of each
        assert len(list(temp_dir.glob("datarax-cluster-*"))) == 1
        if stopped is not None:
            os.kill(int((ready / f"ready-{stopped}").read_text().split()[0]), signal.SIGSTOP)
        launcher.send_signal(signum)
        launcher.wait(timeout=10)
        killed_at = time.monotonic()

        def left() -> list[Any]:
            return [pid for pid in pids if running(pid)] + list(temp_dir.iterdir())

        while left() and time.monotonic() - killed_at < 5:
            time.sleep(0.02)
        assert not left(), f"{time.monotonic() - killed_at:.1f} s after {signum.name}: {left()}"
        assert all(running(pid) for pid in forked)  # it still held the pipe meanwhile
    finally:
        launcher.kill()
        launcher.wait()
        for pid in pids + forked:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.multihost
@pytest.mark.parametrize("process", [0, 1])
def test_a_process_that_leaves_without_a_result_is_blamed(process: int) -> None:
    # The other process then fails too (the coordinator's peer vanished, or the
    # coordinator itself did), but only after the one that left.
    error = _failure(targets.exit_early, 40, args=(process,), timeout_s=60)
    assert error.process_index == process
    message = str(error)
    assert message.startswith(f"Process {process} of 2 exited with code 0 before its target")
    assert "so it wrote no result" in message


@pytest.mark.multihost
def test_the_process_that_never_returns_is_blamed_not_the_one_waiting_for_it() -> None:
    # Process 0 returns and waits at the shutdown barrier; after 10 s it gives up. Newer
    # jax then aborts both processes, in either order; on jax 0.7, whose barrier waits
    # 5 minutes, the launcher stops them 2 s later. Process 1 is to blame either way.
    error = _failure(targets.hang_while_others_return, 45, args=(1,), timeout_s=60)
    assert error.process_index == 1
    message = str(error)
    stopped = message.startswith(
        "Local JAX cluster failed: process 1 had not returned 10 s (shutdown_timeout_s) "
        "after another process did.\nProcess 1 of 2 was still running; the launcher stopped it."
    )
    assert stopped or message.startswith("Process 1 of 2 aborted with SIGABRT.")
    assert "Its target never returned, and process 0, done, gave up waiting for it." in message
    assert re.search(r"Process 0 (had returned and was waiting|returned, then)", message)


@pytest.mark.multihost
def test_arguments_reach_every_process_and_nothing_is_left(temp_dir: Path) -> None:
    runs = launch_local(
        targets.combine,
        num_processes=2,
        devices_per_process=1,
        args=[1, 2],
        kwargs={"scale": 10},
        env={"DATARAX_LAUNCHER_TEST": "yes"},
        timeout_s=60,
        init_timeout_s=20.5,
    )
    assert [run.value for run in runs] == [{"value": 30, "env": "yes"}, {"value": 31, "env": "yes"}]
    assert not still_running(_announced_pids([run.output for run in runs]), 5)
    assert list(temp_dir.iterdir()) == []


FUNCTION_CASES = [
    ({"num_processes": 0}, ValueError, "num_processes must be a positive int (1 to 64), got 0."),
    ({"num_processes": 65}, ValueError, "(1 to 64), got 65. Each process is a Python"),
    ({"num_processes": 10**9}, ValueError, "(1 to 64), got 1000000000."),
    ({"num_processes": True}, TypeError, "got True (bool)"),
    ({"num_processes": 2.0}, TypeError, "got 2.0 (float)"),
    ({"devices_per_process": 513}, ValueError, "devices_per_process must be a positive int"),
    ({"devices_per_process": 513}, ValueError, "(1 to 512), got 513. They are simulated"),
    ({"devices_per_process": False}, TypeError, "got False (bool)"),
    ({"timeout_s": math.nan}, ValueError, "timeout_s must be a finite number of seconds > 0"),
    ({"timeout_s": math.nan}, ValueError, "got nan."),
    ({"timeout_s": math.inf}, ValueError, "got inf."),
    ({"timeout_s": 0}, ValueError, "timeout_s must be a finite number of seconds > 0, got 0."),
    ({"timeout_s": -5}, ValueError, "got -5."),
    ({"timeout_s": "10"}, TypeError, "timeout_s must be a finite number of seconds > 0"),
    ({"timeout_s": "10"}, TypeError, "got '10' (str)."),
    ({"timeout_s": True}, TypeError, "got True (bool)."),
    ({"init_timeout_s": 0}, ValueError, "init_timeout_s must be a number of seconds from 1"),
    ({"init_timeout_s": 3601}, ValueError, "from 1 to 3600, got 3601."),
    ({"init_timeout_s": "30"}, TypeError, "got '30' (str)."),
    ({"shutdown_timeout_s": 0}, ValueError, "shutdown_timeout_s must be a number of seconds"),
    ({"shutdown_timeout_s": math.inf}, ValueError, "from 1 to 3600, got inf."),
    ({"env": {"A": 1}}, TypeError, "env must map str names to str values, got the entry 'A'"),
    ({"env": ["A"]}, TypeError, "env must be a mapping of str names to str values"),
    ({"env": {"A=B": "1"}}, ValueError, "free of '=' and NUL, and values free of NUL"),
    ({"env": {"A": "a\0b"}}, ValueError, "got the entry 'A'"),
    ({"args": "abc"}, TypeError, "args must be a tuple or list of the target's positional"),
    ({"args": 5}, TypeError, "got 5 (int). For a single argument write args=(value,)."),
    ({"kwargs": [1]}, TypeError, "kwargs must be a mapping of str names to values, got [1]"),
    ({"kwargs": {1: 2}}, TypeError, "kwargs must be a mapping of str names to values"),
    ({"args": (threading.Lock(),)}, TypeError, "args and kwargs must pickle"),
]


@pytest.mark.multihost
@pytest.mark.parametrize(
    ("target", "options", "kind", "message"),
    [(targets.combine, *case) for case in FUNCTION_CASES]
    + [
        (
            KILL_SCRIPT,
            {"kwargs": {"a": 1}},
            ValueError,
            "kwargs are passed to a function target; a script gets only args",
        )
    ],
)
def test_bad_arguments_are_refused_before_anything_starts(
    target: Any,
    options: dict[str, Any],
    kind: type[Exception],
    message: str,
    temp_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_process(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"a process was started: {args}")

    monkeypatch.setattr(subprocess, "Popen", no_process)
    with pytest.raises(kind, match=re.escape(message)):
        launch_local(target, **options)
    assert list(temp_dir.iterdir()) == []


@pytest.mark.multihost
def test_a_ten_megabyte_line_makes_a_short_error() -> None:
    characters = 10_000_000
    # Process 1's pid line is in the part of its output that is left out.
    error = _failure(targets.print_a_long_line, 60, 1, args=(characters,), timeout_s=60)
    message = str(error)
    assert error.process_index == 1
    assert len(message) < 20_000
    assert f"Process 1 of 2 raised RuntimeError: {'y' * 100}" in message
    assert f"[... {characters + len('RuntimeError: ') - 500:,} more characters cut]" in message
    assert all(len(line) < 600 for line in message.splitlines())
    assert len(error.outputs[1]) < OUTPUT_BYTES + 100
    assert error.outputs[1].startswith("[the first ")
    assert "bytes of this output are left out]" in error.outputs[1]


def test_output_files_are_read_from_the_end(tmp_path: Path) -> None:
    path = tmp_path / "output.txt"
    path.write_bytes(b"first line\n" + b"z" * 1_000_000 + b"\nlast line\n")
    text = read_output(path, limit=1000)
    left_out = path.stat().st_size - 1000
    assert text.startswith(f"[the first {left_out:,} bytes of this output are left out]\nzzz")
    assert len(text) == len(f"[the first {left_out:,} bytes of this output are left out]\n") + 1000
    assert text.endswith("z\nlast line\n") and "first line" not in text
    assert read_output(tmp_path / "missing.txt") == ""
    short = tmp_path / "short.txt"
    short.write_text("all of it\n")
    assert read_output(short) == "all of it\n"


def test_the_tail_keeps_25_lines_each_cut_to_500_characters() -> None:
    lines = [f"line {i} " + "w" * (i * 40) for i in range(40)]
    shown = tail("\n".join(lines)).splitlines()
    assert len(shown) == 25
    assert shown[0].startswith("    | line 15 ")
    assert shown[-1] == f"    | line 39 {'w' * 492} [... {39 * 40 + 8 - 500:,} more characters cut]"
    assert tail("") == "    | (no output)"


def test_report_names_a_process_that_left_without_a_result() -> None:
    culprit, message = report(
        first=1,
        reason="",
        codes=[-6, 0],
        records=[None, None],
        outputs=["aborted", "bye"],
        stages=["joined", "joined"],
    )
    assert culprit == 1
    assert message.startswith("Process 1 of 2 exited with code 0 before its target returned")
    assert "Process 0 aborted with SIGABRT." in message
    culprit, message = report(0, "", [-6, None], [("ok", 1), None], ["", ""], ["joined", "joined"])
    assert culprit == 1 and message.startswith("Process 1 of 2 was still running")
    assert "Its target never returned, and process 0, done, gave up waiting for it." in message
    assert "Process 0 returned, then aborted with SIGABRT while waiting for the others." in message
