"""A pipeline's position and a model's state in one Orbax checkpoint, resumable on any
number of processes.

`Checkpoints` wraps an ``orbax.checkpoint.CheckpointManager``. Each step saves the
model's arrays (any pytree of `jax.Array`, e.g. ``nnx.state(model)``) and the
pipeline's state (a small JSON dict, the same on every host) side by side. Orbax
writes each array once, from the hosts that hold it, and restores it onto whatever
sharding the restoring job asks for; the pipeline's state names no process or device.
So a job saved by 2 hosts resumes at exactly the next batch on 1, 2 or 4.

A save never loses the last good step: it is synchronous (no background thread
outlives it), the state is checked before anything is written or deleted, and older
steps are deleted only once the new one is complete. A save that fails (a full or
read-only disk) removes its temporary folder and raises `CheckpointSaveError`, and the
steps saved before stay listed and restorable. A Ctrl-C during a save lets the step
finish, then raises `KeyboardInterrupt` (a second one stops at once); a process killed
mid-save leaves a temporary folder that the next save into that directory removes.

A step is saved once. A save re-reads the steps on disk, so it refuses a step that any
`Checkpoints` object or process saved, and on a local or shared file system it holds
the directory's lock (``.datarax-save.lock``, an ``flock`` that the system releases
when the process ends) from that check to the end of the save: a second save into the
directory meanwhile is refused, so two savers never both write one step. A folder name
that Orbax would read as a file pattern is refused before anything is written; a
leading ``~`` is the home folder, as in a shell.

What a reader sees, and what is refused, is stated on `Checkpoints`; the checks live
in `_checkpoint_checks` (folder, model, template) and `_checkpoint_steps` (which step,
and reading it).

Needs the ``checkpoint`` extra (``pip install datarax-sharding[checkpoint]``), which
installs ``orbax-checkpoint``; Colab has it preinstalled.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Protocol

import jax

from datarax._exchange import exchange
from datarax._extras import require
from datarax._validate import check_int
from datarax.errors import CheckpointSaveError
from datarax.pipeline._checkpoint_checks import check_model, checkpoint_directory
from datarax.pipeline._checkpoint_steps import agreed_step, read_step
from datarax.pipeline._interrupt import finish_before_ctrl_c
from datarax.pipeline._state import check_pipeline_state

try:
    import fcntl
except ImportError:  # Windows: no flock, so no lock (the step check still runs)
    fcntl = None

_LOCK = ".datarax-save.lock"
_TMP = ".orbax-checkpoint-tmp"  # Orbax writes step N into "N.orbax-checkpoint-tmp" first


class HasState(Protocol):
    """A `Pipeline`, or a `DevicePrefetcher` over one: anything with get/set state."""

    def get_state(self) -> Any: ...


def _lock(directory: str, held: contextlib.ExitStack) -> bool:
    """Takes `directory`'s save lock until `held` closes; False when another save, in
    this process or another, holds it. Where there is no lock to take (a remote
    location, a read-only disk, a file system without locks), takes none."""
    if fcntl is None or "://" in directory:
        return True
    try:
        lock = os.open(os.path.join(directory, _LOCK), os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:  # a read-only disk: the save fails there and says why
        return True
    held.callback(os.close, lock)  # closing the file releases the lock
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:  # this file system offers no locks
        pass
    return True


def _orbax() -> Any:
    require("orbax.checkpoint", "checkpoint", "datarax.pipeline.Checkpoints")
    import orbax.checkpoint as ocp

    return ocp


class Checkpoints:
    """Saves and restores (model state, pipeline state) pairs under `directory`.

    Every process of a job must create it and call `save` / `restore` together, with
    the same arguments (the directory must be one that every host can reach).

    A reader sees what is on disk when it asks: `latest_step` and `restore` read the
    directory at every call, so a `Checkpoints` made before another object or process
    saved (an evaluator polling a trainer's folder) sees every step the other saved.
    A step is seen once its save is complete: Orbax writes it into
    ``<step>.orbax-checkpoint-tmp`` and names it ``<step>`` only at the end, so a step
    being written when a reader reads is not listed, and the steps before it are. A
    step that a save deletes (beyond `max_to_keep`) while a reader restores it is a
    `FileNotFoundError` for that reader; restoring again takes the latest step.

    What cannot be saved or restored is refused, naming it, before Orbax writes or
    reads it: a model without leaves, or with a leaf that is not an array or a number
    (`LeafTypeError`, `LeafValueError`); a restore template with other leaves or
    shapes than the saved model (`CheckpointTemplateError`); a step with a missing
    folder or a file cut short (`CheckpointDamagedError`).

    Args:
        directory: where checkpoints go, one sub-folder per step: a local or shared
            file system path, or a location Orbax can write to, such as ``gs://...``.
            A leading ``~`` or ``~user`` is that home folder, as a shell reads it
            (one naming no user here is refused); other ``~`` and ``$`` stay as
            written.
        max_to_keep: how many of the latest checkpoints to keep.

    Example:
        >>> import tempfile
        >>> pipeline = Pipeline(source={"x": np.arange(8.0)}, batch_size=2)
        >>> weights = {"w": jax.numpy.zeros(3)}
        >>> with tempfile.TemporaryDirectory() as folder, Checkpoints(folder) as checkpoints:
        ...     batch = next(iter(pipeline))
        ...     checkpoints.save(1, model=weights, pipeline=pipeline)
        ...     restored, step = checkpoints.restore(model=weights, pipeline=pipeline)
        >>> step, pipeline.get_state()["batch_index"]
        (1, 1)
    """

    def __init__(self, directory: str | os.PathLike[str], *, max_to_keep: int = 2):
        self.directory = checkpoint_directory(directory)
        ocp = _orbax()
        self._ocp = ocp
        # Synchronous saves: an asynchronous one leaves non-daemon threads that wait
        # up to Orbax's 300 s coordination time-out for a folder that a failed save
        # never made, and the interpreter waits for them at exit.
        options = ocp.CheckpointManagerOptions(
            max_to_keep=check_int("max_to_keep", max_to_keep),
            create=True,
            enable_async_checkpointing=False,
            # Not here, where another process's save may be writing them: each save
            # removes what a killed save left once it holds the lock (`_claim`).
            cleanup_tmp_directories=False,
        )
        self._manager = ocp.CheckpointManager(self.directory, options=options)

    def latest_step(self) -> int | None:
        """The newest step in the directory that was saved completely, or None.

        Reads the directory at each call, so it counts the steps that any `Checkpoints`
        object or process saved until then; a step still being written is not counted.
        Each process reads for itself (no exchange with the others).
        """
        self._manager.reload()
        return self._manager.latest_step()

    def save(self, step: int, *, model: Any, pipeline: HasState | dict[str, Any]) -> None:
        """Saves `model` (a pytree of arrays) and the pipeline's state as `step`.

        Pass the object whose state matches the batches the model has consumed: the
        `DevicePrefetcher` when prefetching (its `get_state` is the consumed batch's),
        else the `Pipeline`. Returns when the checkpoint is complete on disk; only
        then are steps beyond `max_to_keep` deleted.

        Raises:
            ValueError, TypeError: `pipeline`'s state is not one `Pipeline.get_state`
                gives, `model` holds no leaf, `step` is saved already in the directory
                (by any object or process), or another save into the directory is in
                progress; all checked before anything is written or deleted.
            LeafTypeError, LeafValueError: a leaf of `model` is not an array or a
                number that a checkpoint holds (text, an object, a deleted or empty
                array); the error names the leaf.
            CheckpointSaveError: writing failed (e.g. the disk is full or read-only).
                The temporary folder is removed and the steps saved before stay.
            KeyboardInterrupt: Ctrl-C during the save, raised once the step is complete
                (a second Ctrl-C raises at once; the next save removes what it left).
        """
        step = check_int("step", step, minimum=0)
        state = pipeline if isinstance(pipeline, dict) else pipeline.get_state()
        state = check_pipeline_state(state)
        check_model(model)
        args = self._ocp.args.Composite(
            model=self._ocp.args.StandardSave(model), pipeline=self._ocp.args.JsonSave(state)
        )
        with contextlib.ExitStack() as held:  # process 0 holds the lock to the end
            busy = jax.process_index() == 0 and not _lock(self.directory, held)
            self._claim(step, busy)
            self._save(step, args)

    def _claim(self, step: int, busy: bool) -> None:
        """Raises ValueError on every process together when `step` cannot be saved:
        process 0 found the lock `busy`, or a process finds `step` on disk. Then process
        0 removes what killed saves left."""
        refusal = ""
        if busy:
            refusal = (
                f"Another save into {self.directory} is in progress (from another "
                "Checkpoints object or process), and a directory takes one save at a "
                "time. Save after it has finished, or give each run its own directory."
            )
        else:
            self._manager.reload()  # the steps on disk, whoever saved them
            if step in self._manager.all_steps():
                refusal = (
                    f"Step {step} is saved already in {self.directory}: save under a new "
                    "step number (the saved steps are never overwritten)."
                )
        refusals = [text for text in exchange(refusal, "Checkpoints.save") if text]
        if refusals:
            raise ValueError(refusals[0])
        if jax.process_index() == 0:
            self._remove_tmp_folders()

    def _save(self, step: int, args: Any) -> None:
        try:
            with finish_before_ctrl_c(f"saving step {step}"):  # Orbax's threads go on
                self._manager.save(step, args=args, force=True)
                self._manager.wait_until_finished()
        except BaseException as error:
            folders = self._remove_tmp_folders(step)
            self._manager.reload()  # the steps on disk, not the failed save's view
            if not isinstance(error, Exception):  # KeyboardInterrupt, SystemExit
                raise
            folder = folders[0] if folders else f"{self.directory.rstrip('/')}/{step}{_TMP}"
            left = "its partial folder was removed" if folders else "nothing was written"
            cause = str(error).strip().rstrip(".")
            if len(cause) > 600:  # keep the end, where the system's reason stands
                cause = f"{cause[:300]} ... {cause[-300:]}"
            raise CheckpointSaveError(
                f"Saving step {step} into {folder} failed: {type(error).__name__}: "
                f"{cause}. {left.capitalize()}; the steps "
                f"saved before are kept: {sorted(self._manager.all_steps())}. Free space "
                "or fix the directory, then save again.",
                step=step,
                folder=folder,
            ) from error

    def _remove_tmp_folders(self, step: int | None = None) -> list[str]:
        """Removes Orbax's temporary folders of `step` (None: of every step); returns
        them. Names are compared, never globbed."""
        from etils import epath

        prefix = "" if step is None else f"{step}{_TMP}"
        removed = []
        for path in epath.Path(self.directory).iterdir():
            if _TMP in path.name and path.name.startswith(prefix):
                removed.append(str(path))
                with contextlib.suppress(OSError):  # read-only: nothing was written there
                    path.rmtree()
        return removed

    def restore(
        self, *, model: Any, pipeline: Any = None, step: int | None = None
    ) -> tuple[Any, int]:
        """The model state saved at `step` (default: the latest), and that step.

        Reads the directory at each call, like `latest_step`. On many processes the
        step is agreed: each lists the steps it sees, and without `step` all restore
        the newest step that every process sees.

        Args:
            model: a pytree like the saved one whose arrays (or
                ``jax.ShapeDtypeStruct`` with a sharding) say where to put each
                restored array: this job's mesh, which may span another number of
                processes than the saving job's. None restores the arrays as saved.
            pipeline: a `Pipeline` built as the saved one was; its position is set to
                the saved state, so its next ``iter()`` resumes there.
            step: which step to restore.

        Raises:
            FileNotFoundError: there is no checkpoint (at `step`), on some process, or
                the step was deleted while it was read (a save beyond `max_to_keep`).
            CheckpointTemplateError: `model` has other leaves or shapes than the
                saved model; the error lists them.
            CheckpointDamagedError: a folder of the step is missing or a file of it
                cut short; the error names it.
            ValueError: the pipeline differs from the saved one (see `set_state`).
        """
        step = None if step is None else check_int("step", step, minimum=0)
        self._manager.reload()  # the steps on disk, whoever saved them
        steps = sorted(self._manager.all_steps())
        step = agreed_step(self.directory, steps, step)
        restored, state = read_step(self._ocp, self._manager, step, model, steps)
        if pipeline is not None:
            pipeline.set_state(state)
        return restored, step

    def close(self) -> None:
        """Waits for pending writes and releases the manager."""
        self._manager.close()

    def __enter__(self) -> Checkpoints:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
