"""The four exercises that hold an answer against the real thing: right answers pass,
the arithmetic-only mistakes they exist for are caught by what the library or XLA
really does, and the placeholder is not answered. The loop-timing checker is tested on
a stand-in clock, so no test here depends on how busy the machine is."""

from __future__ import annotations

import itertools
import json
import queue
import sys
import threading
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from datarax.pipeline import prefetch_to_device
from datarax.sharding import shard_bounds
from datarax_course import _keys, _real, check
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
def stand_in_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sources and steps that only say how long they take, and a loop 'timed' at exactly
    the producer-consumer schedule, the first batch's opening added: the checker's logic,
    without the machine's noise."""

    def source(input_ms: float, opening_ms: float, allowance: Any = None) -> Any:
        allowed = allowance or _real._Allowance()

        def make_batches() -> Any:
            for index in range(_real._LOOP_STEPS):
                allowed.take()  # as the checker's own source: the prediction gets 2
                yield {"input_ms": input_ms + (opening_ms if index == 0 else 0.0)}

        return make_batches

    def step(step_ms: float, allowance: Any = None) -> Any:
        allowed = allowance or _real._Allowance()

        def run(batch: Any) -> float:
            allowed.take()
            return step_ms

        return run

    def timed(input_ms: float, opening_ms: float, step_ms: float, prefetch: bool) -> float:
        return opening_ms + _epoch_ms(step_ms, input_ms, _real._LOOP_STEPS, prefetch)

    monkeypatch.setattr(_real, "_source", source)
    monkeypatch.setattr(_real, "_step", step)
    monkeypatch.setitem(_keys.COUNTS, "07.predicted_epoch", timed)


def _predicted(make_batches: Any, step: Any, steps: int, prefetch: bool) -> float:
    batches = make_batches()
    first, second = next(batches), next(batches)
    opening_ms = first["input_ms"] - second["input_ms"]
    return opening_ms + _epoch_ms(step(first), second["input_ms"], steps, prefetch)


def _from_the_first_batch(make_batches: Any, step: Any, steps: int, prefetch: bool) -> float:
    """The first batch taken for every batch: its opening counted `steps` times."""
    batch = next(make_batches())
    return _epoch_ms(step(batch), batch["input_ms"], steps, prefetch)


def test_a_prediction_within_the_loops_time_is_right(stand_in_clock: None) -> None:
    assert check("07.predicted_epoch", _predicted, quiet=True)


def test_the_first_batch_is_not_every_batch(stand_in_clock: None) -> None:
    """The source's later batches differ from its first: a prediction from the first
    batch alone (a loop rebuilt from it, too) misses the loop."""
    feedback = check("07.predicted_epoch", _from_the_first_batch, quiet=True)
    assert not feedback and "the first" in feedback.message and "ms more" in feedback.message


@pytest.mark.parametrize(("stalled", "right"), [(1, True), (2, False)])
def test_the_median_of_three_predictions_counts(
    stand_in_clock: None, stalled: int, right: bool
) -> None:
    """A busy machine stalls a batch or a step now and then: one prediction of the three
    asked for each loop may be off, two may not."""
    calls = itertools.count()

    def sometimes_stalled(make_batches: Any, step: Any, steps: int, prefetch: bool) -> float:
        value = _predicted(make_batches, step, steps, prefetch)
        return 3 * value if next(calls) % 3 < stalled else value

    feedback = check("07.predicted_epoch", sometimes_stalled, quiet=True)
    assert bool(feedback) is right, feedback


def test_a_prediction_that_ignores_prefetch_is_caught_by_the_loop(stand_in_clock: None) -> None:
    def serial(make_batches: Any, step: Any, steps: int, prefetch: bool) -> float:
        return _predicted(make_batches, step, steps, False)

    feedback = check("07.predicted_epoch", serial, quiet=True)
    assert not feedback and "with prefetch_to_device(size=2) took" in feedback.message, feedback


def timed_instead(make_batches: Any, step: Any, steps: int, prefetch: bool) -> float:
    """Not a prediction: the loop itself, timed."""
    start = time.perf_counter()
    if prefetch:
        with prefetch_to_device(make_batches(), size=2) as batches:
            for batch in batches:
                step(batch)
    else:
        for batch in make_batches():
            step(batch)
    return (time.perf_counter() - start) * 1e3


def timed_quietly(make_batches: Any, step: Any, steps: int, prefetch: bool) -> float:
    """The loop timed, the refusal swallowed: what it times is two batches, not the loop."""
    start = time.perf_counter()
    try:
        for batch in make_batches():
            step(batch)
    except Exception:
        pass
    return (time.perf_counter() - start) * 1e3


def batch_by_batch(make_batches: Any, step: Any, steps: int, prefetch: bool) -> float:
    """The loop again, a fresh source for every batch."""
    start = time.perf_counter()
    for _ in range(steps):
        step(next(make_batches()))
    return (time.perf_counter() - start) * 1e3


def replica(make_batches: Any, step: Any, steps: int, prefetch: bool) -> float:
    """Two batches and a step timed, then a loop of sleeps rebuilt from them and timed,
    with a prefetch thread of its own: a loop, not a prediction."""
    batches = make_batches()
    start = time.perf_counter()
    batch = next(batches)
    first = time.perf_counter()
    next(batches)
    input_s = time.perf_counter() - first
    opening_s = first - start - input_s
    start = time.perf_counter()
    step(batch)
    step_s = time.perf_counter() - start
    start = time.perf_counter()
    if not prefetch:
        time.sleep(opening_s + steps * (input_s + step_s))
        return (time.perf_counter() - start) * 1e3
    made: queue.Queue = queue.Queue(maxsize=2)

    def produce() -> None:
        time.sleep(opening_s)
        for _ in range(steps):
            time.sleep(input_s)
            made.put(0)

    producer = threading.Thread(target=produce)
    producer.start()
    for _ in range(steps):
        made.get()
        time.sleep(step_s)
    producer.join()
    return (time.perf_counter() - start) * 1e3


@pytest.mark.parametrize("cheat", [timed_instead, batch_by_batch])
def test_a_loop_timed_instead_of_predicted_is_refused(cheat: Any) -> None:
    """On the real clock, however busy the machine: the source and the step a prediction
    is handed give 2 batches and 2 steps in all, so the loop cannot run, and the feedback
    says why."""
    start = time.perf_counter()
    feedback = check("07.predicted_epoch", cheat, quiet=True)
    assert not feedback and "the loop it predicts" in feedback.message, feedback
    assert "batch 3 of make_batches()" in feedback.message, feedback
    assert time.perf_counter() - start < 5  # refused at once, before any loop is timed


def test_prefetch_to_device_is_refused_while_predicting() -> None:
    def through_prefetch(make_batches: Any, step: Any, steps: int, prefetch: bool) -> float:
        return timed_instead(make_batches, step, steps, True)

    feedback = check("07.predicted_epoch", through_prefetch, quiet=True)
    assert not feedback and "prefetch_to_device" in feedback.message, feedback
    assert "without" in feedback.message, feedback
    with prefetch_to_device(iter([{"x": np.zeros(8)}]), size=1) as batches:
        assert len(list(batches)) == 1  # restored after the check


def test_a_loop_rebuilt_from_sleeps_is_refused() -> None:
    """On the real clock: a replica of the loop, built from the two batches and the step
    it may time, spends the loop's time of its own, and is refused as a loop."""
    feedback = check("07.predicted_epoch", replica, quiet=True)
    assert not feedback and "a loop of its own" in feedback.message, feedback


def test_the_refusal_swallowed_leaves_a_prediction_of_two_batches(stand_in_clock: None) -> None:
    feedback = check("07.predicted_epoch", timed_quietly, quiet=True)
    assert not feedback and "took" in feedback.message, feedback


def test_two_batches_and_two_steps_are_allowed(stand_in_clock: None) -> None:
    """A prediction may warm up first: the second batch and step are still given."""

    def warmed_up(make_batches: Any, step: Any, steps: int, prefetch: bool) -> float:
        batches = make_batches()
        first = next(batches)
        step(first)
        second = next(batches)
        opening_ms = first["input_ms"] - second["input_ms"]
        return opening_ms + _epoch_ms(step(second), second["input_ms"], steps, prefetch)

    assert check("07.predicted_epoch", warmed_up, quiet=True)


@pytest.mark.parametrize("answer", [_predicted, timed_instead])
def test_under_the_grader_the_loop_timed_in_the_kernel_fails(
    answer: Any, stand_in_clock: None, tmp_path: Path
) -> None:
    """The kernel records the predictions (or the refusal); the grader replays them and
    times the loops itself (here on the stand-in clock)."""
    from datarax_course import _grading

    record = tmp_path / "record.json"
    _grading.harvest({"07.predicted_epoch": "answer"}, {"answer": answer}, 7, str(record))
    steps = json.loads(record.read_text())["answers"]["07.predicted_epoch"]
    verdict = _grading.judged("07.predicted_epoch", steps, 7)
    assert verdict is not None, steps
    if answer is _predicted:
        assert verdict.ok, verdict
    else:
        assert not verdict.ok and "the loop it predicts" in verdict.message, verdict


def test_the_real_loop_takes_its_batches_and_steps_and_the_opening() -> None:
    """The answer keys' loop, on the checker's own source and step: with prefetch or
    without, it takes no less than its opening, its batches' and its steps' time can
    allow; and the source's first batch takes longer than the rest."""
    for prefetch, floor_ms in ((False, 6 + 8 * (2 + 1)), (True, 6 + 8 * 2 + 1)):
        assert _keys.loop_ms(2.0, 6.0, 1.0, prefetch) >= floor_ms
    allowance = _real._Allowance()
    batches = _real._source(1.0, 5.0, allowance)()
    start = time.perf_counter()
    seen = [int(np.asarray(batch["x"])[0, 0]) for batch in batches]
    assert seen == list(range(_real._LOOP_STEPS))
    assert allowance.spent_ms >= 5 + 8 * 1 and (time.perf_counter() - start) * 1e3 >= 13


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


def copied_from_the_checker(loss: Any, params: Any, batch: Any) -> float:
    from datarax_course._real import _xla_backward_flops  # type: ignore[attr-defined]

    return _xla_backward_flops(loss, params, batch)


def called_from_the_keys(loss: Any, params: Any, batch: Any) -> float:
    from datarax_course._keys import xla_backward_flops

    return xla_backward_flops(loss, params, batch)


def test_the_checkers_own_count_cannot_pass_the_exercise() -> None:
    """The reference is no longer in the checker's module, and where it is (the answer
    keys, in a full installation) the checker bans it while the reader's function runs."""
    old = check("10.backward_flops", copied_from_the_checker, quiet=True)
    assert not old and "raised ImportError" in old.message, old
    keys = check("10.backward_flops", called_from_the_keys, quiet=True)
    assert not keys and "the checker's own XLA count" in keys.message, keys
    assert "asks you to do without" in keys.message, keys
    assert check("10.backward_flops", backward_flops_per_row, quiet=True)  # unbanned after


def _graded(answer: Any, seed: int, monkeypatch: pytest.MonkeyPatch, folder: Path) -> Any:
    """`answer` judged as the grader judges it: the kernel's half (`harvest`) records its
    results where the course has no answer keys to import, as in a graded kernel's copy;
    the grader's half (`judged`) replays them in a process that has them. Returns what
    the kernel's own check said and the grader's verdict."""
    import datarax_course
    from datarax_course import _grading

    record = folder / "record.json"
    with monkeypatch.context() as kernel:
        kernel.setitem(sys.modules, "datarax_course._keys", None)
        kernel.delattr(datarax_course, "_keys", raising=False)
        _grading.harvest({"10.backward_flops": "answer"}, {"answer": answer}, seed, str(record))
        in_the_kernel = check("10.backward_flops", answer, quiet=True)
    steps = json.loads(record.read_text())["answers"]["10.backward_flops"]
    return in_the_kernel, _grading.judged("10.backward_flops", steps, seed)


def test_under_the_grader_the_honest_count_passes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    in_the_kernel, verdict = _graded(backward_flops_per_row, 2024, monkeypatch, tmp_path)
    assert not in_the_kernel and "the grader computes" in in_the_kernel.message, in_the_kernel
    assert verdict is not None and verdict.ok, verdict


@pytest.mark.parametrize("cheat", [copied_from_the_checker, called_from_the_keys])
def test_under_the_grader_the_cheats_fail(
    cheat: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _, verdict = _graded(cheat, 2024, monkeypatch, tmp_path)
    assert verdict is not None and not verdict.ok, verdict
    assert "your function raised" in verdict.message and "Error" in verdict.message, verdict


@pytest.mark.parametrize(
    "name", ["04.split_batch", "07.predicted_epoch", "09.unread_rows", "10.backward_flops"]
)
def test_the_placeholder_is_not_answered(name: str) -> None:
    feedback = check(name, lambda *args: ..., quiet=True)
    assert not feedback and feedback.message.startswith("not answered yet"), feedback
