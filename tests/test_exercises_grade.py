"""`python -m datarax.exercises.grade` grades a folder of submissions of one notebook, a
trimmed copy of tutorial 07, as a class of honest, careless and hostile students would
hand it in: a right one, one with the placeholder untouched, one whose kernel dies, one
that loops forever, ones that kill, stop or outlive their grading, one that deletes
another's submission, and ones that cheat. One grading run serves every test here.
"""

import csv
import os
import subprocess
import sys
import tempfile
import textwrap
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
ALICE_LOOKS_AROUND = """\
import os, tempfile
open("left_behind.txt", "w").write("x")
tempfile.mkstemp(suffix="left_behind.txt")
here = os.getcwd()
assert os.path.realpath(tempfile.gettempdir()) == here, "temporary files go to the scratch folder"
assert os.listdir(os.path.dirname(here)) == [os.path.basename(here)], "a private parent"
"""
SAW_A_HINT = "Not yet: not answered yet. Hint: without prefetch every step waits ..."


def _trimmed(before_check: str = "", answer: str | None = None) -> nbformat.NotebookNode:
    """A title, then tutorial 07's exercise cells (solution cells included), after a
    set-up cell and `before_check`."""
    original = nbformat.read(NOTEBOOK, as_version=4)
    todo = next(
        n for n, c in enumerate(original.cells) if "TODO" in c.source and "epoch_ms" in c.source
    )
    form = original.cells[todo : todo + 4]  # reader cell, check, solution, asserted check
    assert "solution" in form[2].metadata.get("tags", []), "the exercise form changed"
    cells = [
        nbformat.v4.new_markdown_cell("# My work"),
        nbformat.v4.new_code_cell("from datarax.exercises import check"),
    ]
    reader = nbformat.v4.new_code_cell(answer if answer is not None else form[0].source)
    if before_check:
        cells.append(nbformat.v4.new_code_cell(textwrap.dedent(before_check)))
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [*cells, reader, *form[1:]]
    return notebook


def _hostile(folder: Path, out: Path) -> dict[str, nbformat.NotebookNode]:
    """Submissions that attack the grading run itself or cheat."""
    daemon = f"""\
        import os, subprocess, sys, time
        script = '''
        import os, sys, time
        if os.fork():
            sys.exit(0)
        os.setsid()
        time.sleep(2)
        for _ in range(200):
            with open({str(out)!r}, "a") as grades:
                grades.write("daemon,forged\\\\n")
            open({str(out.parent / "daemon_was_here")!r}, "w").write(str(time.time()))
            time.sleep(0.25)
        '''
        subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
        """
    copy = """\
        import types
        from datarax.exercises._nb07 import scheduled_ms

        _mine = types.FunctionType(scheduled_ms.__code__, scheduled_ms.__globals__, "mine")

        def epoch_ms(step_ms, input_ms, steps, prefetch):
            return _mine(step_ms, input_ms, steps, 2 if prefetch else None)
        """
    claims = """\
        import json, os
        from datarax.exercises import _core
        from datarax.exercises._feedback import right

        _core._judge = lambda name, answer, hint: right("trust me")
        _core._CHECKERS["07.epoch_ms"] = _core.Exercise(lambda a: right("trust me"), "", "")
        line = {"exercise": "07.epoch_ms", "ok": True, "checker_bug": False, "message": "x"}
        for log in (os.environ.get("DATARAX_GRADE_LOG"), "answers.json", "checks.jsonl"):
            if log:
                open(log, "a").write(json.dumps(line) + "\\n")
        """
    reads = """\
        import glob, os
        from pathlib import Path
        import datarax, nbformat

        places = [*Path(datarax.__file__).parents[:2], Path.cwd(), Path.cwd().parent]
        places += [Path(p) for v in os.environ.values() for p in v.split(os.pathsep)]
        found = (
            path
            for place in places
            for pattern in ("07_*.ipynb", "*/07_*.ipynb")
            for path in glob.glob(f"{place}/{pattern}")
        )
        for path in found:
            cells = nbformat.read(path, as_version=4).cells
            solutions = [c.source for c in cells if "def epoch_ms_solution" in c.source]
            if solutions:
                exec(solutions[0])
                epoch_ms = epoch_ms_solution
                break
        """
    return {
        "aaron": _trimmed(f"import shutil\nshutil.rmtree({str(folder / 'alice')!r})", "x = 1"),
        "eve": _trimmed("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)", RIGHT_ANSWER),
        "fay": _trimmed("import os, signal\nos.kill(os.getppid(), signal.SIGSTOP)", RIGHT_ANSWER),
        "gus": _trimmed(daemon, RIGHT_ANSWER),
        "jon": _trimmed(answer=textwrap.dedent(copy)),
        "kim": _trimmed(claims),
        "ned": _trimmed(answer=textwrap.dedent(reads)),
    }


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, dict], float, Path]:
    folder = tmp_path_factory.mktemp("submissions")
    out = folder.parent / "grades.csv"
    bob = _trimmed()
    bob.cells[3].outputs = [nbformat.v4.new_output("stream", text=SAW_A_HINT)]
    submissions = {
        "alice": _trimmed(ALICE_LOOKS_AROUND, RIGHT_ANSWER),
        "bob": bob,
        "carol": _trimmed("import os\nos._exit(1)", RIGHT_ANSWER),
        "dave": _trimmed("while True:\n    pass", RIGHT_ANSWER),
        **_hostile(folder, out),
    }
    for student, notebook in submissions.items():
        (folder / student).mkdir()
        nbformat.write(notebook, folder / student / NOTEBOOK.name)
    nbformat.write(nbformat.v4.new_notebook(), folder / "erin.ipynb")  # no exercise in it
    (folder / "=SUM(1,2)").mkdir()
    nbformat.write(nbformat.v4.new_notebook(), folder / "=SUM(1,2)" / "notes.ipynb")
    started = time.monotonic()
    command = [sys.executable, "-m", "datarax.exercises.grade", str(folder), "--out", str(out)]
    done = subprocess.run(
        [*command, "--timeout", str(TIME_LIMIT)],
        cwd=folder.parent,
        env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=30 * TIME_LIMIT,
    )
    took = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    time.sleep(3)  # time for anything left behind to spoil the grades
    with open(out, newline="") as file:  # the rows of 07's other exercise are not studied here
        rows = {
            row["student"]: row
            for row in csv.DictReader(file)
            if row["exercise"] != "07.received_block"
        }
    return rows, took, folder


def _row(graded: tuple[dict[str, dict], float, Path], student: str) -> dict:
    return graded[0][student]


def test_one_row_per_student_and_exercise(graded: tuple[dict[str, dict], float, Path]) -> None:
    rows = graded[0]
    everyone = ["aaron", "alice", "bob", "carol", "dave", "eve", "fay", "gus", "jon", "kim"]
    assert sorted(rows) == sorted([*everyone, "ned", "erin", "'=SUM(1,2)"])
    graded_rows = [row for student, row in rows.items() if student in everyone]
    assert {row["exercise"] for row in graded_rows} == {"07.epoch_ms"}
    assert {row["notebook"] for row in graded_rows} == {NOTEBOOK.name}


def test_a_notebook_without_exercises_gets_a_row_saying_so(
    graded: tuple[dict[str, dict], float, Path],
) -> None:
    erin = _row(graded, "erin")
    assert erin["result"] == "not checked" and "no exercise found" in erin["run"], erin


def test_a_right_answer_is_right(graded: tuple[dict[str, dict], float, Path]) -> None:
    alice = _row(graded, "alice")
    assert alice["result"] == "right" and alice["feedback"].startswith("Right:"), alice
    assert alice["run"] == "ran to the end" and alice["hints"] == "none", alice


def test_the_hidden_solution_does_not_count_and_hints_seen_are_recorded(
    graded: tuple[dict[str, dict], float, Path],
) -> None:
    bob = _row(graded, "bob")
    assert bob["result"] == "not yet", bob
    assert bob["feedback"].startswith("Not yet: not answered yet."), bob
    assert bob["hints"] == "idea", bob


def test_a_dead_kernel_and_an_endless_loop_are_not_checked(
    graded: tuple[dict[str, dict], float, Path],
) -> None:
    rows, took, _ = graded
    assert rows["carol"]["result"] == "not checked", rows["carol"]
    assert "kernel died in code cell 2" in rows["carol"]["run"], rows["carol"]
    assert rows["dave"]["result"] == "not checked", rows["dave"]
    assert f"time limit ({TIME_LIMIT} s), in code cell 2" in rows["dave"]["run"], rows["dave"]
    assert took < 20 * TIME_LIMIT, f"grading took {took:.0f} s"


def test_a_notebook_cannot_kill_stop_or_outlive_its_grading(
    graded: tuple[dict[str, dict], float, Path],
) -> None:
    rows, _, folder = graded
    assert rows["eve"]["result"] == "not checked" and "killed" in rows["eve"]["run"], rows["eve"]
    assert rows["fay"]["result"] == "not checked" and "SIGSTOP" in rows["fay"]["run"], rows["fay"]
    assert rows["gus"]["result"] == "right", rows["gus"]
    assert "daemon" not in rows and "forged" not in (folder.parent / "grades.csv").read_text()
    left_behind = folder.parent / "daemon_was_here"
    if left_behind.exists():  # it ran while gus was graded, and was killed with the rest
        written = float(left_behind.read_text() or 0)
        time.sleep(1)
        assert float(left_behind.read_text() or 0) == written


def test_one_submission_cannot_delete_another(graded: tuple[dict[str, dict], float, Path]) -> None:
    assert not (graded[2] / "alice").exists()  # aaron deleted it, after it was read
    assert _row(graded, "alice")["result"] == "right"


@pytest.mark.parametrize(
    ("student", "result", "why"),
    [
        ("jon", "not yet", "the checker's own scheduled_ms"),
        ("kim", "not checked", "do not answer the checker's cases"),
        ("ned", "not yet", "not answered yet"),
    ],
    ids=["a copy of the answer key", "claims from the kernel", "the tutorials' solutions"],
)
def test_cheats_get_no_marks(
    graded: tuple[dict[str, dict], float, Path], student: str, result: str, why: str
) -> None:
    row = _row(graded, student)
    assert row["result"] == result and why in row["feedback"] + row["run"], row


def test_submissions_run_in_scratch_folders(graded: tuple[dict[str, dict], float, Path]) -> None:
    _, _, folder = graded
    assert not list(folder.parent.rglob("left_behind.txt"))
    assert not list(Path(tempfile.gettempdir()).glob("*left_behind.txt"))


@pytest.mark.parametrize(
    ("out", "says"),
    [("missing/grades.csv", "does not exist"), ("submissions/grades.csv", "inside")],
)
def test_out_is_checked_before_any_notebook_runs(tmp_path: Path, out: str, says: str) -> None:
    folder = tmp_path / "submissions"
    folder.mkdir()
    marker = tmp_path / "ran"
    nbformat.write(_trimmed(f"open({str(marker)!r}, 'w')"), folder / NOTEBOOK.name)
    done = subprocess.run(
        [sys.executable, "-m", "datarax.exercises.grade", str(folder), "--out", out],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and says in done.stderr, done.stderr
    assert not marker.exists()


def test_without_the_tutorials_extra_the_error_names_it() -> None:
    blocked = "import sys; sys.modules['nbformat'] = None; import datarax.exercises.grade"
    done = subprocess.run(
        [sys.executable, "-c", blocked],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "pip install 'datarax-sharding[tutorials]'" in done.stderr, done.stderr


def test_the_readme_points_teachers_to_the_teaching_page() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "docs/teaching.md" in readme and "datarax.exercises.grade" in readme
