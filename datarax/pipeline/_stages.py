"""A pipeline's stages: the callables a batch goes through, checked once, run in order.

A stage is any callable ``batch -> batch`` (a function, an ``nnx.Module``). Running one,
the rules are the same in this process and in a worker: a `StopIteration` that escapes a
stage is an error (it would end the epoch in silence), and an exception a stage raises
keeps its type, with a note naming the stage. Host batches are read-only, so when a
stage given read-only arrays raises numpy's error for a write into one (a ValueError
saying "... is read-only"), the note says so and how to return new arrays instead; no
other ValueError gets that advice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import numpy as np

from datarax.errors import OutputArrayError, StageStopIterationError

Batch = Any
Stage = Callable[[Batch], Batch]


def stop_iteration_error(where: str, error: StopIteration) -> StageStopIterationError:
    """The error a `StopIteration` from user code (at `where`) becomes."""
    return StageStopIterationError(
        f"{where} raised StopIteration ({error!r}). Inside a pipeline that would end the "
        "epoch early without a word, so it is an error: return a batch, or raise "
        "another exception to stop.",
        stage=where,
    )


def _wrote_into_read_only(error: Exception, batch: Batch) -> bool:
    """Whether `error` is numpy's refusal to write into a read-only array of `batch`
    ("assignment destination is read-only", "output array is read-only", ...)."""
    return isinstance(error, ValueError) and "read-only" in str(error) and _holds_read_only(batch)


def _holds_read_only(batch: Batch) -> bool:
    return any(
        isinstance(leaf, np.ndarray) and not leaf.flags.writeable
        for leaf in jax.tree_util.tree_leaves(batch)
    )


def call_stage(stage: Stage, where: str, batch: Batch) -> Batch:
    """`stage` applied to `batch`; `where` (``stages[0]``) names it in the errors.

    Raises:
        StageStopIterationError: the stage raised StopIteration.
        Exception: whatever the stage raised, with a note naming `where`.
    """
    try:
        return stage(batch)
    except StopIteration as error:
        raise stop_iteration_error(where, error) from error
    except Exception as error:
        if isinstance(error, OutputArrayError) and not error.stage:
            error.stage = where
        note = f"Raised by {where} of the pipeline."
        if _wrote_into_read_only(error, batch):
            note += (
                " Its batch held read-only arrays (a pipeline's host batches are views of "
                "the source, which must not change): a stage that writes into its batch in "
                "place must return new arrays instead, e.g. {**batch, 'x': batch['x'] * 2}."
            )
        error.add_note(note)
        raise


class Stages:
    """Callables applied to each batch in order; `name` (``"stages"``) names them in errors.

    Raises:
        TypeError: `stages` is not a list of callables (one callable alone included).

    Example:
        >>> Stages("stages", [lambda b: b + 1, lambda b: b * 2])(np.arange(3))
        array([2, 4, 6])
    """

    def __init__(self, name: str, stages: Sequence[Stage]):
        if callable(stages) or not isinstance(stages, Iterable) or isinstance(stages, (str, bytes)):
            raise TypeError(
                f"{name} must be a list of stages, got {type(stages).__name__} {stages!r:.60}; "
                f"for one stage write {name}=[stage]."
            )
        self.name, self.stages = name, tuple(stages)
        self._named = tuple((f"{name}[{i}]", stage) for i, stage in enumerate(self.stages))
        for position, stage in enumerate(self.stages):
            if not callable(stage):
                raise TypeError(
                    f"{name}[{position}] is a {type(stage).__name__}, which is not callable. "
                    "A stage is a function or an nnx.Module with __call__(batch) -> batch."
                )

    def __call__(self, batch: Batch) -> Batch:
        for where, stage in self._named:
            batch = call_stage(stage, where, batch)
        return batch

    def __len__(self) -> int:
        return len(self.stages)
