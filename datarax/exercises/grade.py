"""Grading a class's notebooks: one command, one CSV row per student and exercise.

::

    python -m datarax.exercises.grade SUBMISSIONS_DIR --out grades.csv --timeout 120

`SUBMISSIONS_DIR` holds the submitted notebooks, either one folder per student
(``alice/03_uneven_batches.ipynb``: the student is the folder's name) or files directly
in it (``alice.ipynb``: the student is the file's name). Every submission is read into
memory before the first one runs, and ``--out`` is checked and written (its header)
before then too. Each submission, one after the other:

1. loses its cells tagged ``solution``; what is left, and a last cell of the grader's,
   is written into a scratch folder of its own that holds nothing else;
2. runs top to bottom in a kernel whose parent is a child process of the grader, in a
   session of its own, with the scratch folder (in a private folder that holds nothing
   else) as working directory and temporary folder (``TMPDIR``), the library from
   a private copy (so neither the working directory nor the environment leads to the
   tutorials), errors allowed and a time limit; when it ends, stops or runs out of time,
   every process it started is killed, detached ones included (Linux), and the scratch
   folder is deleted;
3. is judged by this rule: **an exercise's result is its checker's verdict, computed in
   the grader's process, on the values that the function named in the notebook's last
   ``check("NN.name", function)`` call returned to the same checker run in the kernel
   after the notebook**. Nothing else the kernel prints, writes or claims counts, and an
   answer that runs a checker's own answer function (a copy included) is turned down.

The CSV, rewritten whole after each submission, has the columns `FIELDS`: ``result`` is
``right``, ``not yet``, ``not checked`` (no values to judge) or ``checker error``;
``feedback`` is the verdict with the checker's idea as hint; ``run`` says how the run
went ("in code cell 7" counts code cells only); ``hints`` is the furthest hint the
submitted notebook's saved outputs show for that exercise, or its checks ask for
(``hint=2``): ``none``, ``idea`` or ``method``. A value that a spreadsheet would read as
a formula (starting with ``=``, ``+``, ``-`` or ``@``) gets a leading apostrophe.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from datarax._extras import require

require("nbformat", "tutorials", "python -m datarax.exercises.grade")
require("nbclient", "tutorials", "python -m datarax.exercises.grade")

import jax  # noqa: E402
import nbformat  # noqa: E402

import datarax  # noqa: E402
from datarax.distributed import setup_devices  # noqa: E402
from datarax.distributed._descendants import become_subreaper  # noqa: E402
from datarax.exercises._contained import run_contained  # noqa: E402
from datarax.exercises._grading import judged  # noqa: E402
from datarax.exercises._reading import (  # noqa: E402
    answer_names,
    exercises_in,
    hints_shown,
    student_cells,
)
from datarax.exercises._students import is_solution  # noqa: E402

FIELDS = ("student", "notebook", "exercise", "result", "feedback", "run", "hints")
_WORKER = Path(__file__).with_name("_kernel_run.py")
_RECORD_LIMIT = 64 * 2**20  # bytes of a kernel's record read at most


@dataclasses.dataclass(frozen=True)
class Grade:
    """One row of the grades: how `student` did on `exercise` of `notebook`."""

    student: str
    notebook: str
    exercise: str
    result: str
    feedback: str
    run: str
    hints: str = ""


def submissions(folder: Path) -> list[tuple[str, Path]]:
    """(student, notebook) for every notebook under `folder`, sorted.

    Example:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> (root / "alice").mkdir()
        >>> _ = (root / "alice" / "03_uneven_batches.ipynb").write_text("{}")
        >>> _ = (root / "bob.ipynb").write_text("{}")
        >>> [(student, path.name) for student, path in submissions(root)]
        [('alice', '03_uneven_batches.ipynb'), ('bob', 'bob.ipynb')]
    """
    found = []
    for path in sorted(folder.rglob("*.ipynb")):
        parts = path.relative_to(folder).parts
        if any(part.startswith(".") for part in parts):  # .ipynb_checkpoints and the like
            continue
        found.append((parts[0] if len(parts) > 1 else path.stem, path))
    return found


def _prepared(notebook: Any, names: dict[str, str], folder: Path, timeout: float) -> Any:
    """The notebook the kernel runs: the grader's device set-up (the devices the notebooks
    ask for, as in the grader), the student's cells, then the harvest cell."""
    setup = "from datarax.distributed import setup_devices as _datarax_setup\n_datarax_setup(8)"
    cells = [nbformat.v4.new_code_cell(setup), *student_cells(notebook)]
    numbers, count = [0], 0
    for cell in notebook.cells:
        count += cell.cell_type == "code"
        if not is_solution(cell):
            numbers.append(count if cell.cell_type == "code" else -1)
    harvest = (
        "from datarax.exercises._grading import harvest as _datarax_harvest\n"
        f"_datarax_harvest({names!r}, globals(), {str(folder / 'answers.json')!r})"
    )
    prepared = nbformat.v4.new_notebook(cells=[*cells, nbformat.v4.new_code_cell(harvest)])
    prepared.metadata = notebook.metadata
    prepared.metadata["datarax_grade"] = {"code_cells": [*numbers, 0], "timeout": timeout}
    return prepared


def _read_json(path: Path) -> Any:
    try:
        if path.stat().st_size > _RECORD_LIMIT:
            return None
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # missing, cut short, or nested on purpose
        return None


def _run_text(how: str, folder: Path, limit: float) -> str:
    if how == "stopped":
        return "the notebook stopped its grading process (SIGSTOP); it was killed"
    if how == "time":
        return f"stopped at the time limit ({limit:g} s for the whole run)"
    if how != "exited":
        return f"the notebook's grading process was {how}"
    report = _read_json(folder / "run.json")
    if isinstance(report, dict) and isinstance(report.get("run"), str):
        return report["run"][:500]
    log = (folder / "worker.log").read_text(errors="replace").strip().splitlines()
    return "could not run: " + (log[-1] if log else "no report")


def grade_submission(
    student: str, name: str, content: bytes, timeout: float, env: dict[str, str]
) -> list[Grade]:
    """The rows of one submission, one per exercise it holds; runs it when it holds any.

    Example:
        >>> empty = nbformat.writes(nbformat.v4.new_notebook()).encode()
        >>> rows = grade_submission("erin", "notes.ipynb", empty, 60, dict(os.environ))
        >>> [(row.result, row.run[:17]) for row in rows]
        [('not checked', 'no exercise found')]
    """
    try:
        notebook = nbformat.reads(content.decode("utf-8"), as_version=4)
    except Exception as error:  # not a notebook at all
        return [Grade(student, name, "", "not checked", "", f"unreadable: {error}")]
    exercises = exercises_in(name, notebook)
    if not exercises:
        note = "no exercise found: name the file NN_... as the tutorial, or keep its check cells"
        return [Grade(student, name, "", "not checked", "", note)]
    names = answer_names(notebook)
    limit = 2 * timeout + 60  # the cells, the checks, and a kernel starting and stopping
    with tempfile.TemporaryDirectory(prefix="grade-", ignore_cleanup_errors=True) as private:
        folder = Path(private) / "scratch"  # its parent holds nothing else either
        folder.mkdir()
        nbformat.write(_prepared(notebook, names, folder, timeout), folder / "submission.ipynb")
        command = [sys.executable, str(_WORKER), str(folder / "submission.ipynb")]
        temp = {name: str(folder) for name in ("PWD", "TMPDIR", "TEMP", "TMP")}
        how = run_contained(command, folder, {**env, **temp}, limit, folder / "worker.log")
        run = _run_text(how, folder, limit)
        record = _read_json(folder / "answers.json")
    return [_row(student, name, exercise, record, names, run, notebook) for exercise in exercises]


def _row(
    student: str,
    name: str,
    exercise: str,
    record: Any,
    names: dict[str, str],
    run: str,
    notebook: Any,
) -> Grade:
    """The row of one exercise, by the rule in the module's docstring."""
    hints = hints_shown(notebook, exercise)
    answers = record.get("answers") if isinstance(record, dict) else None
    if exercise not in names or not isinstance(answers, dict) or exercise not in answers:
        why = "" if exercise in names else f'; no check("{exercise}", your_function) found'
        return Grade(student, name, exercise, "not checked", "", run + why, hints)
    devices = len(jax.devices())
    if record.get("devices") != devices:
        note = f"; the kernel had {record.get('devices')!r:.20} devices, the grader {devices}"
        return Grade(student, name, exercise, "not checked", "", run + note, hints)
    feedback = judged(exercise, answers[exercise])
    if feedback is None:
        note = "; the values recorded in the kernel do not answer the checker's cases"
        return Grade(student, name, exercise, "not checked", "", run + note, hints)
    result = "checker error" if feedback.checker_bug else "right" if feedback.ok else "not yet"
    return Grade(student, name, exercise, result, str(feedback), run, hints)


def _as_text(value: str) -> str:
    """`value`, with a leading apostrophe where a spreadsheet would read a formula.

    Example:
        >>> _as_text("=HYPERLINK(1)"), _as_text("alice")
        ("'=HYPERLINK(1)", 'alice')
    """
    return "'" + value if value[:1] in ("=", "+", "-", "@", "\t", "\r") else value


def write_csv(grades: list[Grade], out: Path) -> None:
    """Writes `grades` to `out` as CSV with the header `FIELDS`, replacing the file whole.

    Example:
        >>> out = Path(tempfile.mkdtemp()) / "grades.csv"
        >>> write_csv([Grade("bob", "07_performance.ipynb", "07.epoch_ms", "right", "", "")], out)
        >>> out.read_text().splitlines()[1]
        'bob,07_performance.ipynb,07.epoch_ms,right,,,'
    """
    partial = out.with_name(f".{out.name}.partial")
    with open(partial, "w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(FIELDS)
        for grade in grades:
            writer.writerow([_as_text(value) for value in dataclasses.astuple(grade)])
    os.replace(partial, out)


def _out_problem(out: Path, folder: Path) -> str | None:
    """Why `out` cannot take the grades, or None."""
    where = out.resolve()
    if where.is_dir():
        return f"--out {out} is a folder; name a file, such as {out / 'grades.csv'}"
    if not where.parent.is_dir():
        return f"--out {out}: the folder {out.parent} does not exist; create it first"
    if where.is_relative_to(folder.resolve()):
        return f"--out {out} is inside the submissions folder; write the grades elsewhere"
    if not os.access(where.parent, os.W_OK) or (where.exists() and not os.access(where, os.W_OK)):
        return f"--out {out} cannot be written; choose a file in a folder you can write to"
    return None


def _reaches_tutorials(value: str) -> bool:
    """Whether an environment value names a folder that holds the tutorials, or their parent."""
    for entry in value.split(os.pathsep):
        if len(entry) < 4096 and entry.startswith(os.sep):
            folder = Path(entry)
            with_tutorials = [folder, folder / "tutorials"]
            if any(f.is_dir() and any(f.glob("[0-9][0-9]_*.ipynb")) for f in with_tutorials):
                return True
    return False


def _kernel_env(library: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not _reaches_tutorials(value)}
    env.pop("OLDPWD", None)
    env["PYTHONPATH"] = str(library)
    return env


def main(argv: list[str] | None = None) -> int:
    """The command line: grades a folder of submissions into a CSV file."""
    parser = argparse.ArgumentParser(
        prog="python -m datarax.exercises.grade",
        description="Run every submitted notebook without its solution cells and write "
        "one CSV row per student and exercise.",
    )
    parser.add_argument("submissions", type=Path, help="folder of submitted notebooks")
    parser.add_argument("--out", type=Path, default=Path("grades.csv"), help="CSV to write")
    parser.add_argument(
        "--timeout", type=float, default=120, help="seconds a notebook may run (default 120)"
    )
    args = parser.parse_args(argv)
    if not args.submissions.is_dir():
        parser.error(f"{args.submissions} is not a folder of notebooks")
    problem = _out_problem(args.out, args.submissions)
    if problem:
        parser.error(problem)
    out = args.out.resolve()
    write_csv([], out)
    found = [(s, p.name, p.read_bytes()) for s, p in submissions(args.submissions)]
    setup_devices(8)  # the devices the notebooks ask for, so the checkers' cases match
    become_subreaper()
    grades: list[Grade] = []
    with tempfile.TemporaryDirectory(prefix="grade-library-") as library:
        ignore = shutil.ignore_patterns("__pycache__")
        shutil.copytree(Path(datarax.__file__).parent, Path(library) / "datarax", ignore=ignore)
        env = _kernel_env(Path(library))
        for student, name, content in found:
            print(f"grading {student}: {name}", file=sys.stderr, flush=True)
            grades += grade_submission(student, name, content, args.timeout, env)
            write_csv(grades, out)
    right = sum(grade.result == "right" for grade in grades)
    print(f"{len(grades)} rows, {right} right, in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
