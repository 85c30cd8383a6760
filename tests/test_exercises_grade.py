"""`python -m datarax.exercises.grade` grades a folder of submissions of one notebook, a
trimmed copy of tutorial 07: a right one, one with the placeholder untouched, one whose
kernel dies and one that loops forever, each in its own kernel and scratch folder,
within the time limit, and with the hidden solution cells dropped before running.
"""

import csv
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).parents[1]
NOTEBOOK = ROOT / "tutorials" / "07_performance.ipynb"
TIME_LIMIT = 30  # seconds per notebook: enough to start a kernel and JAX on 2 busy cores
RIGHT_ANSWER = """\
def epoch_ms(step_ms, input_ms, steps, prefetch):
    if not prefetch:
        return steps * (step_ms + input_ms)
    return input_ms + step_ms + (steps - 1) * max(step_ms, input_ms)
"""


def _trimmed(before_check: str = "", answer: str | None = None) -> nbformat.NotebookNode:
    """Tutorial 07's exercise cells (solution cells included), after a set-up cell."""
    original = nbformat.read(NOTEBOOK, as_version=4)
    todo = next(n for n, c in enumerate(original.cells) if "TODO" in c.source)
    form = original.cells[todo : todo + 4]  # reader cell, check, solution, asserted check
    assert "solution" in form[2].metadata.get("tags", []), "the exercise form changed"
    cells = [nbformat.v4.new_code_cell("from datarax.exercises import check")]
    reader = nbformat.v4.new_code_cell(answer if answer is not None else form[0].source)
    if before_check:
        cells.append(nbformat.v4.new_code_cell(before_check))
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [*cells, reader, *form[1:]]
    return notebook


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, dict], float, Path]:
    folder = tmp_path_factory.mktemp("submissions")
    writes_a_file = "open('left_behind.txt', 'w').write('x')\n"
    submissions = {
        "alice": _trimmed(writes_a_file, RIGHT_ANSWER),
        "bob": _trimmed(),
        "carol": _trimmed("import os\nos._exit(1)", RIGHT_ANSWER),
        "dave": _trimmed("while True:\n    pass", RIGHT_ANSWER),
    }
    for student, notebook in submissions.items():
        (folder / student).mkdir()
        nbformat.write(notebook, folder / student / NOTEBOOK.name)
    nbformat.write(nbformat.v4.new_notebook(), folder / "erin.ipynb")  # no exercise in it
    out = folder.parent / "grades.csv"
    started = time.monotonic()
    command = [sys.executable, "-m", "datarax.exercises.grade", str(folder), "--out", str(out)]
    done = subprocess.run(
        [*command, "--timeout", str(TIME_LIMIT)],
        cwd=folder.parent,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
        capture_output=True,
        text=True,
        timeout=8 * TIME_LIMIT,
    )
    took = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    with open(out, newline="") as file:
        rows = {row["student"]: row for row in csv.DictReader(file)}
    return rows, took, folder


def test_one_row_per_student_and_exercise(graded: tuple[dict[str, dict], float, Path]) -> None:
    rows, _, _ = graded
    assert sorted(rows) == ["alice", "bob", "carol", "dave", "erin"]
    graded_rows = [row for student, row in rows.items() if student != "erin"]
    assert {row["exercise"] for row in graded_rows} == {"07.epoch_ms"}
    assert {row["notebook"] for row in graded_rows} == {NOTEBOOK.name}


def test_a_notebook_without_exercises_gets_a_row_saying_so(
    graded: tuple[dict[str, dict], float, Path],
) -> None:
    erin = graded[0]["erin"]
    assert erin["result"] == "not checked" and "no exercise found" in erin["run"], erin


def test_a_right_answer_is_right(graded: tuple[dict[str, dict], float, Path]) -> None:
    alice = graded[0]["alice"]
    assert alice["result"] == "right" and alice["feedback"].startswith("Right:"), alice
    assert alice["run"] == "ran to the end", alice


def test_the_hidden_solution_does_not_count(graded: tuple[dict[str, dict], float, Path]) -> None:
    bob = graded[0]["bob"]
    assert bob["result"] == "not yet", bob
    assert bob["feedback"].startswith("Not yet: not answered yet."), bob


def test_a_dead_kernel_and_an_endless_loop_are_not_checked(
    graded: tuple[dict[str, dict], float, Path],
) -> None:
    rows, took, _ = graded
    assert rows["carol"]["result"] == "not checked", rows["carol"]
    assert "kernel died in cell 2" in rows["carol"]["run"], rows["carol"]
    assert rows["dave"]["result"] == "not checked", rows["dave"]
    assert f"time limit ({TIME_LIMIT} s), in cell 2" in rows["dave"]["run"], rows["dave"]
    assert took < 4 * TIME_LIMIT + 30, f"grading took {took:.0f} s"


def test_submissions_run_in_scratch_folders(graded: tuple[dict[str, dict], float, Path]) -> None:
    _, _, folder = graded
    assert not list(folder.parent.rglob("left_behind.txt"))
