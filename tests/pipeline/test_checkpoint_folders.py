"""Checkpoint folders: any name saves and restores, or is refused before anything is
written; a step on disk is saved once, whichever object or process saves it, and two
savers at once never both write one step."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
from _support import multihost_checks as checks

from datarax.distributed import launch_local
from datarax.pipeline import Checkpoints, Pipeline

ROOT = Path(__file__).parents[2]


def _pipeline() -> Pipeline:
    return Pipeline(source={"x": np.arange(8.0)}, batch_size=2)


def _restored(folder: Path, step: int | None = None) -> np.ndarray:
    with Checkpoints(folder) as checkpoints:
        restored, _ = checkpoints.restore(model={"w": jax.numpy.zeros(3)}, step=step)
    return np.asarray(restored["w"])


@pytest.mark.parametrize(
    "name", ["run lr=0.1, {seed}]", "100% é", "a#b:c;d", "$HOME~", "quote'\"`", "tab\tnew\nline"]
)
def test_an_odd_folder_name_saves_and_restores(tmp_path: Path, name: str) -> None:
    with Checkpoints(tmp_path / name) as checkpoints:
        checkpoints.save(1, model={"w": jax.numpy.arange(3.0)}, pipeline=_pipeline())
    np.testing.assert_array_equal(_restored(tmp_path / name), np.arange(3.0))


@pytest.mark.parametrize(
    ("name", "character"),
    [
        ("run[lr=0.1]", "["),
        ("a*b", "*"),
        ("run?", "?"),
        pytest.param(
            "a\\b",
            "\\",
            marks=pytest.mark.skipif(os.sep != "/", reason="a backslash separates folders here"),
        ),
    ],
)
def test_a_folder_name_orbax_reads_as_a_pattern_is_refused_before_saving(
    tmp_path: Path, name: str, character: str
) -> None:
    """Orbax globs inside the folder's path, so such a step saved but did not restore,
    and removing a failed save's folder matched siblings' folders too."""
    sibling = tmp_path / "runX" / "1.orbax-checkpoint-tmp"
    sibling.mkdir(parents=True)
    expected = re.escape(f"contains '{character}'") + ".*Name the folder without"
    with pytest.raises(ValueError, match=expected) as refused:
        Checkpoints(tmp_path / name)
    assert str(tmp_path / name) in str(refused.value)
    assert sorted(os.listdir(tmp_path)) == ["runX"] and sibling.is_dir()


def test_a_folder_below_a_pattern_is_refused_too(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"contains '\*'"):
        Checkpoints(tmp_path / "sweep*" / "run")
    with pytest.raises(ValueError, match=r"contains '\['"):
        Checkpoints("gs://bucket/run[1]")


def test_a_step_another_object_saved_is_refused_and_kept(tmp_path: Path) -> None:
    first, second = Checkpoints(tmp_path), Checkpoints(tmp_path)
    with first, second:
        first.save(1, model={"w": jax.numpy.zeros(3)}, pipeline=_pipeline())
        with pytest.raises(ValueError, match=r"Step 1 is saved already.*save under a new step"):
            second.save(1, model={"w": jax.numpy.ones(3)}, pipeline=_pipeline())
        second.save(2, model={"w": jax.numpy.ones(3)}, pipeline=_pipeline())
        assert second.latest_step() == 2
    np.testing.assert_array_equal(_restored(tmp_path, step=1), np.zeros(3))
    np.testing.assert_array_equal(_restored(tmp_path, step=2), np.ones(3))


def test_a_save_while_another_is_in_progress_is_refused(tmp_path: Path) -> None:
    """The first save is held in the middle; a second object's save of the same step,
    or of another, is refused at once, and the first completes."""
    first, second = Checkpoints(tmp_path), Checkpoints(tmp_path)
    started, release = threading.Event(), threading.Event()
    real_save = first._manager.save  # the test holds Orbax's save here

    def held_save(*args: Any, **kwargs: Any) -> Any:
        started.set()
        assert release.wait(60)
        return real_save(*args, **kwargs)

    first._manager.save = held_save
    saving = threading.Thread(
        target=first.save,
        args=(1,),
        kwargs={"model": {"w": jax.numpy.zeros(3)}, "pipeline": _pipeline()},
    )
    saving.start()
    try:
        assert started.wait(60)
        for step in (1, 2):
            with pytest.raises(ValueError, match=r"Another save into .* is in progress"):
                second.save(step, model={"w": jax.numpy.ones(3)}, pipeline=_pipeline())
    finally:
        release.set()
        saving.join(60)
    with first, second, pytest.raises(ValueError, match="Step 1 is saved already"):
        second.save(1, model={"w": jax.numpy.ones(3)}, pipeline=_pipeline())
    np.testing.assert_array_equal(_restored(tmp_path, step=1), np.zeros(3))


_SAVER = """
import os, sys, time
import jax, numpy as np
from datarax.pipeline import Checkpoints, Pipeline
folder, me = sys.argv[1], int(sys.argv[2])
checkpoints = Checkpoints(folder)
weights = {"w": jax.numpy.full((2_000_000,), float(me))}
weights["w"].block_until_ready()
print("ready", flush=True)
while not os.path.exists(os.path.join(os.path.dirname(folder), "go")):
    time.sleep(0.001)
pipeline = Pipeline(source={"x": np.arange(8.0)}, batch_size=2)
try:
    checkpoints.save(1, model=weights, pipeline=pipeline)
    print("saved", flush=True)
except ValueError as error:
    print("refused:", error, flush=True)
"""


def test_two_processes_saving_one_step_at_once_never_both_succeed(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoints"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    savers = [
        subprocess.Popen(
            [sys.executable, "-c", _SAVER, str(folder), str(me)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for me in (1, 2)
    ]
    try:
        for saver in savers:
            assert saver.stdout is not None and saver.stdout.readline() == "ready\n"
        (tmp_path / "go").touch()
        outputs = [saver.communicate(timeout=120) for saver in savers]
    finally:
        for saver in savers:
            saver.kill()
            saver.wait(timeout=30)
    said = [out.strip().splitlines()[-1] if out.strip() else err[-2000:] for out, err in outputs]
    assert sorted(line.split(":")[0] for line in said) == ["refused", "saved"], said
    refusal = next(line for line in said if line.startswith("refused"))
    assert "is in progress" in refusal or "Step 1 is saved already" in refusal
    winner = 1 + [line.split(":")[0] for line in said].index("saved")
    with Checkpoints(folder) as checkpoints:
        restored, _ = checkpoints.restore(model={"w": jax.numpy.zeros(2_000_000)})
    assert np.all(np.asarray(restored["w"]) == winner)
    assert sorted(os.listdir(folder)) == [".datarax-save.lock", "1"]


@pytest.mark.multihost
def test_a_refusal_on_one_process_reaches_every_process(tmp_path: Path) -> None:
    """On 2 processes: a step saved already, and a lock that only process 0 can see,
    are refused on both at once (not after a barrier's time-out)."""
    runs = launch_local(
        checks.checkpoint_refusals,
        num_processes=2,
        devices_per_process=2,
        args=[str(tmp_path)],
        timeout_s=120,
    )
    for run in runs:
        assert "Step 1 is saved already" in run.value["again"]
        assert "Another save into" in run.value["locked"]
        assert run.value["again_s"] < 30 and run.value["locked_s"] < 30  # a hang limit
        assert run.value["latest"] == 2
