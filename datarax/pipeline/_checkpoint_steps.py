"""Which saved step a restore reads, and reading it whole or not at all.

`agreed_step` picks the step, the same on every process: the one asked for, or the
newest that every process sees (each lists the directory for itself, and a save may
end between two listings). `read_step` then reads that step's model and pipeline
state, once its folders are there and the template fits; a step that no save would
leave so (a folder missing, a file cut short) is a `CheckpointDamagedError` naming the
file, and a step deleted meanwhile is a `FileNotFoundError`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from datarax._exchange import exchange
from datarax.errors import CheckpointDamagedError
from datarax.pipeline._checkpoint_checks import check_template
from datarax.pipeline._state import check_pipeline_state

_ITEMS = {"model": "the model's arrays", "pipeline": "the pipeline's state"}


def agreed_step(directory: str, steps: list[int], step: int | None) -> int:
    """`step`, or the newest step that every process sees, given this process's
    `steps`. Raises FileNotFoundError on every process together when there is none."""
    seen = [json.loads(text) for text in exchange(json.dumps(steps), "Checkpoints.restore")]
    common = set(steps).intersection(*seen)
    chosen = max(common, default=None) if step is None else step
    if chosen is not None and chosen in common:
        return chosen
    at = "" if step is None else f" at step {step}"
    message = f"No checkpoint{at} in {directory}; saved steps: {steps}."
    lacking = [process for process, listed in enumerate(seen) if chosen not in listed]
    if len(lacking) < len(seen):
        message += (
            f" Processes {lacking} do not see step {chosen}, which the others do: a "
            "save still in progress, or a folder that not every host reaches."
        )
    elif step is None and any(seen):
        message = (
            f"No step in {directory} is seen by every process: they see {seen}. Give "
            "every host the same folder, or restore once the save in progress ends."
        )
    raise FileNotFoundError(message)


def read_step(ocp: Any, manager: Any, step: int, model: Any, steps: list[int]) -> tuple[Any, Any]:
    """(the model, the pipeline's state) saved at `step` of Orbax's `manager`, the
    model restored into the template `model` (None: as saved)."""
    folder = manager.directory / str(step)
    try:
        saved = _saved_tree(ocp, folder, step, steps)
        if model is not None:
            check_template(model, saved, step)
        args = ocp.args.Composite(
            model=ocp.args.StandardRestore(model), pipeline=ocp.args.JsonRestore()
        )
        try:
            restored = manager.restore(step, args=args)
        except ValueError as error:  # JSON that no save wrote: cut short
            if not isinstance(error, json.JSONDecodeError | UnicodeDecodeError):
                raise
            what = f"holds a pipeline state that is not JSON, cut short? ({error})"
            raise _damaged(step, folder / "pipeline", what, steps) from error
        try:
            state = check_pipeline_state(restored["pipeline"])
        except (TypeError, ValueError) as error:
            what = f"holds a pipeline state that no save writes ({error})"
            raise _damaged(step, folder / "pipeline", what, steps) from error
    except Exception as error:
        if folder.exists():
            raise
        raise FileNotFoundError(
            f"Step {step} was deleted from {manager.directory} while it was being "
            "restored, by a save that keeps only the latest max_to_keep steps. Restore "
            "again (without step=, the latest), or keep more steps."
        ) from error
    return restored["model"], state


def _damaged(step: int, path: Any, what: str, steps: Sequence[int]) -> CheckpointDamagedError:
    """The error for a saved step that cannot be read: `path` `what` (e.g. "is missing")."""
    others = sorted(set(steps) - {step})
    folder = os.path.dirname(str(path).rstrip("/"))
    way_out = (
        f"Restore another step (step=..., saved: {others}), or delete {folder} if it "
        "cannot be repaired."
        if others
        else f"No other step is saved: delete {folder} if it cannot be repaired."
    )
    return CheckpointDamagedError(
        f"Step {step} cannot be restored: {path} {what}. Nothing was restored. {way_out}",
        step=step,
        path=str(path),
    )


def _saved_tree(ocp: Any, folder: Any, step: int, steps: Sequence[int]) -> Any:
    """The description Orbax wrote of the model saved in step `folder` (a tree of array
    metadata with shapes), once each item's folder is found there."""
    for item, holding in _ITEMS.items():
        if not (folder / item).is_dir():
            raise _damaged(step, folder / item, f"is missing (it holds {holding})", steps)
    try:
        found = ocp.StandardCheckpointHandler().metadata(folder / "model")
    except (OSError, ValueError, KeyError, TypeError) as error:
        cause = f"{type(error).__name__}: {error}"[:300]
        what = f"has no readable list of arrays ({cause})"
        raise _damaged(step, folder / "model", what, steps) from error
    return getattr(found, "tree", found)  # a TreeMetadata in recent Orbax releases
