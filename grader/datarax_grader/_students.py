"""Student copies of the tutorials: no solutions, no quiz answers, no badges.

A class gets copies in which:

- the cells tagged ``solution`` (the hidden solutions and the checks that assert them)
  are gone;
- every ``<details>...</details>`` block of a markdown cell (the quizzes' answers) is
  replaced by a line saying the answer is left out;
- the "Open in Colab / Kaggle / Binder" badges are gone: they open the original
  notebooks, solutions included. Links to the library's source and docs stay;
- the jupytext pairing (the notebook's ``jupytext`` metadata) is gone, so that
  ``jupytext --sync`` beside a copy of the tutorial's text file cannot bring the
  solutions back.

The teacher keeps the originals. This file needs only nbconvert and nbformat, so
``make student-notebooks`` runs it by path from a small venv, without JAX::

    python grader/datarax_grader/_students.py OUT_DIR tutorials/01_devices_and_meshes.ipynb ...
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from nbconvert.exporters import NotebookExporter
from nbconvert.preprocessors import Preprocessor

SOLUTION_TAG = "solution"
ANSWER_LEFT_OUT = "*(The answer is left out of this copy: work it out, then compare in class.)*"
_DETAILS = re.compile(r"<details\b.*?</details>", re.DOTALL | re.IGNORECASE)
_BADGE = re.compile(
    r"\[!\[[^\]]*\]\([^)]*\)\]\(\s*https?://[^)]*(?:colab|kaggle|binder)[^)]*\)[ \t]*\n?",
    re.IGNORECASE,
)


def strip_answers(markdown: str) -> str:
    """`markdown` without quiz answers (``<details>`` blocks) or Colab/Kaggle/Binder badges.

    Example:
        >>> text = "Q?\\n\\n<details><summary>Answer</summary>\\n\\n42\\n\\n</details>"
        >>> print(strip_answers(text))
        Q?
        <BLANKLINE>
        *(The answer is left out of this copy: work it out, then compare in class.)*
        >>> badge = "[![Open In Colab](https://x/badge.svg)](https://colab.research.google.com/a.ipynb)"
        >>> strip_answers("# Title\\n\\n" + badge + "\\n\\nText")
        '# Title\\n\\nText'
    """
    text = _DETAILS.sub(ANSWER_LEFT_OUT, markdown)
    text = _BADGE.sub("", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n")


def is_solution(cell: Any) -> bool:
    """Whether a notebook cell is tagged ``solution``.

    Example:
        >>> is_solution({"metadata": {"tags": ["solution"]}}), is_solution({"metadata": {}})
        (True, False)
    """
    return SOLUTION_TAG in cell.get("metadata", {}).get("tags", [])


class StudentCopy(Preprocessor):
    """An nbconvert preprocessor that makes a notebook into a student's copy."""

    def preprocess(self, nb: Any, resources: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """Drops solution cells and the jupytext pairing, and strips quiz answers and
        badges from markdown cells."""
        nb.metadata.pop("jupytext", None)
        nb.cells = [cell for cell in nb.cells if not is_solution(cell)]
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                cell.source = strip_answers(cell.source)
        return nb, resources


def write_student_copies(out_dir: Path, notebooks: list[Path]) -> list[Path]:
    """Writes a student copy of each notebook into `out_dir`; returns their paths.

    Example:
        >>> import tempfile
        >>> tutorial = Path("tutorials/07_performance.ipynb")
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     [path.name for path in write_student_copies(Path(folder), [tutorial])]
        ['07_performance.ipynb']
    """
    exporter = NotebookExporter()
    exporter.register_preprocessor(StudentCopy, enabled=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for notebook in notebooks:
        body, _ = exporter.from_filename(str(notebook))
        target = out_dir / notebook.name
        target.write_text(str(body), encoding="utf-8")  # the exporter writes text
        written.append(target)
    return written


def main(argv: list[str]) -> int:
    """``_students.py OUT_DIR NOTEBOOK...``: writes the student copies, says where."""
    if len(argv) < 2:
        print(f"usage: {Path(__file__).name} OUT_DIR NOTEBOOK.ipynb ...", file=sys.stderr)
        return 2
    written = write_student_copies(Path(argv[0]), [Path(name) for name in argv[1:]])
    print(f"{len(written)} student copies in {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
