"""The answer keys live where only the grader loads them: no checker module holds one, a
notebook's check reads the keys' answers to its public cases from the course's data file
(``answer_keys.json``), which is what the keys say, and the grader's secret cases are not
the public ones. That a graded kernel's copy of the course has no key is the grader's
test (grader/tests/test_grader_keys.py)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from datarax_course import _answers, _cases, _core, _keys, check

TABLES = _cases.answer_tables()
KEY_NAMES = sorted(key.__name__ for key in [*_keys.KEYS.values(), *_keys.COUNTS.values()])
CHECKER_MODULES = sorted(
    f"datarax_course.{path.stem}"
    for path in Path(_core.__file__).parent.glob("_*.py")
    if path.stem not in ("__init__", "_keys")
)


def epoch_ms(step_ms: float, input_ms: float, steps: int, prefetch: bool) -> float:
    if not prefetch:
        return steps * (step_ms + input_ms)
    return input_ms + step_ms + (steps - 1) * max(step_ms, input_ms)


@pytest.mark.parametrize("module", CHECKER_MODULES)
def test_no_module_a_kernel_imports_holds_an_answer_key(module: str) -> None:
    loaded = importlib.import_module(module)
    held = [name for name in KEY_NAMES if hasattr(loaded, name)]
    assert not held, f"{module} holds {held}"


def test_the_table_is_what_the_keys_answer_on_the_public_cases() -> None:
    assert json.loads(json.dumps(_keys.tables())) == TABLES
    assert _keys.tables_text(_keys.tables()) == _keys.TABLES_FILE.read_text(encoding="utf-8")


def test_a_notebook_checks_with_the_table_and_the_grader_with_the_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert check("07.epoch_ms", epoch_ms, quiet=True)  # the table, no keys loaded
    monkeypatch.setattr(_cases, "_KEYS", dict(_keys.KEYS))
    with _cases.drawing(12345):
        assert check("07.epoch_ms", epoch_ms, quiet=True)  # the keys, secret cases


def test_without_keys_secret_cases_are_not_judged_from_the_table() -> None:
    with _cases.drawing(12345):
        feedback = check("07.epoch_ms", epoch_ms, quiet=True)
    assert not feedback and "tabulated" in feedback.message, feedback


def test_a_kernel_being_graded_never_computes_a_right_answer() -> None:
    """Recording (the kernel's side), the checker calls the reader's function on every
    case, then stops where the right answers would be needed."""
    with (
        _cases.drawing(12345),
        _answers.recording() as steps,
        pytest.raises(_cases.NotJudgedHere),
    ):
        _core._CHECKERS["07.epoch_ms"].checker(epoch_ms)
    cases = _core._CHECKERS["07.epoch_ms"].cases
    assert cases is not None
    with _cases.drawing(12345):
        assert len(steps) == len(cases())


@pytest.mark.parametrize("name", sorted(_keys.KEYS))
def test_the_secret_cases_are_not_the_public_ones(name: str) -> None:
    cases = _core._CHECKERS[name].cases
    assert cases is not None
    public = [text for text, _ in cases()]
    with _cases.drawing(2024):
        secret = [text for text, _ in cases()]
    assert public == TABLES[name]["cases"] and secret != public


def test_answers_replayed_from_the_table_fail_on_secret_cases(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What a kernel that forges its record from the table would get."""
    forged = [{"value": value} for value in TABLES["07.epoch_ms"]["expected"]]
    monkeypatch.setattr(_cases, "_KEYS", dict(_keys.KEYS))
    with _cases.drawing(2024), _answers.replaying(forged):
        feedback = _core._judge("07.epoch_ms", None, hint=1)
    assert not feedback and not feedback.checker_bug, feedback
