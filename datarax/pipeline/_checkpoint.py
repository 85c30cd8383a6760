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
read-only disk, an interrupt) removes its temporary folder and raises
`CheckpointSaveError`, and the steps saved before stay listed and restorable; a
process killed mid-save leaves a temporary folder that the next save into that
directory removes.

A step is saved once. A save re-reads the steps on disk, so it refuses a step that any
`Checkpoints` object or process saved, and on a local or shared file system it holds
the directory's lock (``.datarax-save.lock``, an ``flock`` that the system releases
when the process ends) from that check to the end of the save: a second save into the
directory meanwhile is refused, so two savers never both write one step. A folder name
that Orbax would read as a file pattern is refused before anything is written.

Needs the ``checkpoint`` extra (``pip install datarax-sharding[checkpoint]``), which
installs ``orbax-checkpoint``; Colab has it preinstalled.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Protocol

import jax

from datarax._extras import require
from datarax._validate import check_int
from datarax.errors import CheckpointSaveError
from datarax.pipeline._state import check_pipeline_state
from datarax.sharding._exchange import exchange

try:
    import fcntl
except ImportError:  # Windows: no flock, so no lock (the step check still runs)
    fcntl = None

_LOCK = ".datarax-save.lock"
_TMP = ".orbax-checkpoint-tmp"  # Orbax writes step N into "N.orbax-checkpoint-tmp" first
# Orbax globs inside the directory's path, so these would make it miss (or match) files;
# TensorStore reads a backslash as a folder separator where "/" is the separator.
_PATTERN_CHARACTERS = "*?[" + ("\\" if os.sep == "/" else "")


class HasState(Protocol):
    """A `Pipeline`, or a `DevicePrefetcher` over one: anything with get/set state."""

    def get_state(self) -> Any: ...


def _directory(directory: Any) -> str:
    """`directory` as a string, absolute when local; refuses what cannot be a folder."""
    if not isinstance(directory, (str, os.PathLike)):
        raise TypeError(
            f"directory must be a str or os.PathLike path, got {type(directory).__name__}: "
            f"{directory!r:.100}."
        )
    path = os.fspath(directory)
    if not isinstance(path, str):
        raise TypeError(f"directory must be a text path, got bytes: {path!r:.100}.")
    if not path.strip() or "\0" in path:
        raise ValueError(
            f"directory must name a folder for the checkpoints, e.g. 'checkpoints' or "
            f"'gs://bucket/run', got {path!r:.100}. (An empty path would write into the "
            "current directory.)"
        )
    if "://" not in path:  # Orbax takes remote locations (gs://...) as they are
        path = os.path.abspath(path)
    found = [f"'{character}'" for character in _PATTERN_CHARACTERS if character in path]
    if found:
        raise ValueError(
            f"directory '{path}' contains {', '.join(found)}, which Orbax reads as a file "
            "pattern (a backslash as a folder separator), so its steps could not be found "
            "again. Name the folder without them, e.g. 'run-lr0.1' instead of 'run[lr=0.1]'."
        )
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"directory {path!r} exists and is not a folder.")
    return path


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

    Args:
        directory: where checkpoints go, one sub-folder per step: a local or shared
            file system path, or a location Orbax can write to, such as ``gs://...``.
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
        self.directory = _directory(directory)
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
        """The newest step that was saved completely, or None."""
        return self._manager.latest_step()

    def save(self, step: int, *, model: Any, pipeline: HasState | dict[str, Any]) -> None:
        """Saves `model` (a pytree of arrays) and the pipeline's state as `step`.

        Pass the object whose state matches the batches the model has consumed: the
        `DevicePrefetcher` when prefetching (its `get_state` is the consumed batch's),
        else the `Pipeline`. Returns when the checkpoint is complete on disk; only
        then are steps beyond `max_to_keep` deleted.

        Raises:
            ValueError, TypeError: `pipeline`'s state is not one `Pipeline.get_state`
                gives, `step` is saved already in the directory (by any object or
                process), or another save into the directory is in progress; all
                checked before anything is written or deleted.
            CheckpointSaveError: writing failed (e.g. the disk is full or read-only).
                The temporary folder is removed and the steps saved before stay.
        """
        step = check_int("step", step, minimum=0)
        state = pipeline if isinstance(pipeline, dict) else pipeline.get_state()
        state = check_pipeline_state(state)
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
                step,
                folder,
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

        Args:
            model: a pytree like the saved one whose arrays (or
                ``jax.ShapeDtypeStruct`` with a sharding) say where to put each
                restored array: this job's mesh, which may span another number of
                processes than the saving job's.
            pipeline: a `Pipeline` built as the saved one was; its position is set to
                the saved state, so its next ``iter()`` resumes there.
            step: which step to restore.

        Raises:
            FileNotFoundError: there is no checkpoint (at `step`).
            ValueError: the pipeline differs from the saved one (see `set_state`).
        """
        step = self.latest_step() if step is None else check_int("step", step, minimum=0)
        if step is None or step not in self._manager.all_steps():
            raise FileNotFoundError(
                f"No checkpoint{'' if step is None else f' at step {step}'} in "
                f"{self.directory}; saved steps: {sorted(self._manager.all_steps())}."
            )
        args = self._ocp.args.Composite(
            model=self._ocp.args.StandardRestore(model), pipeline=self._ocp.args.JsonRestore()
        )
        restored = self._manager.restore(step, args=args)
        if pipeline is not None:
            pipeline.set_state(dict(restored["pipeline"]))
        return restored["model"], step

    def close(self) -> None:
        """Waits for pending writes and releases the manager."""
        self._manager.close()

    def __enter__(self) -> Checkpoints:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
