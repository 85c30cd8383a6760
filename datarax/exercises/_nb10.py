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

from datarax.exercises._core import answer_key, call, exercise
from datarax.exercises._feedback import Feedback, right, wrong
from datarax.exercises._values import number

BACKWARD_FLOPS_PER_PARAMETER_PER_ROW = 4  # of the 6 of a dense model's step (forward: 2)

# (what the case is, num_devices, FLOP/s, bytes/s sent, bytes per gradient value)
_CASES: list[tuple[str, Any, Any, Any, Any]] = [
    ("a TPU v5e-8 ring at 2 x 45 GB/s, bfloat16 gradients", 8, 197e12, 90e9, 2),
    ("a TPU v5e-8 ring at 2 x 50 GB/s, bfloat16 gradients", 8, 197e12, 100e9, 2),
    ("8 H100 over NVLink, bfloat16 gradients", 8, 989e12, 450e9, 2),
    ("64 devices, float32 gradients", 64, 100e12, 50e9, 4),
    ("2 devices given as numpy numbers", np.int64(2), np.float32(1e12), np.float64(1e10), 2),
    ("one device, which sends nothing", 1, 197e12, 100e9, 2),
]


@answer_key
def expected_batch(
    num_devices: int, flops_per_second: float, send_bytes_per_second: float, bytes_per_value: int
) -> float:
    """Rows per device where 4 n b / F == 2 (N - 1) / N x bytes x n / W."""
    sent_per_value = 2 * (num_devices - 1) / num_devices * bytes_per_value
    return (
        sent_per_value
        * flops_per_second
        / (BACKWARD_FLOPS_PER_PARAMETER_PER_ROW * send_bytes_per_second)
    )


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
)
def _communication_bound_batch(answer: Any) -> Feedback:
    for name, devices, flops, send, width in _CASES:
        expected = expected_batch(int(devices), float(flops), float(send), int(width))
        got = number(call(answer, devices, flops, send, width), "your function's result")
        if not np.isclose(got, expected, rtol=1e-6, atol=1e-9):
            sent = 2 * (int(devices) - 1) / int(devices) * int(width)
            return wrong(
                f"for {name} (N = {devices}, F = {float(flops):.3g} FLOP/s, W = "
                f"{float(send):.3g} bytes/s, {width} bytes per value), each device sends "
                f"{sent:.4g} bytes per parameter, so the backward pass and the all-reduce "
                f"take equally long at {expected:.4g} rows per device. Your function "
                f"returned {got:.4g}."
            )
    return right(
        f"the communication-bound batch matches on {len(_CASES)} cases (a TPU v5e-8 at both "
        "ends of its link bandwidth, an H100, float32 gradients, numpy inputs and a single "
        "device)."
    )
