"""A pipeline's position and a model's state in one Orbax checkpoint, resumable on any
number of processes.

`Checkpoints` wraps an ``orbax.checkpoint.CheckpointManager``. Each step saves the
model's arrays (any pytree of `jax.Array`, e.g. ``nnx.state(model)``) and the
pipeline's state (a small JSON dict, the same on every host) side by side. Orbax
writes each array once, from the hosts that hold it, and restores it onto whatever
sharding the restoring job asks for; the pipeline's state names no process or device.
So a job saved by 2 hosts resumes at exactly the next batch on 1, 2 or 4.

Needs the ``checkpoint`` extra (``pip install datarax-sharding[checkpoint]``), which
installs ``orbax-checkpoint``; Colab has it preinstalled.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

from datarax.sharding._checks import check_int


class HasState(Protocol):
    """A `Pipeline`, or a `DevicePrefetcher` over one: anything with get/set state."""

    def get_state(self) -> Any: ...


def _orbax() -> Any:
    try:
        import orbax.checkpoint as ocp
    except ImportError:
        raise ImportError(
            "Checkpoints needs orbax-checkpoint: pip install "
            "'datarax-sharding[checkpoint]' (or pip install orbax-checkpoint)."
        ) from None
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
        ocp = _orbax()
        self._ocp = ocp
        options = ocp.CheckpointManagerOptions(
            max_to_keep=check_int("max_to_keep", max_to_keep), create=True
        )
        path = os.fspath(directory)
        # Local paths are made absolute; Orbax takes remote ones (gs://...) as they are.
        self.directory = path if "://" in path else os.path.abspath(path)
        self._manager = ocp.CheckpointManager(self.directory, options=options)

    def latest_step(self) -> int | None:
        """The newest step that was saved completely, or None."""
        return self._manager.latest_step()

    def save(self, step: int, *, model: Any, pipeline: HasState | dict[str, Any]) -> None:
        """Saves `model` (a pytree of arrays) and the pipeline's state as `step`.

        Pass the object whose state matches the batches the model has consumed: the
        `DevicePrefetcher` when prefetching (its `get_state` is the consumed batch's),
        else the `Pipeline`. Returns when the checkpoint is complete on disk.
        """
        step = check_int("step", step, minimum=0)
        state = pipeline if isinstance(pipeline, dict) else pipeline.get_state()
        args = self._ocp.args.Composite(
            model=self._ocp.args.StandardSave(model), pipeline=self._ocp.args.JsonSave(state)
        )
        self._manager.save(step, args=args, force=True)
        self._manager.wait_until_finished()

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
