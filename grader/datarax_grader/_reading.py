"""What the grader reads from the submissions without running them: each student's
notebooks (or what a student folder holds instead), the exercises a notebook holds, the
function each exercise's check names, and the hints its saved outputs show. Cells
tagged ``solution`` are left out throughout.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

from datarax_course.grading import exercises
from datarax_grader._students import is_solution

_CHECK_CALL = re.compile(r"""check\(\s*["'](\d\d\.\w+)["']\s*,\s*([A-Za-z_]\w*)\s*[,)]""")


def student_cells(notebook: Any) -> list[Any]:
    """The cells of `notebook` that a student copy keeps (those not tagged solution)."""
    return [cell for cell in notebook.cells if not is_solution(cell)]


def exercises_in(name: str, notebook: Any) -> list[str]:
    """The exercises a notebook holds: those of its number (``03_...``), and any whose
    ``check("NN.name", ...)`` appears in it.

    Example:
        >>> import nbformat
        >>> exercises_in("03_uneven_batches.ipynb", nbformat.v4.new_notebook())
        ['03.mean_log', '03.pad_for']
        >>> cell = nbformat.v4.new_code_cell('check("07.epoch_ms", epoch_ms)')
        >>> exercises_in("alice.ipynb", nbformat.v4.new_notebook(cells=[cell]))
        ['07.epoch_ms', '07.predicted_epoch', '07.received_block']
    """
    numbers = set(re.findall(r"^(\d\d)_", name))
    for cell in student_cells(notebook):
        numbers.update(re.findall(r"""check\(\s*["'](\d\d)\.\w+["']""", cell.source))
    return [name for name in exercises() if name.split(".")[0] in numbers]


def answer_names(notebook: Any) -> dict[str, str]:
    """{exercise: the function named in its last ``check(...)``}, solution cells left out.

    Example:
        >>> import nbformat
        >>> cells = [nbformat.v4.new_code_cell('check("07.epoch_ms", epoch_ms)')]
        >>> answer_names(nbformat.v4.new_notebook(cells=cells))
        {'07.epoch_ms': 'epoch_ms'}
    """
    names = {}
    for cell in student_cells(notebook):
        if cell.cell_type == "code":
            names.update(_CHECK_CALL.findall(cell.source))
    return names


def hints_shown(notebook: Any, exercise: str) -> str:
    """``none``, ``idea`` or ``method``: the furthest hint that the saved outputs of the
    notebook's checks of `exercise` show, or that a check asks for with ``hint=2``.

    Example:
        >>> import nbformat
        >>> cell = nbformat.v4.new_code_cell('check("07.epoch_ms", epoch_ms)')
        >>> cell.outputs = [nbformat.v4.new_output("stream", text="Not yet: ... Hint: ...")]
        >>> hints_shown(nbformat.v4.new_notebook(cells=[cell]), "07.epoch_ms")
        'idea'
    """
    step = 0
    for cell in student_cells(notebook):
        if cell.cell_type != "code" or exercise not in dict(_CHECK_CALL.findall(cell.source)):
            continue
        shown = json.dumps(cell.get("outputs", []))
        if "Method:" in shown or re.search(r"hint\s*=\s*2", cell.source):
            step = 2
        elif "Hint:" in shown:
            step = max(step, 1)
    return ("none", "idea", "method")[step]


@dataclasses.dataclass(frozen=True)
class Found:
    """A student's submission: a notebook's `name` and `content`, or, with `content`
    None, a `note` saying what the student's folder held instead."""

    student: str
    name: str
    content: bytes | None
    note: str = ""


def _is_notebook(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() == ".ipynb"


def _what_is_there(folder: Path) -> str:
    names = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    if not names:
        return "no notebook: the folder is empty"
    listed = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return f"no notebook (.ipynb) found; the folder holds {listed}"


def submissions(folder: Path) -> list[Found]:
    """Every student's submissions under `folder`, sorted; a student without a notebook
    gets one entry saying what was found. Hidden files and folders are left out.

    Example:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> for name in ("alice/03_uneven_batches.IPYNB", "bob.ipynb", "carl/notes.py"):
        ...     (root / name).parent.mkdir(exist_ok=True)
        ...     _ = (root / name).write_text("{}")
        >>> (root / "dana").mkdir()
        >>> [(found.student, found.name, found.note) for found in submissions(root)]
        [('alice', '03_uneven_batches.IPYNB', ''), ('bob', 'bob.ipynb', ''),
         ('carl', '', 'no notebook (.ipynb) found; the folder holds notes.py'),
         ('dana', '', 'no notebook: the folder is empty')]
    """
    found = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith("."):  # .ipynb_checkpoints and the like
            continue
        if entry.is_dir():
            notebooks = [
                path
                for path in sorted(entry.rglob("*"))
                if _is_notebook(path)
                and not any(p.startswith(".") for p in path.relative_to(entry).parts)
            ]
            found += [Found(entry.name, path.name, path.read_bytes()) for path in notebooks]
            if not notebooks:
                found.append(Found(entry.name, "", None, _what_is_there(entry)))
        elif _is_notebook(entry):
            found.append(Found(entry.stem, entry.name, entry.read_bytes()))
        elif entry.is_file():
            note = f"no notebook (.ipynb) found: {entry.name} is not graded; submit the notebook"
            found.append(Found(entry.stem, entry.name, None, note))
    return found
