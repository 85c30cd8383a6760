"""``workers="auto"`` hands over to the workers it chose without waiting for their start:
they start in the background while this process goes on making batches, and take over
at a batch boundary, with the batches and states of ``workers=0``."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from _support.worker_stages import slow, with_pid
from flax import nnx

from datarax.pipeline import Pipeline
from datarax.pipeline._host_batches import AUTO_BATCHES
from datarax.pipeline.workers import usable_cores

pytestmark = pytest.mark.skipif(
    usable_cores() < 2, reason="workers='auto' chooses workers only on two usable cores or more"
)
SOURCE = {"x": np.arange(4096)}
MOST_BATCHES = 400  # 24 s of 60 ms batches: the workers have taken over long before
TOOK_OVER = re.compile(r"took over at batch (\d+) of epoch 0")


def _pipeline(workers: Any) -> Pipeline:
    return Pipeline(
        source=SOURCE,
        stages=[slow, with_pid],
        batch_size=8,
        shuffle=True,
        rngs=nnx.Rngs(7),
        workers=workers,
    )


def _until_taken_over(pipeline: Pipeline, batches: Iterator[Any]) -> list[dict[str, Any]]:
    """The batches of `batches` up to and including the first a worker made, and two more."""
    made: list[dict[str, Any]] = []
    while len(made) < MOST_BATCHES and not TOOK_OVER.search(pipeline.workers_choice):
        made.append(next(batches))
    assert TOOK_OVER.search(pipeline.workers_choice), pipeline.workers_choice
    return [*made, next(batches), next(batches)]


def _rows(batches: list[dict[str, Any]]) -> list[list[int]]:
    return [batch["x"].tolist() for batch in batches]


def _made_here(batch: dict[str, Any]) -> bool:
    return bool((batch["pid"] == os.getpid()).all())


def _order(start: int, count: int) -> list[list[int]]:
    """The rows of batches `start` to `start + count` of epoch 0 (the stages keep them)."""
    batches = iter(Pipeline(source=SOURCE, batch_size=8, shuffle=True, rngs=nnx.Rngs(7)))
    return _rows([next(batches) for _ in range(start + count)][start:])


def test_workers_take_over_after_batches_made_here_while_they_start() -> None:
    pipeline = _pipeline("auto")
    made = _until_taken_over(pipeline, iter(pipeline))
    took_over = int(TOOK_OVER.search(pipeline.workers_choice).group(1))  # type: ignore[union-attr]
    # The batch after the decision did not wait for the workers' start: this process
    # made it, and every batch until the workers took over; they made every one after.
    assert took_over > AUTO_BATCHES, pipeline.workers_choice
    assert [_made_here(batch) for batch in made] == [k < took_over for k in range(len(made))]
    assert pipeline.workers == usable_cores()
    assert pipeline.time_report().in_workers == ("read", "stages", "move")
    assert _rows(made) == _order(0, len(made))  # the batches of workers=0, same seed
    in_workers = iter(_pipeline(2))
    assert _rows([next(in_workers) for _ in made]) == _rows(made)


def test_a_state_taken_while_the_workers_start_resumes_exactly() -> None:
    pipeline = _pipeline("auto")
    batches = iter(pipeline)
    for _ in range(AUTO_BATCHES + 1):  # chosen, and one batch more: the workers start
        next(batches)
    assert "start in the background" in pipeline.workers_choice
    state = pipeline.get_state()
    rest = _rows(_until_taken_over(pipeline, batches))
    assert rest == _order(AUTO_BATCHES + 1, len(rest))

    pipeline.set_state(state)  # the same pipeline, its workers now making the batches
    again = iter(pipeline)
    assert _rows([next(again) for _ in rest]) == rest
    alone = _pipeline(0)
    alone.set_state(state)
    alone_batches = iter(alone)
    assert _rows([next(alone_batches) for _ in rest]) == rest

    starting = _pipeline("auto")  # a state set while its workers start: back to batch 1
    batches = iter(starting)
    for _ in range(AUTO_BATCHES + 1):
        next(batches)
    assert "start in the background" in starting.workers_choice
    starting.set_state({**state, "batch_index": 1})
    later = _rows(_until_taken_over(starting, iter(starting)))
    assert later == _order(1, len(later))
