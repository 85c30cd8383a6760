"""``workers="auto"``: it pickles nothing until it chooses workers, and it never chooses
workers that cannot help (stages that return jax.Arrays, a warm-up in the first batch,
one usable core)."""

from __future__ import annotations

import os
from typing import Any

import jax
import numpy as np
import pytest
from _support.fault_stages import CountsPickling, WarmsUp
from _support.worker_stages import slow, to_device

from datarax.pipeline import Pipeline
from datarax.pipeline._host_batches import usable_cores

SOURCE = {"x": np.arange(64)}


def _pipeline(workers: Any, stages: list[Any]) -> Pipeline:
    return Pipeline(source=SOURCE, stages=stages, batch_size=8, workers=workers)


def _values(pipeline: Pipeline) -> list[list[int]]:
    return [np.asarray(batch["x"]).tolist() for batch in pipeline]


def test_auto_pickles_nothing_until_it_chooses_workers() -> None:
    cheap = CountsPickling()
    pipeline = _pipeline("auto", [cheap])
    assert cheap.times_pickled == 0  # building pickles nothing
    assert _values(pipeline) == _values(_pipeline(0, []))
    assert pipeline.workers == 0 and cheap.times_pickled == 0, pipeline.workers_choice
    if usable_cores() > 1:  # workers chosen: the source and stages are pickled then, once
        counted = CountsPickling()
        pipeline = _pipeline("auto", [slow, counted])
        assert _values(pipeline) == _values(_pipeline(0, []))
        assert pipeline.workers == usable_cores(), pipeline.workers_choice
        assert counted.times_pickled == 1


def test_auto_chooses_no_workers_for_stages_that_return_jax_arrays() -> None:
    pipeline = _pipeline("auto", [slow, to_device])
    batches = list(pipeline)  # no WorkerArrayError: the batches stay in this process
    assert all(isinstance(batch["x"], jax.Array) for batch in batches)
    assert pipeline.workers == 0
    assert "chose 0: the stages return jax.Arrays (batch['x'])" in pipeline.workers_choice


def test_auto_judges_from_more_than_a_warm_up_batch() -> None:
    """A stage whose first call takes 0.6 s and the others next to nothing is not worth
    workers, each of which would warm up again."""
    pipeline = _pipeline("auto", [WarmsUp(0.6)])
    assert _values(pipeline) == _values(_pipeline(0, []))
    assert pipeline.workers == 0
    assert "chose 0: a batch took" in pipeline.workers_choice
    assert "the median of the first ones" in pipeline.workers_choice


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity")
def test_auto_chooses_no_workers_on_one_usable_core() -> None:
    cores = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cores)})  # this thread, which asks for the batches
    try:
        pipeline = _pipeline("auto", [slow])
        assert _values(pipeline) == _values(_pipeline(0, []))
    finally:
        os.sched_setaffinity(0, cores)
    assert pipeline.workers == 0
    assert "one core only" in pipeline.workers_choice
