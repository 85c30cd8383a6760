"""Checkers for tutorial 07, performance.

``07.epoch_ms``: how long `steps` steps take, with and without a prefetch thread,
given the step time and the time to produce a batch. The right answer comes from a
step-by-step schedule of a producer and a consumer sharing a bounded buffer, as
`datarax.prefetch_to_device` runs them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from datarax.exercises._core import answer_key, call, exercise
from datarax.exercises._feedback import Feedback, right, wrong
from datarax.exercises._values import number

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
