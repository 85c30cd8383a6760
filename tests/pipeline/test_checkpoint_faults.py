"""Checkpoints never lose the last good step: full and read-only disks, a process
killed mid-save, malformed states and bad directories.

A full disk is a 2 MiB tmpfs where this machine lets the test mount one (root on
Linux), and always a file layer that fails with ENOSPC after a quota
(`_support/faulty_disks.py`), so the rule is tested on every machine.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
from _support import faulty_disks as disks

from datarax.pipeline import Checkpoints, CheckpointSaveError, Pipeline

ROOT = Path(__file__).parents[2]
LOCK = ".datarax-save.lock"  # the directory's save lock, which stays


def _pipeline() -> Pipeline:
    pipeline = Pipeline(source={"x": np.arange(8.0)}, batch_size=2)
    next(iter(pipeline))
    return pipeline


def _weights(rows: int = 3, seed: int = 0) -> dict[str, jax.Array]:
    return {"w": jax.random.normal(jax.random.key(seed), (rows,))}


def _assert_only_step_1(checkpoints: Checkpoints, folder: Path) -> None:
    """Step 1 is listed, restores, and no temporary folder is left."""
    assert checkpoints.latest_step() == 1
    restored, step = checkpoints.restore(
        model=_weights(), pipeline=Pipeline(source={"x": np.arange(8.0)}, batch_size=2)
    )
    assert step == 1
    np.testing.assert_array_equal(np.asarray(restored["w"]), np.asarray(_weights()["w"]))
    assert sorted(os.listdir(folder)) == [LOCK, "1"]


def _fill_and_recover(folder: Path, make_room: Any, fill: Any) -> None:
    pipeline = _pipeline()
    with Checkpoints(folder, max_to_keep=1) as checkpoints:
        checkpoints.save(1, model=_weights(), pipeline=pipeline)
        with fill(), pytest.raises(CheckpointSaveError) as caught:
            checkpoints.save(2, model=_weights(1_000_000, seed=1), pipeline=pipeline)
        message = str(caught.value)
        assert f"{folder}/2.orbax-checkpoint-tmp" in message
        assert "No space left on device" in message or "ENOSPC" in message
        assert "kept: [1]" in message
        _assert_only_step_1(checkpoints, folder)
        make_room()
        checkpoints.save(2, model=_weights(1_000, seed=1), pipeline=pipeline)
        assert checkpoints.latest_step() == 2
        assert sorted(os.listdir(folder)) == [LOCK, "2"]


def test_a_save_that_fills_the_disk_keeps_the_last_step(tmp_path: Path) -> None:
    """Python writes under the folder fail with ENOSPC; runs on every machine."""
    folder = tmp_path / "checkpoints"
    _fill_and_recover(folder, lambda: None, lambda: disks.disk_with_quota(folder, 0))


def test_an_interrupted_save_keeps_the_last_step(tmp_path: Path) -> None:
    """Ctrl-C (KeyboardInterrupt) in the middle of writing step 2 reaches the caller."""
    pipeline = _pipeline()

    def interrupt(name: str) -> BaseException:
        return KeyboardInterrupt()

    with Checkpoints(tmp_path, max_to_keep=1) as checkpoints:
        checkpoints.save(1, model=_weights(), pipeline=pipeline)
        with disks.disk_with_quota(tmp_path, 100, interrupt), pytest.raises(KeyboardInterrupt):
            checkpoints.save(2, model=_weights(), pipeline=pipeline)
        _assert_only_step_1(checkpoints, tmp_path)
        checkpoints.save(2, model=_weights(), pipeline=pipeline)
        assert checkpoints.latest_step() == 2


@pytest.mark.skipif(not disks.can_mount(), reason="mounting a tmpfs needs root on Linux")
def test_a_save_that_fills_a_small_tmpfs_keeps_the_last_step(tmp_path: Path) -> None:
    """A real 2 MiB tmpfs: the 4 MB array of step 2 does not fit, a 4 kB one does."""
    with disks.small_tmpfs(tmp_path / "disk") as disk:
        _fill_and_recover(disk / "checkpoints", lambda: None, _no_fault)


def _no_fault() -> Any:
    return contextlib.nullcontext()


_READ_ONLY_CHILD = """
import os, sys, time
sys.path.insert(0, {tests!r})
import jax, numpy as np
from _support import faulty_disks as disks
from datarax.pipeline import Checkpoints, CheckpointSaveError, Pipeline
disk, mode = sys.argv[1], sys.argv[2]
pipeline = Pipeline(source={{"x": np.arange(8.0)}}, batch_size=2)
with Checkpoints(os.path.join(disk, "checkpoints"), max_to_keep=1) as checkpoints:
    checkpoints.save(1, model={{"w": jax.numpy.zeros(3)}}, pipeline=pipeline)
    if mode == "remount":
        disks.remount_read_only(disk)
    elif mode == "chmod":
        os.chmod(os.path.join(disk, "checkpoints"), 0o555)
    try:
        with disks.disk_with_quota(disk, 0 if mode == "inject" else 1 << 40, disks.read_only):
            checkpoints.save(2, model={{"w": jax.numpy.ones(3)}}, pipeline=pipeline)
    except CheckpointSaveError as error:
        print("refused:", error, flush=True)
    print("steps:", checkpoints.latest_step(), sorted(os.listdir(checkpoints.directory)))
print("leaving", time.monotonic(), flush=True)
"""


def _read_only_mode() -> str:
    """A read-only tmpfs where one can be mounted; else a folder without write
    permission; else (root, which permissions do not stop) writes that fail with EROFS.
    """
    if disks.can_mount():
        return "remount"
    return "chmod" if os.geteuid() != 0 else "inject"


def test_a_save_on_a_read_only_disk_keeps_the_last_step_and_exits_at_once(
    tmp_path: Path,
) -> None:
    """Asynchronous Orbax saves left threads that held the exit for 300 s."""
    mode = _read_only_mode()
    script = tmp_path / "child.py"
    script.write_text(_READ_ONLY_CHILD.format(tests=str(Path(__file__).parents[1])))
    disk = tmp_path / "disk"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}

    def run() -> tuple[subprocess.CompletedProcess[str], float]:
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, str(script), str(disk), mode],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            check=False,
        )
        left_at = float(done.stdout.split("leaving ")[1].split()[0])
        return done, time.monotonic() - max(left_at, started)

    if mode == "remount":
        with disks.small_tmpfs(disk):
            done, exit_s = run()
    else:
        disk.mkdir()
        done, exit_s = run()
    assert done.returncode == 0, done.stderr[-3000:]
    assert "refused: Saving step 2 into" in done.stdout
    assert "2.orbax-checkpoint-tmp failed" in done.stdout
    assert f"steps: 1 {[LOCK, '1']}" in done.stdout
    assert exit_s < 5, f"the process took {exit_s:.1f} s to exit after its last line"


_KILLED_CHILD = """
import sys
import jax, numpy as np
from datarax.pipeline import Checkpoints, Pipeline
pipeline = Pipeline(source={"x": np.arange(8.0)}, batch_size=2)
checkpoints = Checkpoints(sys.argv[1], max_to_keep=1)
checkpoints.save(1, model={"w": jax.numpy.arange(3.0)}, pipeline=pipeline)
big = jax.random.normal(jax.random.key(1), (int(sys.argv[2]),))
big.block_until_ready()
print("saving 2", flush=True)
checkpoints.save(2, model={"w": big}, pipeline=pipeline)
print("saved 2", flush=True)
"""


def test_a_process_killed_mid_save_leaves_the_last_step(tmp_path: Path) -> None:
    """SIGKILL while step 2's arrays are being written; a new process lists step 1."""
    folder = tmp_path / "checkpoints"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_CHILD, str(folder), str(32_000_000)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "saving 2\n"
        deadline = time.monotonic() + 60
        while not (folder / "2.orbax-checkpoint-tmp").exists():
            assert time.monotonic() < deadline, "step 2's save never began"
            time.sleep(0.001)
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    assert not (folder / "2").exists(), "the save finished before the kill: use a bigger array"
    with Checkpoints(folder, max_to_keep=1) as checkpoints:
        assert checkpoints.latest_step() == 1
        restored, _ = checkpoints.restore(model={"w": jax.numpy.zeros(3)})
        np.testing.assert_array_equal(np.asarray(restored["w"]), np.arange(3.0))
        checkpoints.save(2, model={"w": jax.numpy.ones(3)}, pipeline=_pipeline())
        assert checkpoints.latest_step() == 2
        assert sorted(os.listdir(folder)) == [LOCK, "2"]  # the killed save's folder is gone


_BAD_STATES = [
    {"epoch": -1, "oops": True},
    {"epoch": -1},
    {"epoch": 0.5},
    {"batch_index": True},
    {"batch_size": "2"},
    {"seed": "abc"},
    {"seed": [1.5]},
]


@pytest.mark.parametrize("change", _BAD_STATES)
def test_a_malformed_state_is_refused_before_anything_is_written(
    tmp_path: Path, change: dict[str, Any]
) -> None:
    """Refused as set_state refuses it; with max_to_keep=1 the good step stays."""
    pipeline = _pipeline()
    state = pipeline.get_state() | change
    with Checkpoints(tmp_path, max_to_keep=1) as checkpoints:
        checkpoints.save(1, model=_weights(), pipeline=pipeline)
        with pytest.raises((TypeError, ValueError)) as refused:
            checkpoints.save(2, model=_weights(), pipeline=state)
        with pytest.raises(type(refused.value)):
            _pipeline().set_state(state)
        _assert_only_step_1(checkpoints, tmp_path)


def test_a_step_saved_already_is_refused_before_writing(tmp_path: Path) -> None:
    with Checkpoints(tmp_path, max_to_keep=1) as checkpoints:
        checkpoints.save(1, model=_weights(), pipeline=_pipeline())
        with pytest.raises(ValueError, match="Step 1 is saved already"):
            checkpoints.save(1, model=_weights(seed=1), pipeline=_pipeline())
        _assert_only_step_1(checkpoints, tmp_path)


@pytest.mark.parametrize(
    ("directory", "error", "match"),
    [
        ("", ValueError, "would write into the current directory"),
        ("   ", ValueError, "must name a folder"),
        (None, TypeError, "must be a str or os.PathLike"),
        (3, TypeError, "must be a str or os.PathLike"),
        (b"bytes", TypeError, "must be a str or os.PathLike"),
        ("a\0b", ValueError, "must name a folder"),
    ],
)
def test_bad_directories_are_refused(directory: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        Checkpoints(directory)


def test_a_file_is_not_a_checkpoint_directory(tmp_path: Path) -> None:
    file = tmp_path / "file"
    file.write_text("")
    with pytest.raises(ValueError, match="exists and is not a folder"):
        Checkpoints(file)
