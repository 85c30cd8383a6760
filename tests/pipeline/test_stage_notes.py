"""The note a stage's error gets: the read-only advice only on a write into a read-only
array, never on other ValueErrors a stage raises."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from datarax.pipeline import Pipeline

READ_ONLY_ADVICE = "must return new arrays instead"


def _first_error(stage: Callable[[Any], Any], workers: int = 0) -> ValueError:
    pipeline = Pipeline(source={"x": np.arange(20)}, stages=[stage], batch_size=5, workers=workers)
    with pytest.raises(ValueError) as raised:
        next(iter(pipeline))
    return raised.value


def _notes(error: BaseException) -> str:
    return "\n".join(getattr(error, "__notes__", []))


def _parse(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {**batch, "x": batch["x"] + int("x")}


def _reshape(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {**batch, "x": batch["x"].reshape(3, 7)}


def _mismatch(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {**batch, "x": batch["x"] + np.arange(3)}


def _multiply_in_place(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    batch["x"] *= 2
    return batch


def _assign_in_place(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    batch["x"][0] = 7
    return batch


def _sort_in_place(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    batch["x"].sort()
    return batch


@pytest.mark.parametrize("stage", [_parse, _reshape, _mismatch])
def test_a_value_error_of_another_kind_gets_no_read_only_advice(stage: Any) -> None:
    error = _first_error(stage)
    notes = _notes(error)
    assert "Raised by stages[0] of the pipeline." in notes
    assert READ_ONLY_ADVICE not in notes and "read-only" not in notes


@pytest.mark.parametrize("stage", [_multiply_in_place, _assign_in_place, _sort_in_place])
def test_a_write_into_a_read_only_batch_gets_the_advice(stage: Any) -> None:
    error = _first_error(stage)
    assert "read-only" in str(error)
    assert READ_ONLY_ADVICE in _notes(error)


def test_in_a_worker_too_only_the_write_gets_the_advice() -> None:
    assert READ_ONLY_ADVICE not in _notes(_first_error(_parse, workers=1))
    assert READ_ONLY_ADVICE in _notes(_first_error(_multiply_in_place, workers=1))
