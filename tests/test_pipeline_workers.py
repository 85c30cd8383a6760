"""`Pipeline(workers=N)`: host stages in worker processes, with the batches of workers=0."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from _worker_stages import FailOnce, scale, stop, with_pid
from flax import nnx

from datarax.pipeline import Pipeline

SOURCE = {"x": np.arange(100), "y": np.arange(100) * 0.5}
HERE = Path(__file__).resolve().parent


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


def _gone(pids: list[int], within_s: float = 10.0) -> list[int]:
    """The pids still running after `within_s` seconds."""
    deadline = time.monotonic() + within_s
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [pid for pid in alive if _running(pid)]
    return alive


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


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
    with pytest.raises(RuntimeError, match=r"stages\[1\] raised StopIteration"):
        next(iter(_pipeline(1, stages=(scale, stop))))


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


def test_no_worker_is_left_after_an_epoch_or_an_exception(tmp_path: Path) -> None:
    pids = {int(pid) for batch in _pipeline(2, stages=(with_pid,)) for pid in batch["pid"]}
    assert pids and not _gone(sorted(pids))
    iterator = iter(_pipeline(2, stages=(with_pid, FailOnce(10, tmp_path / "failed"))))
    pids = {int(pid) for pid in next(iterator)["pid"]}
    with pytest.raises(ValueError, match="row 10"):
        next(iterator)
    del iterator
    gc.collect()
    assert not _gone(sorted(pids))


PARENT = """
import os, sys, time
import numpy as np
from _worker_stages import with_pid
from datarax.pipeline import Pipeline
if __name__ == "__main__":
    iterator = iter(Pipeline(source={"x": np.arange(64)}, stages=[with_pid], batch_size=8,
                             workers=2))
    pids = {int(pid) for _ in range(4) for pid in next(iterator)["pid"]}
    print(*sorted(pids), flush=True)
    time.sleep(60)
"""


def test_no_worker_is_left_when_the_parent_is_killed(tmp_path: Path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), str(HERE)])}
    parent = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        line = parent.stdout.readline() if parent.stdout else ""
        pids = [int(pid) for pid in line.split()]
        assert pids, "the parent printed no worker pid"
        assert all(_running(pid) for pid in pids)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        assert not _gone(pids), "workers outlived their killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(timeout=10)
