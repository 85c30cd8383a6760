"""A `Checkpoints` sees the steps others save into its folder: other objects in this
process, another process (a trainer saving while an evaluator polls), and on a job of
many processes all restore one step that every process sees.

A step is seen once its save is complete; one being written is not listed.
"""

from __future__ import annotations

import builtins
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest

from datarax.distributed import launch_local
from datarax.pipeline import Checkpoints, Pipeline

ROOT = Path(__file__).parents[2]


def _pipeline() -> Pipeline:
    return Pipeline(source={"x": np.arange(8.0)}, batch_size=2)


def _after(batches: int) -> Pipeline:
    """A pipeline that has given `batches` batches."""
    pipeline = _pipeline()
    iterator = iter(pipeline)
    for _ in range(batches):
        next(iterator)
    return pipeline


def _weights(value: float) -> dict[str, jax.Array]:
    return {"w": jax.numpy.full(3, value)}


def test_a_reader_made_before_the_saver_sees_its_steps(tmp_path: Path) -> None:
    reader, saver = Checkpoints(tmp_path), Checkpoints(tmp_path)
    with reader, saver:
        assert reader.latest_step() is None
        saver.save(1, model=_weights(1.0), pipeline=_after(1))
        assert reader.latest_step() == 1
        resumed = _pipeline()
        restored, step = reader.restore(model=_weights(0.0), pipeline=resumed)
        assert step == 1 and resumed.get_state()["batch_index"] == 1
        np.testing.assert_array_equal(np.asarray(restored["w"]), np.full(3, 1.0))
        saver.save(2, model=_weights(2.0), pipeline=_after(2))
        assert reader.latest_step() == 2
        restored, step = reader.restore(model=_weights(0.0))
        assert step == 2
        np.testing.assert_array_equal(np.asarray(restored["w"]), np.full(3, 2.0))


def test_a_step_being_written_is_not_seen_until_its_save_ends(tmp_path: Path) -> None:
    """The save of step 2 is held at its first file write, inside its temporary folder:
    the reader lists step 1 only, and restores step 1; once the save ends, step 2."""
    reader, saver = Checkpoints(tmp_path), Checkpoints(tmp_path)
    saver.save(1, model=_weights(1.0), pipeline=_after(1))
    writing, release = threading.Event(), threading.Event()
    real_open = builtins.open
    temporary = str(tmp_path / "2.orbax-checkpoint-tmp")

    def held_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        named = isinstance(file, (str, os.PathLike)) and os.fspath(file).startswith(temporary)
        if named and any(flag in mode for flag in "wax+") and not writing.is_set():
            writing.set()
            assert release.wait(60)
        return real_open(file, mode, *args, **kwargs)

    failed: list[BaseException] = []

    def save() -> None:
        try:
            saver.save(2, model=_weights(2.0), pipeline=_after(2))
        except BaseException as error:  # shown by the assertion below
            failed.append(error)

    builtins.open = held_open
    saving = threading.Thread(target=save)
    try:
        saving.start()
        assert writing.wait(60), "the save of step 2 never wrote a file through open()"
        assert (tmp_path / "2.orbax-checkpoint-tmp").is_dir()
        assert reader.latest_step() == 1
        restored, step = reader.restore(model=_weights(0.0))
        assert step == 1
        np.testing.assert_array_equal(np.asarray(restored["w"]), np.full(3, 1.0))
        assert not (tmp_path / "2").exists()  # still being written after those reads
    finally:
        release.set()
        saving.join(60)
        builtins.open = real_open
    assert not failed, failed
    with reader, saver:
        assert reader.latest_step() == 2
        assert reader.restore(model=_weights(0.0))[1] == 2


def test_a_step_deleted_by_another_save_is_not_found(tmp_path: Path) -> None:
    """The reader listed steps 1 and 2; two saves (max_to_keep=2) then deleted them."""
    saver = Checkpoints(tmp_path, max_to_keep=2)
    for step in (1, 2):
        saver.save(step, model=_weights(step), pipeline=_after(step))
    reader = Checkpoints(tmp_path)
    assert reader.latest_step() == 2
    for step in (3, 4):
        saver.save(step, model=_weights(step), pipeline=_after(step))
    with reader, saver:
        with pytest.raises(FileNotFoundError, match=r"at step 1 .*saved steps: \[3, 4\]"):
            reader.restore(model=_weights(0.0), step=1)
        assert reader.restore(model=_weights(0.0))[1] == 4


def test_a_step_deleted_while_it_is_restored_is_not_found(tmp_path: Path) -> None:
    """A save deletes the step between the reader's listing and Orbax's read of it."""
    with Checkpoints(tmp_path) as saver, Checkpoints(tmp_path) as reader:
        saver.save(1, model=_weights(1.0), pipeline=_after(1))
        real_restore = reader._manager.restore

        def deleted_first(step: int, *args: Any, **kwargs: Any) -> Any:
            shutil.rmtree(tmp_path / str(step))
            return real_restore(step, *args, **kwargs)

        reader._manager.restore = deleted_first
        pipeline = _after(3)
        with pytest.raises(FileNotFoundError, match=r"was deleted .* while it was being restored"):
            reader.restore(model=_weights(0.0), pipeline=pipeline)
        assert pipeline.get_state()["batch_index"] == 3


_TRAINER = """
import os, sys, time
import jax, numpy as np
from datarax.pipeline import Checkpoints, Pipeline
folder = sys.argv[1]
pipeline = Pipeline(source={"x": np.arange(8.0)}, batch_size=2)
batches = iter(pipeline)
with Checkpoints(folder) as checkpoints:
    for step in (1, 2, 3):
        while not os.path.exists(os.path.join(os.path.dirname(folder), f"go-{step}")):
            time.sleep(0.01)
        next(batches)
        checkpoints.save(step, model={"w": jax.numpy.full(3, float(step))}, pipeline=pipeline)
        print("saved", step, flush=True)
"""


def test_an_evaluator_sees_each_step_a_trainer_process_saves(tmp_path: Path) -> None:
    """The evaluator (this process) opens the folder before the trainer (another
    process) saves anything, and sees each step once its save has returned."""
    folder = tmp_path / "checkpoints"
    evaluator = Checkpoints(folder)
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    trainer = subprocess.Popen(
        [sys.executable, "-c", _TRAINER, str(folder)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    watchdog = threading.Timer(120, trainer.kill)  # a hung trainer ends the reads below
    watchdog.start()
    try:
        assert trainer.stdout is not None
        for step in (1, 2, 3):
            assert evaluator.latest_step() == (None if step == 1 else step - 1)
            (tmp_path / f"go-{step}").touch()
            assert trainer.stdout.readline() == f"saved {step}\n", trainer.stderr
            assert evaluator.latest_step() == step
            resumed = _pipeline()
            restored, restored_step = evaluator.restore(model=_weights(0.0), pipeline=resumed)
            assert restored_step == step and resumed.get_state()["batch_index"] == step
            np.testing.assert_array_equal(np.asarray(restored["w"]), np.full(3, float(step)))
        assert trainer.wait(timeout=60) == 0
    finally:
        watchdog.cancel()
        trainer.kill()
        trainer.wait(timeout=30)
        evaluator.close()


def restores_what_every_process_sees(folder: str) -> dict[str, Any]:
    """On 2 processes: process 0 does not see step 2 yet (a save still being written, or
    a file system that shows it late). Without `step` both restore step 1; asked for
    step 2, both refuse."""
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    replicated = NamedSharding(mesh, P())
    said: dict[str, Any] = {}
    with Checkpoints(folder) as checkpoints:
        for step in (1, 2):
            weights = {"w": jax.device_put(np.full(4, float(step), np.float32), replicated)}
            checkpoints.save(step, model=weights, pipeline=_pipeline())
        if jax.process_index() == 0:  # this process's listing lags behind
            checkpoints._manager.reload = lambda: None
            checkpoints._manager.all_steps = lambda read=False: [1]
        template = {"w": jax.device_put(np.zeros(4, np.float32), replicated)}
        started = time.monotonic()
        restored, said["step"] = checkpoints.restore(model=template)
        said["w"] = np.asarray(restored["w"].addressable_data(0)).tolist()
        try:
            checkpoints.restore(model=template, step=2)
            said["step 2"] = "restored"
        except FileNotFoundError as error:
            said["step 2"] = str(error)
        said["seconds"] = time.monotonic() - started
    return said


@pytest.mark.multihost
def test_processes_of_a_job_restore_one_step_that_all_see(tmp_path: Path) -> None:
    runs = launch_local(
        restores_what_every_process_sees,
        num_processes=2,
        devices_per_process=2,
        args=[str(tmp_path)],
        timeout_s=120,
    )
    for run in runs:
        assert run.value["step"] == 1 and run.value["w"] == [1.0] * 4
        assert "Processes [0] do not see step 2, which the others do" in run.value["step 2"]
        assert run.value["seconds"] < 30  # refused together, not after a time-out
