"""`Pipeline(workers=N)`: host stages in worker processes, with the batches of workers=0."""

from __future__ import annotations

import gc
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jax
import numpy as np
import pytest
from _support.processes import busy_cpus, running, still_running, write_script
from _support.worker_stages import (
    PARENT,
    Count,
    FailOnce,
    exit_once,
    noise_from_rows,
    picky,
    scale,
    stop,
    to_device,
    two_host_check,
    with_pid,
)
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from datarax.distributed import launch_local
from datarax.errors import StageStopIterationError, WorkerArrayError, WorkerError
from datarax.pipeline import Pipeline

SOURCE = {"x": np.arange(100), "y": np.arange(100) * 0.5}


def _pipeline(workers: int, shuffle: bool = False, stages: tuple = (scale,)) -> Pipeline:
    rngs = nnx.Rngs(3) if shuffle else None
    return Pipeline(
        source=SOURCE,
        stages=list(stages),
        batch_size=8,
        shuffle=shuffle,
        rngs=rngs,
        drop_remainder=False,
        workers=workers,
    )


def _values(batches: object) -> list[list[float]]:
    return [[*b["x"].tolist(), *b["y"].tolist()] for b in batches]  # type: ignore[attr-defined]


@pytest.mark.parametrize("shuffle", [False, True])
def test_workers_give_the_batches_of_workers_0(shuffle: bool) -> None:
    pipeline, reference = _pipeline(2, shuffle), _pipeline(0, shuffle)
    for _ in range(2):  # two epochs: the second shuffles another way
        assert _values(pipeline) == _values(reference)


def test_workers_resume_mid_epoch_exactly() -> None:
    pipeline, reference = _pipeline(2, shuffle=True), _pipeline(0, shuffle=True)
    iterator = iter(pipeline)
    for _ in range(5):
        next(iterator)
    state = pipeline.get_state()
    resumed = _pipeline(2, shuffle=True)
    resumed.set_state(state)
    reference.set_state(state)
    assert _values(resumed) == _values(reference)
    assert _values(iterator) == _values(_pipeline(0, shuffle=True))[5:]


def test_a_failing_stage_in_a_worker_is_raised_named_and_retried(tmp_path: Path) -> None:
    pipeline = _pipeline(2, stages=(scale, FailOnce(3 * 20 + 1, tmp_path / "failed")))
    iterator = iter(pipeline)
    assert _values([next(iterator), next(iterator)]) == _values(_pipeline(0))[:2]
    with pytest.raises(ValueError, match="row 61 is broken") as raised:
        next(iterator)
    assert "stages[1]" in " ".join(getattr(raised.value, "__notes__", []))
    assert pipeline.get_state()["batch_index"] == 2  # not consumed
    assert _values(iterator) == _values(_pipeline(0))[2:]


def test_stop_iteration_in_a_worker_is_an_error() -> None:
    with pytest.raises(StageStopIterationError) as raised:
        next(iter(_pipeline(1, stages=(scale, stop))))
    assert raised.value.stage == "stages[1]"


def test_a_stage_that_places_on_devices_in_a_worker_is_an_error() -> None:
    with pytest.raises(
        WorkerArrayError, match=r"returned jax\.Arrays in a pipeline worker"
    ) as raised:
        next(iter(_pipeline(1, stages=(scale, to_device))))
    assert raised.value.stage == "stages[1]"


def test_an_exception_that_cannot_cross_processes_is_still_named() -> None:
    with pytest.raises(WorkerError, match=r"stages\[0\] raised _Picky.*workers=0"):
        next(iter(_pipeline(1, stages=(picky,))))


def test_a_dead_worker_is_an_error_and_the_next_call_starts_new_ones(tmp_path: Path) -> None:
    iterator = iter(_pipeline(2, stages=(scale, exit_once(tmp_path / "died"))))
    batches = []
    with pytest.raises(WorkerError, match="worker process died") as raised:
        for _ in range(len(_pipeline(0))):  # the batches done before the death come first
            batches.append(next(iterator))
    assert 3 in raised.value.exit_codes  # exit_once's code; the other worker lived
    assert _values([*batches, *iterator]) == _values(_pipeline(0))


def test_a_stage_workers_cannot_unpickle_is_refused() -> None:
    with pytest.raises(TypeError, match=r"stages\[1\] .*cannot be pickled.*workers=0"):
        _pipeline(2, stages=(scale, lambda b: b))
    _pipeline(0, stages=(scale, lambda b: b))  # in this process a lambda is fine


def test_workers_is_a_count_fixed_once_built() -> None:
    with pytest.raises(ValueError, match="workers must be an int >= 0"):
        _pipeline(-1)
    with pytest.raises(TypeError, match="workers must be an int"):
        _pipeline(True)  # type: ignore[arg-type]
    with pytest.raises(AttributeError, match="fixed"):
        _pipeline(2).workers = 0


def test_no_worker_is_left_once_the_pipeline_is_gone(tmp_path: Path) -> None:
    pipeline = _pipeline(2, stages=(with_pid, FailOnce(10, tmp_path / "failed")))
    iterator = iter(pipeline)
    pids = {int(pid) for pid in next(iterator)["pid"]}
    with pytest.raises(ValueError, match="row 10"):
        next(iterator)
    pids |= {int(pid) for batch in iterator for pid in batch["pid"]}
    assert pids and all(running(pid) for pid in pids)  # they serve the next epoch too
    del pipeline, iterator
    gc.collect()
    assert not still_running(sorted(pids))


def _start(
    script: Path, env: dict[str, str], *args: str, stderr: int = subprocess.DEVNULL
) -> subprocess.Popen[str]:
    """The parent `script` run with `args`, its stdin and stdout piped."""
    return subprocess.Popen(
        [sys.executable, str(script), *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        env=env,
    )


def _worker_pids(parent: subprocess.Popen[str]) -> list[int]:
    """The pids of its workers, which a parent prints on its first line."""
    assert parent.stdout is not None
    return [int(pid) for pid in parent.stdout.readline().split()]


def test_no_worker_is_left_when_the_parent_ends_or_is_killed(tmp_path: Path) -> None:
    """Four parents at once: one exits, one raises, one gets Ctrl-C, one SIGKILL."""
    script, env = write_script(tmp_path, PARENT)
    endings = ("exit", "exception", "SIGINT", "SIGKILL")
    parents = {ending: _start(script, env, ending) for ending in endings}
    try:
        pids = {}
        for ending, parent in parents.items():
            pids[ending] = _worker_pids(parent)
            assert pids[ending] and all(running(pid) for pid in pids[ending]), ending
        for ending, parent in parents.items():
            assert parent.stdin is not None
            if ending.startswith("SIG"):
                parent.send_signal(getattr(signal, ending))
            else:
                parent.stdin.write("go\n")
                parent.stdin.flush()
        for ending, parent in parents.items():
            parent.wait(timeout=30)
            assert not still_running(pids[ending]), (
                f"workers outlived a parent that ended by {ending}"
            )
    finally:
        for parent in parents.values():
            if parent.poll() is None:
                parent.kill()
                parent.wait(timeout=10)


def _ctrl_c(script: Path, env: dict[str, str]) -> tuple[float | None, list[int]]:
    """Seconds from Ctrl-C to the exit of a parent with live workers (None: not within
    30 s), and its workers still running 10 s later."""
    parent = _start(script, env, "SIGINT")
    try:
        pids = _worker_pids(parent)
        parent.send_signal(signal.SIGINT)
        start = time.monotonic()
        try:
            parent.wait(timeout=30)
        except subprocess.TimeoutExpired:
            return None, pids
        return time.monotonic() - start, still_running(pids)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(timeout=10)


@pytest.mark.stress
def test_ctrl_c_ends_a_parent_with_live_workers_every_time_under_load(tmp_path: Path) -> None:
    """20 parents, 4 at a time, while two busy loops hold the CPU."""
    script, env = write_script(tmp_path, PARENT)
    started = time.monotonic()
    with busy_cpus(), ThreadPoolExecutor(4) as pool:
        outcomes = list(pool.map(lambda _: _ctrl_c(script, env), range(20)))
    took = [seconds for seconds, _ in outcomes]
    assert None not in took, f"{took.count(None)} of 20 parents hung after Ctrl-C: {took}"
    assert not [left for _, left in outcomes if left], outcomes
    print(f"20 runs in {time.monotonic() - started:.0f} s; exit after Ctrl-C took (s):")
    print(*(f"{seconds:.1f}" for seconds in took))


def test_workers_start_no_thread_here_so_a_ctrl_c_reaches_the_wait() -> None:
    """The wait for a worker's batch runs in the thread that asked for it: no other
    thread of this process could take a Ctrl-C meant to interrupt it."""
    before = set(threading.enumerate())
    pipeline = _pipeline(2)
    assert _values(pipeline) == _values(_pipeline(0))
    assert set(threading.enumerate()) - before == set()


HANGING_PARENT = """
import sys
import numpy as np
from _support.worker_stages import HangFrom, with_pid
from datarax.pipeline import Pipeline
if __name__ == "__main__":
    stage = HangFrom(8, ignore_sigterm=sys.argv[1] == "ignores SIGTERM")
    pipeline = Pipeline(source={"x": np.arange(64)}, stages=[with_pid, stage],
                        batch_size=8, workers=2)
    iterator = iter(pipeline)
    print(*sorted({int(pid) for pid in next(iterator)["pid"]}), flush=True)
    if sys.argv[2] == "deleted":
        del pipeline, iterator  # the pipeline's finalizer stops its workers
"""


@pytest.mark.parametrize(
    ("stage", "pipeline"),
    [
        ("never returns", "deleted"),
        ("ignores SIGTERM", "deleted"),
    ],
)
def test_a_stage_that_never_returns_holds_up_no_exit(
    tmp_path: Path, stage: str, pipeline: str
) -> None:
    """Batches 1-4 are in flight in workers stuck for good when the parent ends."""
    script, env = write_script(tmp_path, HANGING_PARENT)
    parent = _start(script, env, stage, pipeline, stderr=subprocess.PIPE)
    try:
        pids = _worker_pids(parent)
        start = time.monotonic()
        _, errors = parent.communicate(timeout=30)  # a hang limit: about 2 s here
    finally:
        parent.kill()
    took = time.monotonic() - start
    assert parent.returncode == 0, (parent.returncode, took, errors)
    assert "Traceback" not in errors, errors
    assert pids and not still_running(pids)


def test_each_worker_runs_its_own_copy_of_the_stages_made_when_built() -> None:
    count = Count()
    pipeline = _pipeline(2, stages=(count,))
    count.calls = 100  # changed after the build: the workers' copies do not see it
    calls_by_worker: dict[int, list[int]] = {}
    for batch in pipeline:
        calls_by_worker.setdefault(int(batch["pid"][0]), []).append(int(batch["call"][0]))
    for calls in calls_by_worker.values():  # each copy counts the batches it made
        assert calls == list(range(1, len(calls) + 1)), calls_by_worker
    assert count.calls == 100  # the pipeline's own copy never ran
    in_process = Count()
    assert [int(b["call"][0]) for b in _pipeline(0, stages=(in_process,))] == list(range(1, 14))
    assert in_process.calls == 13


def test_randomness_drawn_from_the_rows_gives_the_batches_of_workers_0() -> None:
    pipeline = _pipeline(2, shuffle=True, stages=(noise_from_rows,))
    reference = _pipeline(0, shuffle=True, stages=(noise_from_rows,))
    for _ in range(2):
        assert _values(pipeline) == _values(reference)


def test_workers_give_the_global_batches_of_workers_0() -> None:
    mesh = jax.make_mesh((len(jax.devices()),), ("data",))
    sharding = NamedSharding(mesh, PartitionSpec("data"))

    def run(workers: int) -> list[tuple[list[float], NamedSharding]]:
        pipeline = Pipeline(
            source=SOURCE,
            stages=[scale],
            batch_size=16,
            shuffle=True,
            rngs=nnx.Rngs(1),
            sharding=sharding,
            workers=workers,
        )
        return [(np.asarray(b["x"]).tolist(), b["x"].sharding) for b in pipeline]

    assert run(2) == run(0)


@pytest.mark.multihost
def test_workers_on_two_hosts_give_the_shards_of_workers_0() -> None:
    runs = launch_local(two_host_check, num_processes=2, devices_per_process=2, timeout_s=90)
    for run in runs:
        assert run.value[2] == run.value[0]
        assert len(run.value[2]) == 8  # 64 rows in global batches of 8
        for batch in run.value[2]:
            assert all(read == [4, 4] for _, read in batch)  # each host read B/P = 4 rows
