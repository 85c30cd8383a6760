"""Checkers for tutorial 13, the overlap seen in a profile.

``13.input_hidden``: from a profile's events (dicts with a ``name``, a ``thread``, a
``start_us``, a ``duration_us`` and ``args``, as the lesson reads them from JAX's trace
file), the step's time (the median "step" event), the input's time per batch (the busy
time of the thread that holds the "augment" events, nested events counted once, per
batch) and whether the input is hidden behind the step (no longer than it).

The traces are drawn, as a profile of the lesson's loop would show them: a loop thread
that waits for each batch and runs each step, an input thread that makes batches ahead
of it through a buffer of two (reading from storage or not, augmenting, placing the
batch: JAX's ``shard_args`` holding a ``DevicePutWithSharding`` for each leaf), and 8 XLA
threads running each
device's share of the step, its all-reduce included, all in a shuffled order. The
right answers come from the answer key, a reading of the lesson's own: `reference`.

The lesson's second exercise, ``13.collective_hidden``, is checked in
`datarax_course._nb13_hidden`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from datarax_course import _nb13_hidden as _nb13_hidden  # registers 13.collective_hidden
from datarax_course._cases import draw, reference
from datarax_course._core import call, exercise
from datarax_course._feedback import Feedback, right, wrong
from datarax_course._values import items, number, plain, reject

NAME = "13.input_hidden"
_EXPECTED = "a tuple (step_ms, input_ms, hidden): two numbers and True or False"
_SLOTS = 2  # the prefetch buffer: batch b starts once batch b - 2 is taken
_DEVICES = 8
_OPS = ("dot", "add_maximum_fusion", "dot.1", "all-reduce.7", "copy_subtract_fusion")

Event = dict[str, Any]


class _Trace:
    """Events on a shared clock in microseconds, threads as numbers, like a real trace."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.events: list[Event] = []

    def add(self, name: str, thread: int, start: float, stop: float, **args: str) -> None:
        self.events.append(
            {
                "name": name,
                "thread": thread,
                "start_us": round(start, 3),
                "duration_us": round(stop - start, 3),
                "args": dict(args),
            }
        )

    def gap(self, low: float = 5.0, high: float = 40.0) -> float:
        return float(self.rng.uniform(low, high))

    def jitter(self, value: float, spread: float = 0.05) -> float:
        return value * float(self.rng.uniform(1 - spread, 1 + spread))


def _make_batch(
    trace: _Trace, thread: int, start: float, parts: dict[str, float], first: bool
) -> float:
    """One batch on the input thread from `start`; returns when it is placed."""
    now = start
    if first:  # the pipeline's shuffle, at the start of the epoch
        shuffle = trace.jitter(80.0, 0.5)
        trace.add("PjitFunction(_threefry_seed)", thread, now, now + shuffle)
        now += shuffle + trace.gap()
    if parts["read"]:
        read = trace.jitter(parts["read"])
        trace.add("read", thread, now, now + read)
        now += read + trace.gap()
    augment = trace.jitter(parts["augment"])
    trace.add("augment", thread, now, now + augment)
    collect = now + augment * float(trace.rng.uniform(0.3, 0.7))
    trace.add("PythonRefManager::CollectGarbage", thread, collect, collect + 2.0)
    now += augment + trace.gap()
    place = trace.jitter(parts["place"])  # JAX's shard_args: both leaves, one put each
    trace.add("shard_args", thread, now, now + place)
    inner = now + place * float(trace.rng.uniform(0.05, 0.15))
    for _leaf in ("x", "y"):
        put = place * float(trace.rng.uniform(0.3, 0.38))
        trace.add("DevicePutWithSharding", thread, inner, inner + put)
        trace.add("PythonRefManager::CollectGarbage", thread, inner + put + 1.0, inner + put + 2.0)
        inner += put + 4.0
    now += place + trace.gap()
    return now


def _run_step(trace: _Trace, workers: list[int], start: float, stop: float) -> None:
    """Every device's share of one step on the XLA threads, inside the loop's step."""
    for worker in workers:
        begin = start + trace.gap(20.0, 60.0)
        end = stop - trace.gap(10.0, 40.0)
        trace.add("ThunkExecutor::Execute", worker, begin, end)
        cuts = np.sort(trace.rng.uniform(begin + 1.0, end - 1.0, size=len(_OPS) - 1))
        bounds = [begin + 1.0, *cuts.tolist(), end - 1.0]
        for op, left, right_end in zip(_OPS, bounds[:-1], bounds[1:], strict=True):
            trace.add(op, worker, left, right_end)


def _drawn_trace(
    rng: np.random.Generator, steps: int, extra: int, hidden: bool, reads: bool
) -> list[Event]:
    """The events of `steps` steps fed by a prefetching input thread that makes `steps`
    + `extra` batches, a batch taking well under (hidden) or well over a step."""
    trace = _Trace(rng)
    threads = rng.choice(2**32, size=2 + _DEVICES, replace=False).tolist()
    loop, maker, workers = threads[0], threads[1], threads[2:]
    step_us = float(rng.uniform(1.0, 20.0)) * 1e3
    ratio = float(rng.uniform(0.25, 0.7) if hidden else rng.uniform(1.4, 3.0))
    input_us = ratio * step_us
    place_share = float(rng.uniform(0.15, 0.3))
    read_share = float(rng.uniform(0.4, 0.6)) if reads else 0.0
    parts = {
        "read": read_share * input_us,
        "place": place_share * input_us,
        "augment": (1 - place_share - read_share) * input_us,
    }
    durations = [trace.jitter(step_us) for _ in range(steps)]
    durations[0] *= float(rng.uniform(1.6, 2.4))  # the first step is the slowest
    origin = float(rng.uniform(1e3, 5e3))
    produced: list[float] = []
    taken: list[float] = []
    loop_at = origin + trace.gap(100.0, 300.0)
    for batch in range(steps + extra):
        slot_free = taken[batch - _SLOTS] if batch >= _SLOTS else origin
        start = max(produced[-1] if produced else origin, slot_free) + trace.gap()
        produced.append(_make_batch(trace, maker, start, parts, first=batch == 0))
        if batch >= steps:
            continue
        wait_from = loop_at + trace.gap(2.0, 10.0)
        wait_to = max(wait_from, produced[batch]) + trace.gap(20.0, 60.0)  # the hand-off
        taken.append(wait_to)
        step_from = wait_to + trace.gap(2.0, 10.0)
        step_to = step_from + durations[batch]
        train_to = step_to + trace.gap(2.0, 10.0)
        trace.add("train", loop, loop_at, train_to, step_num=str(batch))
        trace.add("wait for batch", loop, wait_from, wait_to)
        trace.add("step", loop, step_from, step_to)
        dispatch = trace.gap(20.0, 50.0)
        trace.add("PjitFunction(train_step)", loop, step_from + 1.0, step_from + dispatch)
        _run_step(trace, workers, step_from + dispatch, step_to - trace.gap(5.0, 20.0))
        loop_at = train_to + trace.gap(2.0, 10.0)
    order = rng.permutation(len(trace.events))
    return [trace.events[i] for i in order]


# (hidden, reads from storage) for each drawn trace: both answers, with and without reads.
_KINDS = ((True, False), (False, True), (True, True), (False, False), (True, False))


def _trace_cases() -> list[tuple[str, tuple[list[Event]]]]:
    """(text, (events,)): five drawn traces, the input hidden in some and not in others."""
    rng = draw(NAME)
    cases = []
    for number_, (hidden, reads) in enumerate(_KINDS, 1):
        steps, extra = int(rng.integers(3, 9)), int(rng.integers(1, 3))
        events = _drawn_trace(rng, steps, extra, hidden, reads)
        how = "reads each batch from storage, augments it" if reads else "augments each batch"
        text = (
            f"trace {number_} ({steps} steps, {steps + extra} batches made, an input that "
            f"{how} and places it)"
        )
        cases.append((text, (events,)))
    return cases


def _copied(events: list[Event]) -> list[Event]:
    return [{**event, "args": dict(event["args"])} for event in events]


def _truth(value: Any, what: str) -> bool:
    read = plain(value, what, "True or False")
    if isinstance(read, np.ndarray) and read.shape == () and read.dtype == bool:
        read = bool(read)
    if not isinstance(read, bool):
        raise reject(what, read, "True or False")
    return read


def _answer(value: Any) -> tuple[float, float, bool]:
    what = "input_hidden's result"
    step_ms, input_ms, hidden = items(value, what, _EXPECTED, length=3)
    return (
        number(step_ms, "the step_ms in your result"),
        number(input_ms, "the input_ms in your result"),
        _truth(hidden, "the hidden in your result"),
    )


def _close(got: float, expected: float) -> bool:
    return bool(np.isclose(got, expected, rtol=1e-4, atol=1e-6))


def _named(events: list[Event], name: str) -> list[Event]:
    return [event for event in events if event["name"] == name]


def _step_mistake(got: float, expected: float, events: list[Event]) -> str | None:
    """What a common wrong step time did, or None when it is none of them."""
    steps = [event["duration_us"] for event in _named(events, "step")]
    trains = [event["duration_us"] for event in _named(events, "train")]
    if _close(got, expected * 1e3):
        return "your step_ms is in microseconds: a trace's times are, so divide by 1,000."
    if _close(got, float(np.mean(steps)) / 1e3):
        return (
            "your step_ms is the mean of the step events; the first step is the slowest "
            "(caches, the first batch), so take the median, which one slow step does not move."
        )
    if _close(got, float(np.median(trains)) / 1e3):
        return (
            "your step_ms is read off the train events, which span the whole iteration, the "
            "wait for the batch included; the step itself is the step events."
        )
    return None


def _input_mistake(got: float, expected: float, events: list[Event]) -> str | None:
    """What a common wrong input time did, or None when it is none of them."""
    thread = _named(events, "augment")[0]["thread"]
    mine = [event for event in events if event["thread"] == thread]
    batches = len(_named(events, "augment"))
    steps = len(_named(events, "step"))
    if _close(got, expected * 1e3):
        return "your input_ms is in microseconds: a trace's times are, so divide by 1,000."
    if _close(got, sum(event["duration_us"] for event in mine) / batches / 1e3):
        return (
            "you added up every event of the input thread, but events nest: each "
            "shard_args holds the batch's two DevicePutWithSharding, so that time was "
            "counted twice. A thread is busy once at a time: merge the intervals that "
            "overlap, then add up what they cover."
        )
    if _close(got, expected * batches / steps):
        return (
            f"you divided by the {steps} steps; the input thread made {batches} batches "
            "(it runs ahead of the loop): divide by the augment events, one a batch."
        )
    if _close(
        got, sum(event["duration_us"] for event in _named(events, "augment")) / 1e3 / batches
    ):
        return (
            "your input_ms counts only the augment events; the input thread also reads "
            "and places every batch (shard_args), and that is input time too: take every "
            "event of that thread."
        )
    first = min(event["start_us"] for event in mine)
    last = max(event["start_us"] + event["duration_us"] for event in mine)
    if _close(got, (last - first) / batches / 1e3):
        return (
            "your input_ms is the input thread's whole span, its idle time included (it "
            "waits whenever the buffer is full); count only the time its events cover."
        )
    return None


@exercise(
    NAME,
    idea="the step's time is in the loop thread's step events; the input's is the time the "
    "input thread is busy (the thread that holds the augment events), per batch. Events "
    "on one thread nest, so a thread's busy time is the union of its intervals, not their "
    "sum. The input is hidden when it needs no longer than a step.",
    method="step_ms = median of the duration_us of the events named 'step', / 1e3. Sort "
    "the input thread's (start_us, start_us + duration_us) pairs, walk them keeping the "
    "end covered so far and add only what reaches past it; divide by the number of "
    "'augment' events and by 1e3. hidden = input_ms <= step_ms.",
    cases=_trace_cases,
)
def _input_hidden(answer: Any) -> Feedback:
    cases = _trace_cases()
    found = [_answer(call(answer, _copied(events))) for _, (events,) in cases]
    expected = reference(NAME, cases)
    for (text, (events,)), (step_ms, input_ms, hidden), truth in zip(
        cases, found, expected, strict=True
    ):
        right_step, right_input, right_hidden = float(truth[0]), float(truth[1]), bool(truth[2])
        if not _close(step_ms, right_step):
            mistake = _step_mistake(step_ms, right_step, events)
            return wrong(
                f"for {text}, "
                + (
                    mistake
                    or f"the median step event lasts {right_step:.3f} ms; your step_ms is "
                    f"{step_ms:.3f}."
                )
            )
        if not _close(input_ms, right_input):
            mistake = _input_mistake(input_ms, right_input, events)
            return wrong(
                f"for {text}, "
                + (
                    mistake
                    or f"the input thread is busy {right_input:.3f} ms per batch; your "
                    f"input_ms is {input_ms:.3f}."
                )
            )
        if hidden != right_hidden:
            verdict = "hidden" if right_hidden else "not hidden"
            return wrong(
                f"for {text}, a batch takes {right_input:.3f} ms of input and a step "
                f"{right_step:.3f} ms, so the input is {verdict}; you said hidden="
                f"{hidden}. The input is hidden when it needs no longer than a step: then "
                "the thread is always a batch ahead."
            )
    return right(
        f"your readings match in all {len(cases)} traces: the median step, the input "
        "thread's busy time with nested events counted once, per batch, and whether the "
        "input is hidden, both ways."
    )
