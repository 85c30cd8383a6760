"""The four exercises that hold an answer against the real thing: right answers pass,
the arithmetic-only mistakes they exist for are caught by what the library or XLA
really does, and the placeholder is not answered. The loop-timing checker is tested on
a stand-in clock, so no test here depends on how busy the machine is."""

from __future__ import annotations

import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from datarax.sharding import shard_bounds
from datarax_course import _real, check
from datarax_course._keys import scheduled_ms


def _bounds(rows: int, host: int, count: int, drop: bool) -> tuple[int, int]:
    per_host, remainder = divmod(rows, count)
    start, stop = host * per_host, (host + 1) * per_host
    if not drop:
        start, stop = start + min(host, remainder), stop + min(host + 1, remainder)
    return start, stop


def split_batch(batch: dict, process_count: int, drop_remainder: bool) -> list[dict]:
    rows = len(next(iter(batch.values())))
    return [
        {
            key: leaf[slice(*_bounds(rows, host, process_count, drop_remainder))]
            for key, leaf in batch.items()
        }
        for host in range(process_count)
    ]


def split_ignoring_the_remainder(batch: dict, process_count: int, drop_remainder: bool) -> list:
    return split_batch(batch, process_count, True)


def test_split_batch_matches_the_sharder_and_catches_a_lost_remainder() -> None:
    assert check("04.split_batch", split_batch, quiet=True)
    feedback = check("04.split_batch", split_ignoring_the_remainder, quiet=True)
    assert not feedback and "drop_remainder=False" in feedback.message, feedback


def test_split_batch_may_not_call_the_library_it_is_held_against() -> None:
    def borrowed(batch: dict, process_count: int, drop_remainder: bool) -> list:
        rows = len(next(iter(batch.values())))
        return [
            {
                k: v[slice(*shard_bounds(rows, h, process_count, drop_remainder))]
                for k, v in batch.items()
            }
            for h in range(process_count)
        ]

    feedback = check("04.split_batch", borrowed, quiet=True)
    assert not feedback and "shard_bounds" in feedback.message, feedback


def _epoch_ms(step_ms: float, input_ms: float, steps: int, prefetch: bool) -> float:
    return scheduled_ms(step_ms, input_ms, steps, 2 if prefetch else None)


@pytest.fixture
def stand_in_clock(monkeypatch: pytest.MonkeyPatch) -> dict[str, float]:
    """Sources and steps that only say how long they take, and a loop 'timed' at exactly
    the producer-consumer schedule: the checker's logic, without the machine's noise."""
    made: dict[str, float] = {}

    def source(input_ms: float) -> Any:
        def make_batches() -> Any:
            return iter([{"input_ms": input_ms}] * _real._LOOP_STEPS)

        return make_batches

    def step(step_ms: float) -> Any:
        def run(batch: Any) -> float:
            return step_ms

        run.step_ms = step_ms  # type: ignore[attr-defined]
        return run

    def timed(make_batches: Any, step: Any, prefetch: bool) -> float:
        input_ms = next(make_batches())["input_ms"]
        return _epoch_ms(step.step_ms, input_ms, _real._LOOP_STEPS, prefetch)

    monkeypatch.setattr(_real, "_source", source)
    monkeypatch.setattr(_real, "_step", step)
    monkeypatch.setattr(_real, "_timed_ms", timed)
    return made


def _predicted(make_batches: Any, step: Any, steps: int, prefetch: bool) -> float:
    batch = next(make_batches())
    return _epoch_ms(step(batch), batch["input_ms"], steps, prefetch)


def test_a_prediction_within_the_loops_time_is_right(stand_in_clock: dict) -> None:
    assert check("07.predicted_epoch", _predicted, quiet=True)


def test_a_prediction_that_ignores_prefetch_is_caught_by_the_loop(stand_in_clock: dict) -> None:
    def serial(make_batches: Any, step: Any, steps: int, prefetch: bool) -> float:
        return _predicted(make_batches, step, steps, False)

    feedback = check("07.predicted_epoch", serial, quiet=True)
    assert not feedback and "with prefetch_to_device(size=2) took" in feedback.message, feedback


def test_the_real_loop_is_timed_with_prefetch_and_without() -> None:
    """The checker's own loop, on a source that takes 2 ms a batch and a step that takes
    none: with prefetch it still visits every batch, in order."""
    seen: list[int] = []
    make_batches = _real._source(2.0)

    def step(batch: Any) -> None:
        seen.append(int(np.asarray(batch["x"])[0, 0]))

    for prefetch in (False, True):
        start = time.perf_counter()
        measured = _real._timed_ms(make_batches, step, prefetch)
        assert 0 < measured <= (time.perf_counter() - start) * 1e3 + 1
    assert seen == list(range(_real._LOOP_STEPS)) * 2


def unread_rows(pipelines: list, epoch: int) -> list:
    batches = min(len(pipeline) for pipeline in pipelines)
    return [np.sort(p.epoch_order(epoch)[batches * p.batch_size :]) for p in pipelines]


def unread_by_own_length(pipelines: list, epoch: int) -> list:  # forgets the agreement
    return [np.sort(p.epoch_order(epoch)[len(p) * p.batch_size :]) for p in pipelines]


def test_unread_rows_match_the_pipelines_and_catch_a_forgotten_agreement() -> None:
    assert check("09.unread_rows", unread_rows, quiet=True)
    feedback = check("09.unread_rows", unread_by_own_length, quiet=True)
    assert not feedback and "they stop after 5 batches" in feedback.message, feedback


def backward_flops_per_row(loss: Any, params: Any, batch: Any) -> float:
    def flops(function: Any, *args: Any) -> float:
        analysis = jax.jit(function).lower(*args).cost_analysis()
        return (analysis[0] if isinstance(analysis, list) else analysis)["flops"]

    doubled = jnp.concatenate([batch, batch])
    gradient = flops(jax.grad(loss), params, doubled) - flops(jax.grad(loss), params, batch)
    forward = flops(loss, params, doubled) - flops(loss, params, batch)
    return (gradient - forward) / batch.shape[0]


def test_xla_is_asked_and_the_rule_of_four_is_not_what_it_counts() -> None:
    feedback = check("10.backward_flops", backward_flops_per_row, quiet=True)
    assert feedback and "FLOPs per weight per row" in feedback.message, feedback
    rule = check(
        "10.backward_flops", lambda loss, params, batch: 4 * sum(w.size for w in params), quiet=True
    )
    assert not rule and "XLA counts" in rule.message, rule


@pytest.mark.parametrize(
    "name", ["04.split_batch", "07.predicted_epoch", "09.unread_rows", "10.backward_flops"]
)
def test_the_placeholder_is_not_answered(name: str) -> None:
    feedback = check(name, lambda *args: ..., quiet=True)
    assert not feedback and feedback.message.startswith("not answered yet"), feedback
