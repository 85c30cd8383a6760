"""A quiz's answer stays hidden until the reader gives theirs: `reveal` prints nothing of
the library's values before, and in the notebooks every code cell that follows a quiz
and stays in the student copies either prints nothing or goes through `reveal`."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import numpy as np
import pytest

from datarax_course import reveal

ROOT = Path(__file__).parents[2]
NOTEBOOKS = sorted((ROOT / "tutorials").glob("[0-9][0-9]_*.ipynb"))


def test_nothing_of_the_answer_shows_while_a_blank_is_left(
    capsys: pytest.CaptureFixture[str],
) -> None:
    answered = reveal({"host 7": ..., "rows": 125}, {"host 7": (875, 1000), "rows": 125})
    said = capsys.readouterr().out
    assert answered is False
    assert "875" not in said and "125" not in said and "1 left" in said, said


def test_a_missing_name_is_a_blank_too(capsys: pytest.CaptureFixture[str]) -> None:
    assert reveal({}, {"rows": 125}) is False
    assert "add rows" in capsys.readouterr().out


def test_once_answered_both_show_side_by_side(capsys: pytest.CaptureFixture[str]) -> None:
    answer = {"bounds": (875, 1000), "shapes": [(256,), (232,)], "ok": True, "mean": 0.1 + 0.2}
    actual = {"bounds": (875, 1000), "shapes": [(256,), (231,)], "ok": np.bool_(True)}
    actual["mean"] = np.float32(0.3)
    assert reveal(answer, actual) is True
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("agreed") and lines[2].endswith("agreed"), lines
    assert "the library says [(256,), (231,)]: they differ" in lines[1], lines
    assert lines[3].endswith("agreed"), lines


def test_an_unreadable_answer_is_said_and_the_library_still_shown(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert reveal({"rows": object()}, {"rows": 125}) is True
    said = capsys.readouterr().out
    assert "your rows should be a value" in said and "the library says 125" in said, said


def _after_quizzes(notebook: Path) -> list[nbformat.NotebookNode]:
    """The code cells a student copy keeps between each quiz and the next heading."""
    cells = nbformat.read(notebook, as_version=4).cells
    found = []
    for number, cell in enumerate(cells):
        if cell.cell_type != "markdown" or "<summary>Answer</summary>" not in cell.source:
            continue
        for after in cells[number + 1 :]:
            if after.cell_type == "markdown" and after.source.lstrip().startswith("#"):
                break
            if after.cell_type == "code" and "solution" not in after.metadata.get("tags", []):
                found.append(after)
    return found


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_code_after_a_quiz_prints_only_through_reveal(notebook: Path) -> None:
    """The cell under a quiz may compute the answer, never print it past `reveal`."""
    for cell in _after_quizzes(notebook):
        prints = re.search(r"\b(print|display|plt\.show)\(", cell.source)
        if prints:
            assert "reveal(" in cell.source, cell.source
            before = cell.source[: prints.start()]
            assert re.search(r"if reveal\(", before), cell.source  # printed only once answered
