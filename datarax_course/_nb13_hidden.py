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
another order and on another clock. The right answers, and what each common mistake
returns, come from the answer key (a formula of the lesson's own): `reference`. This
module computes neither: it holds what each mistake did, to say it.
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


def device_of(event: Event) -> str | None:
    """The device whose operation `event` is (its ``device_ordinal``); None for an event
    of no device (the executor's, a thread's)."""
    return event.get("args", {}).get("device_ordinal")


def is_collective(event: Event) -> bool:
    """Whether `event` is a collective (an all-reduce, all-gather, ...) by its name."""
    return str(event["name"]).startswith(KINDS)


def _moved(events: list[Event], rng: np.random.Generator, longest: float) -> list[Event]:
    """Every collective moved earlier, into the time since the device's previous
    collective began (or since its first operation), onto a thread of the device's own,
    and cut to a drawn share of its length, at most `longest`."""
    events = _copied(events)
    lanes = 1 + max(int(event["thread"]) for event in events)
    by_device: dict[str, list[Event]] = {}
    for event in sorted(events, key=lambda event: event["start_us"]):
        if device_of(event) is not None:
            by_device.setdefault(str(device_of(event)), []).append(event)
    for device, held in by_device.items():
        since = held[0]["start_us"]
        for event in held:
            if not is_collective(event):
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


def _only_all_reduces(_: float) -> str:
    return (
        "you took only the all-reduces as collectives; the all-gathers (and any "
        "reduce-scatter, collective-permute or all-to-all) are collectives too."
    )


# What each common mistake did, in the order of the key's `hidden_mistakes`, which says
# what each returns (the key, not this module, computes them: a mistake such as the exposed
# fraction is one step from the right answer). Each message is given the mistake's value.
MISTAKES: tuple[Callable[[float], str], ...] = (
    lambda _: (
        "you counted the compute of every device; a collective is hidden only behind "
        "its own device's compute: group the operations by args['device_ordinal']."
    ),
    lambda value: (
        "your function finds "
        + ("nothing" if value == 0 else "less")
        + " hidden where the collectives run beside their device's compute, on threads "
        "of their own. If you grouped the operations by thread: a device's operations run "
        "on several threads; group them by args['device_ordinal']."
    ),
    lambda _: (
        "you counted every event on a thread as compute, ThunkExecutor::Execute "
        "included; that event holds the device's operations, the collective among "
        "them. Only the events with a device_ordinal are operations."
    ),
    lambda _: (
        "you averaged the devices' fractions; the fraction is of all the collectives' "
        "time: add up the hidden time of every device, then divide by the collectives' "
        "time of every device."
    ),
    lambda _: "you divided by the compute time; the fraction is of the collectives' time.",
    lambda _: (
        "that is the fraction left exposed, the time a collective runs with nothing "
        "else on its device; the hidden fraction is the rest."
    ),
    _only_all_reduces,  # the other collectives taken as compute
    _only_all_reduces,  # the other collectives left out
    lambda _: (
        "you added up durations and overlaps event by event; where collectives "
        "overlap each other (or compute ops do), that time was counted twice: merge "
        "a device's intervals first."
    ),
)


def _close(got: float, expected: float) -> bool:
    return bool(np.isclose(got, expected, rtol=1e-6, atol=1e-9))


def _named_mistake(found: list[float], truths: list[dict[str, Any]], at: int) -> str | None:
    """What the mistake that gives `found[at]` did, or None when none gives it. Where
    several give it (on a profile in which nothing is hidden, counting everything and
    counting the exposed part both give 1), the one that gives every other answer too."""
    tables = [truth["mistakes"] for truth in truths]

    def gives(got: float, value: float | None) -> bool:
        return value is not None and _close(got, value)

    matching = [n for n, value in enumerate(tables[at]) if gives(found[at], value)]
    consistent = [
        n
        for n in matching
        if all(gives(got, table[n]) for got, table in zip(found, tables, strict=True))
    ]
    chosen = [*consistent, *matching]
    return MISTAKES[chosen[0]](tables[at][chosen[0]]) if chosen else None


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
    truths = reference(NAME, cases)
    for at, ((text, _), got, truth) in enumerate(zip(cases, found, truths, strict=True)):
        fraction = float(truth["answer"])
        if _close(got, fraction):
            continue
        if fraction > 0 and _close(got, 100 * fraction):
            return wrong(f"for {text}, your result is a percentage; return a fraction, 0 to 1.")
        said = _named_mistake(found, truths, at)
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
