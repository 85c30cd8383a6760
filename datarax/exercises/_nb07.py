"""Checkers for tutorial 07, performance.

``07.epoch_ms``: how long `steps` steps take, with and without a prefetch thread,
given the step time and the time to produce a batch. The right answer comes from a
step-by-step schedule of a producer and a consumer sharing a bounded buffer, as
`datarax.prefetch_to_device` runs them.

``07.received_block``: the block each device receives of a leaf sent with
``send_flat=True`` over ``P("data")``: its rows split evenly, and everything after the
rows one dimension when the leaf has rank 3 or more.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from datarax.exercises._core import answer_key, call, exercise
from datarax.exercises._feedback import Feedback, right, wrong
from datarax.exercises._values import items, number, whole

_CASES = ((20.0, 15.0, 12), (5.0, 15.0, 12), (30.0, 50.0, 1000), (10.0, 10.0, 3), (7.0, 2.0, 1))


@answer_key
def scheduled_ms(step_ms: float, input_ms: float, steps: int, size: int | None) -> float:
    """When the last step ends: one after the other (`size` None), or with a producer
    thread that keeps at most `size` batches ready and starts a batch once a slot is free
    (a slot frees when the loop takes a batch)."""
    if size is None:
        return steps * (step_ms + input_ms)
    produced, taken, step_end = [], [], 0.0
    for k in range(steps):
        slot_free = taken[k - size] if k >= size else 0.0
        start = max(produced[-1] if produced else 0.0, slot_free)
        produced.append(start + input_ms)
        taken.append(max(step_end, produced[k]))
        step_end = taken[k] + step_ms
    return step_end


@exercise(
    "07.epoch_ms",
    idea="without prefetch every step waits for its batch; with it, producing the next "
    "batch overlaps the current step, except at the two ends.",
    method="without prefetch: steps x (step + input). With it, the first batch is never "
    "hidden and the last step overlaps nothing; in between, each step costs "
    "max(step, input).",
)
def _epoch_ms(answer: Any) -> Feedback:
    for step_ms, input_ms, steps in _CASES:
        for prefetch in (False, True):
            expected = scheduled_ms(step_ms, input_ms, steps, 2 if prefetch else None)
            got = number(call(answer, step_ms, input_ms, steps, prefetch), "epoch_ms's result")
            if not np.isclose(got, expected):
                how = "with" if prefetch else "without"
                return wrong(
                    f"{steps} steps of {step_ms:g} ms on batches that take {input_ms:g} ms to "
                    f"produce end after {expected:g} ms {how} prefetch; your function says "
                    f"{got:g}."
                )
    return right(
        f"your times match the producer-consumer schedule in all {2 * len(_CASES)} cases, "
        "a single step and a slower input included."
    )


_BLOCK_CASES = (
    ((256, 224, 224, 3), 8),
    ((256,), 8),
    ((256, 10), 8),
    ((64, 3, 32, 32), 4),
    ((8, 2, 2, 2), 8),
    ((16, 5, 7), 1),
)


@answer_key
def flat_block(shape: tuple[int, ...], num_devices: int) -> tuple[int, ...]:
    """One device's block of a leaf sent with ``send_flat=True`` over ``P("data")``."""
    rows = shape[0] // num_devices
    if len(shape) < 3:
        return (rows, *shape[1:])
    return (rows, int(np.prod(shape[1:])))


@exercise(
    "07.received_block",
    idea="the rows are split over the devices; a leaf of rank 3 or more crosses as one "
    "2-D array, so everything after the rows becomes one dimension.",
    method="rows = shape[0] // num_devices; for rank >= 3 return (rows, product of "
    "shape[1:]), else (rows, *shape[1:]).",
)
def _received_block(answer: Any) -> Feedback:
    for shape, num_devices in _BLOCK_CASES:
        expected = flat_block(shape, num_devices)
        got = call(answer, shape, num_devices)
        what = "received_block's result"
        read = [whole(size, what) for size in items(got, what, "a tuple of whole numbers")]
        if tuple(read) != expected:
            return wrong(
                f"a {shape} leaf over {num_devices} device(s) reaches each one as a "
                f"{expected} block; your function says {tuple(read)}."
            )
    return right(
        f"your blocks match in all {len(_BLOCK_CASES)} cases: images flattened after their "
        "rows, labels and tables as they are, one device included."
    )
