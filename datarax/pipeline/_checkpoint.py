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
process killed mid-save leaves a temporary folder that the next `Checkpoints` on
that directory removes.

Needs the ``checkpoint`` extra (``pip install datarax-sharding[checkpoint]``), which
installs ``orbax-checkpoint``; Colab has it preinstalled.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Protocol

from datarax._extras import require
from datarax.pipeline._state import check_pipeline_state
from datarax.sharding._checks import check_int


class HasState(Protocol):
    """A `Pipeline`, or a `DevicePrefetcher` over one: anything with get/set state."""

    def get_state(self) -> Any: ...


class CheckpointSaveError(OSError):
    """A save failed; the steps saved before it are still listed and restorable.

    Attributes:
        step: the step that was being saved.
        folder: its temporary folder, removed again.
    """

    def __init__(self, message: str, step: int, folder: str):
        super().__init__(message)
        self.step, self.folder = step, folder


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
    if "://" in path:  # Orbax takes remote locations (gs://...) as they are
        return path
    path = os.path.abspath(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"directory {path!r} exists and is not a folder.")
    return path


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
            cleanup_tmp_directories=True,  # what a process killed mid-save left
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
                gives, or `step` is saved already (checked before anything is
                written or deleted).
            CheckpointSaveError: writing failed (e.g. the disk is full or read-only).
                The temporary folder is removed and the steps saved before stay.
        """
        step = check_int("step", step, minimum=0)
        state = pipeline if isinstance(pipeline, dict) else pipeline.get_state()
        state = check_pipeline_state(state)
        if step in self._manager.all_steps():
            raise ValueError(
                f"Step {step} is saved already in {self.directory}: save under a new step "
                "number (the saved steps are never overwritten)."
            )
        args = self._ocp.args.Composite(
            model=self._ocp.args.StandardSave(model), pipeline=self._ocp.args.JsonSave(state)
        )
        try:
            self._manager.save(step, args=args, force=True)
            self._manager.wait_until_finished()
        except BaseException as error:
            folders = self._remove_partial(step)
            self._manager.reload()  # the steps on disk, not the failed save's view
            if not isinstance(error, Exception):  # KeyboardInterrupt, SystemExit
                raise
            tmp = f"{step}.orbax-checkpoint-tmp"
            folder = folders[0] if folders else f"{self.directory.rstrip('/')}/{tmp}"
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

    def _remove_partial(self, step: int) -> list[str]:
        """Removes what a failed save of `step` left; returns the folders removed."""
        from etils import epath

        root = epath.Path(self.directory)
        partial = [str(path) for path in root.glob(f"{step}.orbax-checkpoint-tmp*")]
        for folder in partial:
            with contextlib.suppress(OSError):  # read-only: nothing was written there
                epath.Path(folder).rmtree()
        return partial

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
