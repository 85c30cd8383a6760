"""Checkers for tutorial 07, performance.

``07.epoch_ms``: how long `steps` steps take, with and without a prefetch thread,
given the step time and the time to produce a batch. The right answer comes from the
answer key: a step-by-step schedule of a producer and a consumer sharing a bounded
buffer, as `datarax.prefetch_to_device` runs them.

``07.received_block``: the block each device receives of a leaf sent with
``send_flat=True`` over ``P("data")``: its rows split evenly, and everything after the
rows one dimension when the leaf has rank 3 or more.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from datarax_course._cases import draw, reference
from datarax_course._core import call, exercise
from datarax_course._feedback import Feedback, right, wrong
from datarax_course._values import items, number, whole

_CASES = ((20.0, 15.0, 12), (5.0, 15.0, 12), (30.0, 50.0, 1000), (10.0, 10.0, 3), (7.0, 2.0, 1))


def _epoch_cases() -> list[tuple[str, tuple[float, float, int, int | None]]]:
    """(text, (step_ms, input_ms, steps, buffer size or None)): the fixed cases and three
    drawn ones, each without and with prefetch (a buffer of 2)."""
    rng = draw("07.epoch_ms")
    drawn = [
        (float(rng.integers(2, 120)) / 2, float(rng.integers(2, 120)) / 2, int(rng.integers(1, 60)))
        for _ in range(3)
    ]
    cases = []
    for step_ms, input_ms, steps in [*_CASES, *drawn]:
        for size in (None, 2):
            how = "with" if size else "without"
            text = f"{steps} steps of {step_ms:g} ms, batches of {input_ms:g} ms, {how} prefetch"
            cases.append((text, (step_ms, input_ms, steps, size)))
    return cases


@exercise(
    "07.epoch_ms",
    idea="without prefetch every step waits for its batch; with it, producing the next "
    "batch overlaps the current step, except at the two ends.",
    method="without prefetch: steps x (step + input). With it, the first batch is never "
    "hidden and the last step overlaps nothing; in between, each step costs "
    "max(step, input).",
    cases=_epoch_cases,
)
def _epoch_ms(answer: Any) -> Feedback:
    cases = _epoch_cases()
    found = [
        number(call(answer, step_ms, input_ms, steps, size is not None), "epoch_ms's result")
        for _, (step_ms, input_ms, steps, size) in cases
    ]
    expected = reference("07.epoch_ms", cases)
    for (_, (step_ms, input_ms, steps, size)), got, right_ms in zip(
        cases, found, expected, strict=True
    ):
        if not np.isclose(got, right_ms):
            how = "with" if size else "without"
            return wrong(
                f"{steps} steps of {step_ms:g} ms on batches that take {input_ms:g} ms to "
                f"produce end after {right_ms:g} ms {how} prefetch; your function says "
                f"{got:g}."
            )
    return right(
        f"your times match the producer-consumer schedule in all {len(cases)} cases, "
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


def _block_cases() -> list[tuple[str, tuple[tuple[int, ...], int]]]:
    """(text, (shape, num_devices)): the fixed cases and three drawn shapes of rank 1 to 4."""
    rng = draw("07.received_block")
    drawn = []
    for rank in (1, 2, 4):
        devices = int(rng.choice([1, 2, 4, 8]))
        rest = tuple(int(n) for n in rng.integers(1, 40, size=rank - 1))
        drawn.append(((devices * int(rng.integers(1, 65)), *rest), devices))
    return [
        (f"a {shape} leaf over {devices} device(s)", (shape, devices))
        for shape, devices in [*_BLOCK_CASES, *drawn]
    ]


@exercise(
    "07.received_block",
    idea="the rows are split over the devices; a leaf of rank 3 or more crosses as one "
    "2-D array, so everything after the rows becomes one dimension.",
    method="rows = shape[0] // num_devices; for rank >= 3 return (rows, product of "
    "shape[1:]), else (rows, *shape[1:]).",
    cases=_block_cases,
)
def _received_block(answer: Any) -> Feedback:
    cases = _block_cases()
    what = "received_block's result"
    found = [
        tuple(
            whole(size, what)
            for size in items(call(answer, *arguments), what, "a tuple of whole numbers")
        )
        for _, arguments in cases
    ]
    expected = reference("07.received_block", cases)
    for (text, _), got, block in zip(cases, found, expected, strict=True):
        if got != tuple(block):
            return wrong(
                f"{text} reaches each one as a {tuple(block)} block; your function says {got}."
            )
    return right(
        f"your blocks match in all {len(cases)} cases: images flattened after their "
        "rows, labels and tables as they are, one device included."
    )
