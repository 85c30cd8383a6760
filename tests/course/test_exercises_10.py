"""The checker of tutorial 10: a right answer passes, a wrong one is told what is wrong,
and the placeholder is reported as not answered, never raised."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from datarax_course import check

NAME = "10.communication_bound_batch"


def communication_bound_batch(devices: Any, flops: Any, send: Any, width: Any) -> float:
    return 2 * (devices - 1) / devices * width * flops / (4 * send)


def as_numpy_number(devices: Any, flops: Any, send: Any, width: Any) -> np.floating:
    return np.float64(communication_bound_batch(devices, flops, send, width))


def ignoring_the_ring(devices: Any, flops: Any, send: Any, width: Any) -> float:
    return width * flops / (4 * send)  # sends the payload once, and even with one device


def hiding_behind_the_whole_step(devices: Any, flops: Any, send: Any, width: Any) -> float:
    return 2 * (devices - 1) / devices * width * flops / (6 * send)  # forward pass included


def as_a_string(devices: Any, flops: Any, send: Any, width: Any) -> str:
    return str(communication_bound_batch(devices, flops, send, width))


@pytest.mark.parametrize("solution", [communication_bound_batch, as_numpy_number])
def test_a_right_answer_passes(solution: Any) -> None:
    assert check(NAME, solution, quiet=True)


@pytest.mark.parametrize(
    ("mistake", "named"),
    [
        (ignoring_the_ring, "TPU v5e-8 ring at 2 x 45 GB/s"),
        (hiding_behind_the_whole_step, "TPU v5e-8 ring at 2 x 45 GB/s"),
        (lambda *args: communication_bound_batch(*args) if args[0] > 1 else 1.0, "one device"),
    ],
)
def test_a_wrong_answer_is_told_which_case_and_the_right_number(mistake: Any, named: str) -> None:
    told = check(NAME, mistake, quiet=True)
    assert not told and named in told.message, told.message
    assert "rows per device" in told.message


def test_a_string_is_not_a_number() -> None:
    told = check(NAME, as_a_string, quiet=True)
    assert not told and "should be a number; it is a str" in told.message


def test_the_placeholder_is_not_answered_and_a_missing_return_is_named() -> None:
    waiting = check(NAME, lambda *args: ..., quiet=True)
    assert not waiting and waiting.message.startswith("not answered yet")
    forgot = check(NAME, lambda *args: None, quiet=True)
    assert not forgot and "return" in forgot.message


def test_a_raising_answer_is_reported_not_raised() -> None:
    def broken(*args: Any) -> float:
        raise ZeroDivisionError("oops")

    told = check(NAME, broken, quiet=True)
    assert not told and "ZeroDivisionError" in told.message


def test_the_notebook_numbers_match_the_checker() -> None:
    """Tutorial 10's upper ends: 1915 rows on a TPU v5e-8 ring at 2 x 45 GB/s, 1923 on
    H100s over NVLink; its lower ends, with no overlap, are two thirds of the checker's
    answer at the higher bandwidth."""
    from datarax_course._keys import expected_batch

    assert round(expected_batch(8, 197e12, 2 * 45e9, 2)) == 1915
    assert round(expected_batch(8, 989e12, 900e9 / 2, 2)) == 1923
    assert round(2 / 3 * expected_batch(8, 197e12, 2 * 50e9, 2)) == 1149
    assert round(2 / 3 * expected_batch(8, 989e12, 900e9 / 2, 2)) == 1282
    assert expected_batch(1, 197e12, 100e9, 2) == 0
