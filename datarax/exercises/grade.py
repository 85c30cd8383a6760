"""Grading a class's notebooks: one command, one CSV row per student and exercise.

::

    python -m datarax.exercises.grade SUBMISSIONS_DIR --out grades.csv --timeout 120

`SUBMISSIONS_DIR` holds the submitted notebooks, either one folder per student
(``alice/03_uneven_batches.ipynb``: the student is the folder's name) or files directly
in it (``alice.ipynb``: the student is the file's name). Each submission:

1. loses its cells tagged ``solution`` (the hidden solutions and the checks that
   assert them), so the student's own functions are what get checked;
2. runs top to bottom in its own kernel (nbclient), in a scratch copy of a temporary
   folder that is deleted afterwards, with errors allowed (a broken cell does not stop
   the exercises after it) and a time limit for the whole notebook, after which the
   kernel is killed;
3. reports its results through the checkers themselves: the grader sets the
   environment variable ``DATARAX_GRADE_LOG`` to a file in the scratch folder, and
   every ``check(...)`` appends ``{"exercise", "ok", "message"}`` to it as a line of
   JSON. The last check of each exercise counts.

The CSV's columns are `FIELDS`: ``result`` is ``right``, ``not yet``, ``not checked``
(no check of that exercise ran) or ``checker error``; ``feedback`` is what the
checker told the student; ``run`` says how the notebook's run went. The grader
trusts the kernel: a student who writes to the log file or replaces ``check`` can fake
a result, so read the code of surprising answers.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError

from datarax.exercises._core import _CHECKERS, GRADE_LOG
from datarax.exercises._students import is_solution

FIELDS = ("student", "notebook", "exercise", "result", "feedback", "run")


@dataclasses.dataclass(frozen=True)
class Grade:
    """One row of the grades: how `student` did on `exercise` of `notebook`."""

    student: str
    notebook: str
    exercise: str
    result: str
    feedback: str
    run: str


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


def exercises_in(name: str, notebook: Any) -> list[str]:
    """The exercises a notebook holds: those of its number (``03_...``), and any whose
    ``check("NN.name", ...)`` appears in it.

    Example:
        >>> exercises_in("03_uneven_batches.ipynb", nbformat.v4.new_notebook())
        ['03.mean_log', '03.pad_for']
        >>> cell = nbformat.v4.new_code_cell('check("07.epoch_ms", epoch_ms)')
        >>> exercises_in("alice.ipynb", nbformat.v4.new_notebook(cells=[cell]))
        ['07.epoch_ms']
    """
    numbers = set(re.findall(r"^(\d\d)_", name))
    called = set()
    for cell in notebook.cells:
        called.update(re.findall(r"""check\(\s*["'](\d\d\.\w+)["']""", cell.source))
    numbers.update(exercise.split(".")[0] for exercise in called)
    return sorted(n for n in _CHECKERS if n.split(".")[0] in numbers and n != "00.example")


def _run_submission(path: Path, timeout: float) -> tuple[dict[str, dict[str, Any]], str]:
    """Runs a submission without its solution cells; returns (last result of each
    exercise checked, how the run went)."""
    notebook = nbformat.read(path, as_version=4)
    kept = [n for n, cell in enumerate(notebook.cells) if not is_solution(cell)]
    notebook.cells = [notebook.cells[n] for n in kept]
    position = {"cell": 0}
    errors: list[int] = []
    deadline = time.monotonic() + timeout

    def started(cell: Any, cell_index: int) -> None:
        position["cell"] = kept[cell_index] + 1
        if time.monotonic() > deadline:  # quick cells after the limit do not run either
            raise CellTimeoutError(f"the notebook's {timeout:g} s are up")

    def failed(cell: Any, cell_index: int, execute_reply: Any) -> None:
        errors.append(kept[cell_index] + 1)

    with tempfile.TemporaryDirectory(prefix="grade-") as scratch:
        log = Path(scratch) / "checks.jsonl"
        nbformat.write(notebook, Path(scratch) / path.name)
        client = NotebookClient(
            notebook,
            timeout=int(timeout),
            timeout_func=lambda cell: max(1, int(deadline - time.monotonic())),
            allow_errors=True,
            shutdown_kernel="immediate",
            kernel_name="python3",
            resources={"metadata": {"path": scratch}},
            on_cell_start=started,
            on_cell_error=failed,
        )
        run = "ran to the end"
        try:
            client.execute(env={**os.environ, GRADE_LOG: str(log)})
        except CellTimeoutError:
            run = f"stopped at the time limit ({timeout:g} s), in cell {position['cell']}"
        except DeadKernelError:
            run = f"the kernel died in cell {position['cell']}"
        except Exception as error:  # the kernel would not start, a cell could not be sent
            run = f"could not run: {type(error).__name__}: {error}"
        if errors:
            run += f"; errors in cells {', '.join(map(str, errors))}"
        results: dict[str, dict[str, Any]] = {}
        if log.exists():
            for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
                try:
                    record = json.loads(line)
                    results[str(record["exercise"])] = record
                except (ValueError, KeyError, TypeError):  # a line the kernel cut short
                    continue
    return results, run


def grade_submission(student: str, path: Path, timeout: float) -> list[Grade]:
    """The rows of one submission, one per exercise it holds; runs it when it holds any.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "notes.ipynb"
        >>> nbformat.write(nbformat.v4.new_notebook(), path)
        >>> [(row.result, row.run[:17]) for row in grade_submission("erin", path, 60)]
        [('not checked', 'no exercise found')]
    """
    try:
        notebook = nbformat.read(path, as_version=4)
    except Exception as error:  # not a notebook at all
        return [Grade(student, path.name, "", "not checked", "", f"unreadable: {error}")]
    exercises = exercises_in(path.name, notebook)
    if not exercises:
        note = "no exercise found: name the file NN_... as the tutorial, or keep its check cells"
        return [Grade(student, path.name, "", "not checked", "", note)]
    results, run = _run_submission(path, timeout)
    grades = []
    for exercise in exercises:
        record = results.get(exercise)
        if record is None:
            grades.append(Grade(student, path.name, exercise, "not checked", "", run))
            continue
        message = str(record.get("message", ""))
        result = "right" if record.get("ok") is True else "not yet"
        if record.get("checker_bug") is True:
            result = "checker error"
        grades.append(Grade(student, path.name, exercise, result, message, run))
    return grades


def write_csv(grades: list[Grade], out: Path) -> None:
    """Writes `grades` to `out` as CSV with the header `FIELDS`.

    Example:
        >>> import tempfile
        >>> out = Path(tempfile.mkdtemp()) / "grades.csv"
        >>> write_csv([Grade("bob", "07_performance.ipynb", "07.epoch_ms", "right", "", "")], out)
        >>> out.read_text().splitlines()[1]
        'bob,07_performance.ipynb,07.epoch_ms,right,,'
    """
    with open(out, "w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(FIELDS)
        for grade in grades:
            writer.writerow(dataclasses.astuple(grade))


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
    grades = []
    for student, path in submissions(args.submissions):
        print(f"grading {student}: {path.name}", file=sys.stderr, flush=True)
        grades += grade_submission(student, path, args.timeout)
    write_csv(grades, args.out)
    right = sum(grade.result == "right" for grade in grades)
    print(f"{len(grades)} rows, {right} right, in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
