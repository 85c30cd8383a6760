"""Checkers for tutorial 10, from batch to step.

``10.communication_bound_batch``: the per-device batch (rows) at which the backward pass
of a dense model's step takes as long as a ring all-reduce of its gradients, the only
part of the step the all-reduce can overlap: the backward pass is 4 FLOPs per parameter
per row at `flops_per_second`; the all-reduce sends 2 (N - 1) / N x `bytes_per_value`
bytes per parameter at `send_bytes_per_second`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from datarax_course._cases import draw, reference
from datarax_course._core import call, exercise
from datarax_course._feedback import Feedback, right, wrong
from datarax_course._values import number

# (what the case is, num_devices, FLOP/s, bytes/s sent, bytes per gradient value)
_CASES: list[tuple[str, Any, Any, Any, Any]] = [
    ("a TPU v5e-8 ring at 2 x 45 GB/s, bfloat16 gradients", 8, 197e12, 90e9, 2),
    ("a TPU v5e-8 ring at 2 x 50 GB/s, bfloat16 gradients", 8, 197e12, 100e9, 2),
    ("8 H100 over NVLink, bfloat16 gradients", 8, 989e12, 450e9, 2),
    ("64 devices, float32 gradients", 64, 100e12, 50e9, 4),
    ("2 devices given as numpy numbers", np.int64(2), np.float32(1e12), np.float64(1e10), 2),
    ("one device, which sends nothing", 1, 197e12, 100e9, 2),
]


def _given() -> list[tuple[str, tuple[Any, Any, Any, Any]]]:
    """(text, (num_devices, FLOP/s, bytes/s sent, bytes per value)) as the reader's function
    gets them: the fixed cases and three drawn ones."""
    rng = draw("10.communication_bound_batch")
    drawn = []
    for _ in range(3):
        devices, width = int(rng.integers(2, 513)), int(rng.choice([1, 2, 4]))
        flops, send = float(rng.integers(1, 1000)) * 1e12, float(rng.integers(1, 1000)) * 1e9
        name = f"{devices} devices at {flops:.3g} FLOP/s sending {send:.3g} bytes/s"
        drawn.append((name, devices, flops, send, width))
    return [(name, (n, f, w, b)) for name, n, f, w, b in [*_CASES, *drawn]]


def _cases() -> list[tuple[str, tuple[int, float, float, int]]]:
    """The cases of `_given` as the answer key takes them: plain Python numbers."""
    return [(name, (int(n), float(f), float(w), int(b))) for name, (n, f, w, b) in _given()]


@exercise(
    "10.communication_bound_batch",
    idea="the all-reduce can hide only behind the backward pass, whose compute grows with "
    "the rows per device while the all-reduce does not: find the batch where the two take "
    "equally long.",
    method="per row, the backward pass costs 4 FLOPs per parameter (the forward pass, 2, "
    "comes before any gradient exists), so it takes 4 n b / F seconds; the ring all-reduce "
    "sends 2 (N - 1) / N x bytes_per_value bytes per parameter, taking "
    "2 (N - 1) / N x bytes_per_value x n / W seconds. Set them equal; the number of "
    "parameters n cancels.",
    cases=_cases,
)
def _communication_bound_batch(answer: Any) -> Feedback:
    given = _given()
    found = [number(call(answer, *arguments), "your function's result") for _, arguments in given]
    expected = reference("10.communication_bound_batch", _cases())
    for (name, (devices, flops, send, width)), got, rows in zip(
        given, found, expected, strict=True
    ):
        if not np.isclose(got, rows, rtol=1e-6, atol=1e-9):
            sent = 2 * (int(devices) - 1) / int(devices) * int(width)
            return wrong(
                f"for {name} (N = {devices}, F = {float(flops):.3g} FLOP/s, W = "
                f"{float(send):.3g} bytes/s, {width} bytes per value), each device sends "
                f"{sent:.4g} bytes per parameter, so the backward pass and the all-reduce "
                f"take equally long at {rows:.4g} rows per device. Your function "
                f"returned {got:.4g}."
            )
    return right(
        f"the communication-bound batch matches in {len(given)} cases (a TPU v5e-8 at both "
        "ends of its link bandwidth, an H100, float32 gradients, numpy inputs, a single "
        "device and drawn ones)."
    )
