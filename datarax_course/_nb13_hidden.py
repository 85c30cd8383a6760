"""The checker of tutorial 13's second exercise, ``13.collective_hidden``.

From a profile's events (dicts with a ``name``, a ``thread``, a ``start_us``, a
``duration_us`` and ``args``, as the lesson reads them from JAX's trace file; an XLA
operation's ``args`` hold its ``device_ordinal``), the fraction of the collectives' time
during which the same device also computes: how much of the all-reduce (and, in FSDP,
the all-gathers) is hidden behind the step's compute.

The cases are real: the two profiles stored in `datarax_course.traces` (a data-parallel
and an FSDP step on 8 CPU devices, in which nothing is hidden), as recorded, and drawn
variations of them. In a variation each collective is moved earlier onto a thread of
its own and cut shorter, as an accelerator's asynchronous collective runs beside the
compute without waiting for slower devices, and the profile may be cut to a window, as
a profile started and stopped in the middle of a step is; the events are listed in
another order and on another clock. The right answers come from the answer key (a
formula of the lesson's own): `reference`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from datarax_course import traces
from datarax_course._cases import draw, reference
from datarax_course._core import call, exercise
from datarax_course._feedback import Feedback, right, wrong
from datarax_course._nb12 import KINDS
from datarax_course._values import number

NAME = "13.collective_hidden"

Event = dict[str, Any]
Spans = list[tuple[float, float]]


def _device(event: Event) -> str | None:
    return event["args"].get("device_ordinal")


def _is_collective(event: Event) -> bool:
    return str(event["name"]).startswith(KINDS)


def _moved(events: list[Event], rng: np.random.Generator, longest: float) -> list[Event]:
    """Every collective moved earlier, into the time since the device's previous
    collective began (or since its first operation), onto a thread of the device's own,
    and cut to a drawn share of its length, at most `longest`."""
    events = [{**event, "args": dict(event["args"])} for event in events]
    lanes = 1 + max(int(event["thread"]) for event in events)
    by_device: dict[str, list[Event]] = {}
    for event in sorted(events, key=lambda event: event["start_us"]):
        if _device(event) is not None:
            by_device.setdefault(str(_device(event)), []).append(event)
    for device, held in by_device.items():
        since = held[0]["start_us"]
        for event in held:
            if not _is_collective(event):
                continue
            start = event["start_us"]
            event["start_us"] = round(start - rng.uniform(0.3, 1.0) * (start - since), 3)
            event["duration_us"] = round(event["duration_us"] * rng.uniform(0.05, longest), 3)
            event["thread"] = lanes + int(device)
            since = start
    return events


def _window(events: list[Event], begin: float, end: float) -> list[Event]:
    """The events inside the window [`begin`, `end`) microseconds, those across its edges
    cut."""
    kept = []
    for event in events:
        start = max(event["start_us"], begin)
        stop = min(event["start_us"] + event["duration_us"], end)
        if stop > start:
            kept.append(
                {**event, "start_us": round(start, 3), "duration_us": round(stop - start, 3)}
            )
    return kept


def _listed(events: list[Event], rng: np.random.Generator) -> list[Event]:
    """`events` on another clock (times moved by a drawn offset), in a drawn order."""
    offset = float(rng.uniform(1e3, 1e6))
    moved = [{**event, "start_us": round(event["start_us"] + offset, 3)} for event in events]
    return [moved[i] for i in rng.permutation(len(moved))]


_STEP = {"data_parallel": "the data-parallel step", "fsdp": "the FSDP step"}


def _trace_cases() -> list[tuple[str, tuple[list[Event]]]]:
    """(text, (events,)): both stored profiles as recorded, then drawn variations."""
    rng = draw(NAME)
    recorded = traces.about("data_parallel")
    where = f"{recorded['devices']} {recorded['platform'].upper()} devices, jax {recorded['jax']}"
    cases = [(f"{_STEP[name]} as recorded ({where})", traces.stored(name)) for name in _STEP]
    for name in ("data_parallel", "fsdp"):
        longest = float(rng.uniform(0.3, 0.7))
        text = f"{_STEP[name]}, its collectives moved earlier and cut to at most {longest:.0%}"
        cases.append((text, _moved(traces.stored(name), rng, longest)))
    name, longest = str(rng.choice(list(_STEP))), float(rng.uniform(0.3, 0.7))
    moved = _moved(traces.stored(name), rng, longest)
    last = max(event["start_us"] + event["duration_us"] for event in moved)
    begin, end = rng.uniform(0.1, 0.3) * last, rng.uniform(0.7, 0.9) * last
    text = (
        f"{_STEP[name]}, its collectives moved earlier and cut to at most {longest:.0%}, "
        f"in the window {begin / 1e3:.1f} to {end / 1e3:.1f} ms"
    )
    cases.append((text, _window(moved, begin, end)))
    return [(text, (_listed(events, rng),)) for text, events in cases]


def _copied(events: list[Event]) -> list[Event]:
    return [{**event, "args": dict(event["args"])} for event in events]


# The common mistakes, each a reading of the same events. --------------------------------


def _union(spans: Spans) -> Spans:
    out: Spans = []
    for start, stop in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], stop))
        else:
            out.append((start, stop))
    return out


def _common(left: Spans, right_: Spans) -> float:
    return sum(max(0.0, min(b, d) - max(a, c)) for a, b in left for c, d in right_)


def _span(event: Event) -> tuple[float, float]:
    return (event["start_us"], event["start_us"] + event["duration_us"])


def _lanes(events: list[Event], lane: Callable[[Event], Any], collective: Callable[[Event], bool]):
    """{lane: (collective spans, compute spans)} of the events that `lane` places."""
    found: dict[Any, tuple[Spans, Spans]] = {}
    for event in events:
        key = lane(event)
        if key is not None:
            talking, working = found.setdefault(key, ([], []))
            (talking if collective(event) else working).append(_span(event))
    return found


def _pooled(found: dict[Any, tuple[Spans, Spans]]) -> tuple[float, float, float]:
    """(hidden, collective, compute) microseconds, each lane merged on its own."""
    hidden = talking_us = working_us = 0.0
    for talking, working in found.values():
        talk, work = _union(talking), _union(working)
        hidden += _common(talk, work)
        talking_us += sum(b - a for a, b in talk)
        working_us += sum(b - a for a, b in work)
    return hidden, talking_us, working_us


def _mistakes(events: list[Event]) -> list[tuple[float, str]]:
    """(what a common mistake returns, what it did) on `events`."""
    ops = [event for event in events if _device(event) is not None]
    by_device = _lanes(events, _device, _is_collective)
    hidden, talking, working = _pooled(by_device)
    one_lane = _pooled(_lanes(ops, lambda _: 0, _is_collective))
    by_thread = _pooled(_lanes(ops, lambda event: event["thread"], _is_collective))
    every_event = _pooled(_lanes(events, lambda event: event["thread"], _is_collective))
    reduces = [e for e in events if e["name"].startswith("all-reduce") or not _is_collective(e)]
    reduce_only = _pooled(_lanes(events, _device, lambda e: e["name"].startswith("all-reduce")))
    reduce_alone = _pooled(_lanes(reduces, _device, _is_collective))
    per_device = [_pooled({0: pair}) for pair in by_device.values()]
    summed = sum(
        _common([_span(c)], [_span(k)])
        for c in ops
        if _is_collective(c)
        for k in ops
        if not _is_collective(k) and _device(k) == _device(c)
    )
    durations = sum(event["duration_us"] for event in ops if _is_collective(event))
    return [
        (
            one_lane[0] / one_lane[1],
            "you counted the compute of every device; a collective is hidden only behind its "
            "own device's compute: group the operations by args['device_ordinal'].",
        ),
        (
            by_thread[0] / by_thread[1],
            "your function finds "
            + ("nothing" if by_thread[0] == 0 else "less")
            + " hidden where the collectives run beside their device's compute, on threads "
            "of their own. If you grouped the operations by thread: a device's operations run "
            "on several threads; group them by args['device_ordinal'].",
        ),
        (
            every_event[0] / every_event[1],
            "you counted every event on a thread as compute, ThunkExecutor::Execute "
            "included; that event holds the device's operations, the collective among "
            "them. Only the events with a device_ordinal are operations.",
        ),
        (
            float(np.mean([h / t for h, t, _ in per_device if t > 0])),
            "you averaged the devices' fractions; the fraction is of all the collectives' "
            "time: add up the hidden time of every device, then divide by the collectives' "
            "time of every device.",
        ),
        (
            hidden / working if working else float("nan"),
            "you divided by the compute time; the fraction is of the collectives' time.",
        ),
        (
            1 - hidden / talking,
            "that is the fraction left exposed, the time a collective runs with nothing "
            "else on its device; the hidden fraction is the rest.",
        ),
        *(
            (
                hidden_us / talking_us if talking_us else float("nan"),
                "you took only the all-reduces as collectives; the all-gathers (and any "
                "reduce-scatter, collective-permute or all-to-all) are collectives too.",
            )
            for hidden_us, talking_us, _ in (reduce_only, reduce_alone)
        ),
        (
            summed / durations,
            "you added up durations and overlaps event by event; where collectives "
            "overlap each other (or compute ops do), that time was counted twice: merge "
            "a device's intervals first.",
        ),
    ]


def _close(got: float, expected: float) -> bool:
    return bool(np.isclose(got, expected, rtol=1e-6, atol=1e-9))


def _named_mistake(found: list[float], cases: list[Any], at: int) -> str | None:
    """What the mistake that gives `found[at]` did, or None when none gives it. Where
    several give it (on a profile in which nothing is hidden, counting everything and
    counting the exposed part both give 1), the one that gives every other answer too."""
    tables = [_mistakes(events) for _, (events,) in cases]
    matching = [n for n, (value, _) in enumerate(tables[at]) if _close(found[at], value)]
    consistent = [
        n
        for n in matching
        if all(_close(got, table[n][0]) for got, table in zip(found, tables, strict=True))
    ]
    chosen = [*consistent, *matching]
    return tables[at][chosen[0]][1] if chosen else None


@exercise(
    NAME,
    idea="a collective is hidden while its own device also computes: for each device, the "
    "time its collectives and its compute ops both cover, over the time its collectives "
    "cover, added up over the devices. A device is args['device_ordinal'], not a thread.",
    method="keep the events with a device_ordinal; a name starting with all-reduce, "
    "all-gather, reduce-scatter, collective-permute or all-to-all is a collective, any "
    "other computes. Per device, merge the collectives' (start, end) intervals and the "
    "compute ones; add up the merged collectives' lengths and the lengths of their "
    "intersections with the merged compute; divide the sum of the intersections by the "
    "sum of the lengths.",
    cases=_trace_cases,
)
def _collective_hidden(answer: Any) -> Feedback:
    cases = _trace_cases()
    found = [
        number(call(answer, _copied(events)), "your function's result") for _, (events,) in cases
    ]
    expected = reference(NAME, cases)
    for at, ((text, _), got, truth) in enumerate(zip(cases, found, expected, strict=True)):
        fraction = float(truth)
        if _close(got, fraction):
            continue
        if fraction > 0 and _close(got, 100 * fraction):
            return wrong(f"for {text}, your result is a percentage; return a fraction, 0 to 1.")
        said = _named_mistake(found, cases, at)
        if said is not None:
            return wrong(f"for {text}, {said}")
        return wrong(
            f"for {text}, {fraction:.4f} of the collectives' time is hidden behind their "
            f"devices' compute; your function returned {got:.4f}."
        )
    return right(
        f"your fraction matches in all {len(cases)} profiles: the two recorded steps, in "
        "which nothing is hidden, and the variations whose collectives overlap the compute."
    )
