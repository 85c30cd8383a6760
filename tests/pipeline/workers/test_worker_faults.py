"""Workers under faults: large tasks and answers that fill the pipe both ways, a worker
killed between batches, a stage's sys.exit or KeyboardInterrupt, and a Ctrl-C that cuts
a task short. Each time the pipeline goes on with the batches of workers=0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _support.fault_stages import ExitsOnce
from _support.processes import still_running, write_script
from _support.worker_stages import scale, with_pid

from datarax.errors import WorkerError
from datarax.pipeline import Pipeline

SOURCE = {"x": np.arange(96)}
SCRIPT_TIMEOUT_S = 120  # a script that deadlocks is killed then, failing its test

# Shuffled batches of 65,536 rows: each task holds 512 KiB of row numbers and each answer
# a pickled list of as many ints, both more than a pipe holds (a socket pair's buffer is
# about 208 KiB on Linux). The script prints whether the batches are those of workers=0.
BIG_BATCHES = """
import sys, time
import numpy as np
from flax import nnx
from _support.worker_stages import as_lists
from datarax.pipeline import Pipeline
if __name__ == "__main__":
    def pipeline(workers):
        return Pipeline(source={"x": np.arange(4 * 65_536)}, stages=[as_lists],
                        batch_size=65_536, shuffle=True, rngs=nnx.Rngs(0), workers=workers)
    start = time.perf_counter()
    got = [batch["x"] for batch in pipeline(int(sys.argv[1]))]
    took = time.perf_counter() - start
    same = got == [batch["x"] for batch in pipeline(0)]
    print("same" if same else "different", f"{took:.1f}", flush=True)
"""

# The stage sends this process a Ctrl-C while it writes the second task (2 MiB of row
# numbers) to its one worker, which is busy with the first: the task is cut short.
CTRL_C_MID_TASK = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
import numpy as np
from flax import nnx
from _support.fault_stages import InterruptsParentOnce
from datarax.pipeline import Pipeline
if __name__ == "__main__":
    def pipeline(workers, stages):
        return Pipeline(source={"x": np.arange(1_000_000)}, stages=stages,
                        batch_size=250_000, shuffle=True, rngs=nnx.Rngs(0), workers=workers)
    iterator = iter(pipeline(1, [InterruptsParentOnce(os.getpid(), sys.argv[1])]))
    try:
        next(iterator)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    got = [batch["x"] for batch in iterator]  # the first batch made again, then the rest
    want = [batch["x"] for batch in pipeline(0, [])]
    same = all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
    print("same" if same else "different", flush=True)
"""


def _run(tmp_path: Path, script: str, *args: str) -> str:
    path, env = write_script(tmp_path, script)
    done = subprocess.run(
        [sys.executable, str(path), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=SCRIPT_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.parametrize("workers", [1, 2])
def test_tasks_and_answers_larger_than_the_pipe_never_deadlock(
    tmp_path: Path, workers: int
) -> None:
    same, took = _run(tmp_path, BIG_BATCHES, str(workers)).split()
    assert same == "same"
    print(f"workers={workers}: 4 batches of 65,536 rows as lists in {took} s")


def _pipeline(workers: int, stages: list) -> Pipeline:
    return Pipeline(source=SOURCE, stages=stages, batch_size=8, workers=workers)


def test_a_killed_worker_is_one_error_and_the_next_call_makes_the_batch_again() -> None:
    """Three times: one of two workers killed with SIGKILL between batches (what the
    out-of-memory killer does) costs one WorkerError; the next next() starts new workers."""
    source = {"x": np.arange(24 * 8)}
    iterator = iter(Pipeline(source=source, stages=[with_pid], batch_size=8, workers=2))
    batches, errors, kills, fresh = [next(iterator)], [], 0, 1  # fresh: by the current pool
    while len(batches) < 24:
        if kills == len(errors) < 3 and fresh and len(batches) >= 1 + 6 * kills:
            victim = int(batches[-1]["pid"][0])  # it has batches in flight
            os.kill(victim, signal.SIGKILL)
            assert still_running([victim]) == []
            kills += 1
        try:
            batches.append(next(iterator))
            fresh += 1
        except WorkerError as error:
            errors.append(error)
            fresh = 0
    assert len(errors) == kills == 3, errors
    assert all(-signal.SIGKILL in error.exit_codes for error in errors), errors
    assert all("worker process died" in str(error) for error in errors)
    want = [batch["x"].tolist() for batch in Pipeline(source=source, batch_size=8)]
    assert [batch["x"].tolist() for batch in batches] == want


@pytest.mark.parametrize(
    ("how", "said", "codes"),
    [
        ("sys.exit", r"stages\[1\] called sys.exit\(3\) in a pipeline worker process", [3]),
        ("KeyboardInterrupt", r"stages\[1\] raised KeyboardInterrupt in a pipeline worker", []),
    ],
)
def test_sys_exit_or_keyboard_interrupt_in_a_stage_names_it_and_the_batch_is_made_again(
    tmp_path: Path, how: str, said: str, codes: list[int]
) -> None:
    iterator = iter(_pipeline(2, [scale, ExitsOnce(3 * 20 + 1, tmp_path / "once", how)]))
    batches = []
    with pytest.raises(WorkerError, match=said) as raised:
        while True:
            batches.append(next(iterator))
    assert raised.value.exit_codes == codes
    assert "workers=0" in str(raised.value)
    batches += list(iterator)  # the same workers make it again, and the rest
    want = [batch["x"].tolist() for batch in _pipeline(0, [scale])]
    assert [batch["x"].tolist() for batch in batches] == want


def test_a_ctrl_c_while_a_large_task_is_written_leaves_the_next_call_working(
    tmp_path: Path,
) -> None:
    out = _run(tmp_path, CTRL_C_MID_TASK, str(tmp_path / "interrupted once"))
    assert out.split() == ["interrupted", "same"], out
