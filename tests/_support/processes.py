"""Processes that tests start and wait for: whether a pid still runs, scripts that import
this checkout and `tests/_support`, scripts that choose their own device count, and busy
loops that hold the CPUs."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent


def running(pid: int) -> bool:
    """Whether `pid` runs; a zombie (dead, not yet reaped) does not, where /proc says so."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it exists
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return not Path("/proc/self").exists()  # gone, unless there is no /proc to ask
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def still_running(pids: Iterable[int], within_s: float = 10.0) -> list[int]:
    """The pids that still run `within_s` seconds from now (a killed process takes a
    moment to end); returns as soon as none of them runs."""
    deadline = time.monotonic() + within_s
    alive = [pid for pid in pids if running(pid)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [pid for pid in alive if running(pid)]
    return alive


def script_environment() -> dict[str, str]:
    """This environment with the checkout and `tests/` on PYTHONPATH: a script run with it
    imports `datarax` from here and `tests/_support` as ``_support.<module>``."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)])}


def write_script(folder: Path, text: str) -> tuple[Path, dict[str, str]]:
    """`text` written to ``folder/parent.py``, and the environment that runs it."""
    script = folder / "parent.py"
    script.write_text(text)
    return script, script_environment()


def run_own_devices(script: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """`script` run by ``python -c`` from the checkout, with `script_environment()`, on
    CPU and without this process's XLA_FLAGS (the script sets its own device count);
    fails the test unless it exits 0."""
    environment = {k: v for k, v in script_environment().items() if k != "XLA_FLAGS"}
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environment | {"JAX_PLATFORMS": "cpu"},
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@contextlib.contextmanager
def busy_cpus(count: int = 2) -> Iterator[None]:
    """`count` processes that spin until the block ends."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait(timeout=30)
