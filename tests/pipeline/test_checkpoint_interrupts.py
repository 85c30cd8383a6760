"""Ctrl-C during `Checkpoints.save`: the step finishes, the interrupt reaches the caller,
and no temporary folder is left beside the steps saved before."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from datarax.pipeline import Checkpoints, Pipeline
from datarax.pipeline._interrupt import finish_before_ctrl_c

ROOT = Path(__file__).parents[2]
LOCK = ".datarax-save.lock"
ROWS = 8_000_000  # step 2's array: 32 MB, long enough to be interrupted while written

_INTERRUPTED_CHILD = """
import signal, sys, time
# Ctrl-C raises KeyboardInterrupt, as in a terminal, even where the tests were started
# in the background by a shell that has children ignore SIGINT.
signal.signal(signal.SIGINT, signal.default_int_handler)
import jax, numpy as np
from datarax.pipeline import Checkpoints, Pipeline
pipeline = Pipeline(source={"x": np.arange(8.0)}, batch_size=2)
checkpoints = Checkpoints(sys.argv[1], max_to_keep=3)
checkpoints.save(1, model={"w": jax.numpy.arange(3.0)}, pipeline=pipeline)
big = jax.numpy.arange(int(sys.argv[2]), dtype=jax.numpy.float32)
big.block_until_ready()
print("saving 2", flush=True)
try:
    checkpoints.save(2, model={"w": big}, pipeline=pipeline)
    print("saved 2", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    raise
while True:  # a Ctrl-C that lands after the save ends here
    time.sleep(0.01)
"""


def _interrupt_mid_save(folder: Path, delay_s: float) -> tuple[str, int]:
    """Runs the child, sends it SIGINT `delay_s` after step 2's temporary folder
    appears; returns what it printed after "saving 2" and its exit code."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    child = subprocess.Popen(
        [sys.executable, "-c", _INTERRUPTED_CHILD, str(folder), str(ROWS)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "saving 2\n"
        deadline = time.monotonic() + 60
        while not (folder / "2.orbax-checkpoint-tmp").exists() and not (folder / "2").exists():
            assert time.monotonic() < deadline, "step 2's save never began"
            time.sleep(0.001)
        time.sleep(delay_s)
        child.send_signal(signal.SIGINT)
        try:
            printed, _ = child.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the Ctrl-C sent {delay_s} s into the save was lost: still running")
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
    return printed.strip(), child.returncode


@pytest.mark.parametrize("delay_s", [0.0, 0.01, 0.03, 0.06])
def test_ctrl_c_during_a_save_finishes_the_step_and_leaves_no_temporary_folder(
    tmp_path: Path, delay_s: float
) -> None:
    folder = tmp_path / "checkpoints"
    printed, code = _interrupt_mid_save(folder, delay_s)
    assert code == -signal.SIGINT, (printed, code)  # the interrupt ended the process
    left = sorted(os.listdir(folder))
    assert not [name for name in left if ".orbax-checkpoint-tmp" in name], left
    assert left == [LOCK, "1", "2"], left  # begun before the Ctrl-C: finished
    if delay_s == 0.0:  # sent as the save began: it reached the caller of save
        assert printed == "interrupted", printed
    with Checkpoints(folder, max_to_keep=3) as checkpoints:
        assert checkpoints.latest_step() == 2
        pipeline = Pipeline(source={"x": np.arange(8.0)}, batch_size=2)
        first, _ = checkpoints.restore(model={"w": jax.numpy.zeros(3)}, pipeline=pipeline, step=1)
        np.testing.assert_array_equal(np.asarray(first["w"]), np.arange(3.0))
        second, _ = checkpoints.restore(model=None, step=2)
        np.testing.assert_array_equal(np.asarray(second["w"]), np.arange(ROWS, dtype=np.float32))


def test_a_ctrl_c_held_back_is_raised_when_the_block_ends_and_a_second_one_at_once() -> None:
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        steps = []
        with pytest.raises(KeyboardInterrupt), finish_before_ctrl_c("the test's work"):
            signal.raise_signal(signal.SIGINT)
            steps.append("finished after the first Ctrl-C")
        assert steps == ["finished after the first Ctrl-C"]
        with pytest.raises(KeyboardInterrupt), finish_before_ctrl_c("the test's work"):
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGINT)
            steps.append("not reached")
        assert len(steps) == 1
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back
        with (
            pytest.raises(KeyboardInterrupt) as raised,
            finish_before_ctrl_c("the test's work"),
        ):
            signal.raise_signal(signal.SIGINT)
            raise OSError("disk full")
        assert isinstance(raised.value.__cause__, OSError)
    finally:
        signal.signal(signal.SIGINT, previous)
