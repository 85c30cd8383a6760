"""The grade command's own checks, before any notebook runs: a missing extra in one line,
values of --timeout and --memory that grade nothing, and a row for every student folder,
whatever it holds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from datarax_grader import grade

ROOT = Path(__file__).parents[2]


def test_without_the_tutorials_extra_it_says_so_in_one_line() -> None:
    blocked = (
        "import sys, runpy; sys.modules['nbformat'] = None; "
        "runpy.run_module('datarax_grader.grade', run_name='__main__')"
    )
    done = subprocess.run(
        [sys.executable, "-c", blocked, "submissions"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "pip install 'datarax-sharding[tutorials]'" in lines[0], lines


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "-inf", "soon"])
@pytest.mark.parametrize("option", ["--timeout", "--memory"])
def test_a_limit_that_would_grade_nothing_is_refused_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str
) -> None:
    with pytest.raises(SystemExit) as stopped:
        grade.main([str(tmp_path), "--out", str(tmp_path.parent / "g.csv"), f"{option}={value}"])
    assert stopped.value.code == 2
    said = capsys.readouterr().err
    assert f"{option} must be a finite number" in said and repr(value) in said, said


def _write(path: Path, content: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)


def test_every_student_folder_gets_an_entry_saying_what_was_found(tmp_path: Path) -> None:
    notebook = nbformat.writes(nbformat.v4.new_notebook())
    _write(tmp_path / "ann" / "07_performance.IPYNB", notebook)
    _write(tmp_path / "ben" / "07_performance.py", "print(1)")
    (tmp_path / "cat").mkdir()
    _write(tmp_path / "dan" / ".ipynb_checkpoints" / "07-checkpoint.ipynb", notebook)
    _write(tmp_path / "eve.py", "print(1)")
    _write(tmp_path / "fay.ipynb", notebook)
    _write(tmp_path / ".hidden" / "x.ipynb", notebook)
    found = {entry.student: entry for entry in grade.submissions(tmp_path)}
    assert sorted(found) == ["ann", "ben", "cat", "dan", "eve", "fay"]
    assert found["ann"].content is not None and found["ann"].name == "07_performance.IPYNB"
    assert found["ben"].content is None and "holds 07_performance.py" in found["ben"].note
    assert found["cat"].content is None and "the folder is empty" in found["cat"].note
    assert found["dan"].content is None and "07-checkpoint.ipynb" in found["dan"].note
    assert found["eve"].content is None and "eve.py is not graded" in found["eve"].note
    assert found["fay"].content is not None


def test_the_grades_survive_a_deleted_folder(tmp_path: Path) -> None:
    out = tmp_path / "gone" / "grades.csv"
    row = grade.Grade("ann", "07_performance.ipynb", "07.epoch_ms", "right", "", "")
    grade.write_csv([row], out)
    assert out.read_text().splitlines()[1].startswith("ann,")


@pytest.mark.parametrize(
    ("out", "says"),
    [("missing/grades.csv", "does not exist"), ("submissions/grades.csv", "inside")],
)
def test_out_is_checked_before_any_notebook_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], out: str, says: str
) -> None:
    folder = tmp_path / "submissions"
    folder.mkdir()
    with pytest.raises(SystemExit) as stopped:
        grade.main([str(folder), "--out", str(tmp_path / out)])
    assert stopped.value.code == 2 and says in capsys.readouterr().err


def test_the_readme_points_teachers_to_the_teaching_page() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "docs/teaching.md" in readme and "pip install ./grader" in readme
