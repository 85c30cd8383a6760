"""Runs one prepared submission in a kernel: the grader's child process.

``python _kernel_run.py NOTEBOOK`` executes the notebook that `datarax.exercises.grade`
prepared (the grader's device set-up, the student's cells without solutions, then the
grader's harvest cell) in its own folder, with errors allowed, and writes how the run
went to ``run.json`` beside it. The notebook's metadata ``datarax_grade`` holds the time
limit and, for each cell, its number among the submission's code cells (0 for the
grader's own two cells, each with a time limit of its own). It imports only nbformat
and nbclient, so it runs by path without importing JAX, and it is the kernel's parent:
a notebook that kills or stops its parent reaches this process, not the grader.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError


def run(path: Path) -> str:
    """Executes the prepared notebook at `path`; returns how the run went, in words."""
    notebook = nbformat.read(path, as_version=4)
    plan = notebook.metadata.pop("datarax_grade")
    numbers, timeout = [int(n) for n in plan["code_cells"]], float(plan["timeout"])
    position = {"cell": 0}
    errors: list[int] = []
    deadline = time.monotonic() + timeout

    def started(cell: Any, cell_index: int) -> None:
        position["cell"] = numbers[cell_index]
        if numbers[cell_index] and time.monotonic() > deadline:  # quick cells stop too
            raise CellTimeoutError(f"the notebook's {timeout:g} s are up")

    def failed(cell: Any, cell_index: int, execute_reply: Any) -> None:
        if numbers[cell_index]:
            errors.append(numbers[cell_index])

    def cell_limit(cell: Any) -> int:
        if position["cell"] == 0:  # the grader's cells: the device set-up and the harvest
            return max(1, int(timeout))
        return max(1, int(deadline - time.monotonic()))

    client = NotebookClient(
        notebook,
        timeout=int(timeout),
        timeout_func=cell_limit,
        allow_errors=True,
        shutdown_kernel="immediate",
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
        on_cell_start=started,
        on_cell_error=failed,
    )

    def where() -> str:
        cell = position["cell"]
        return f"in code cell {cell}" if cell else "in a cell of the grader's"

    how = "ran to the end"
    try:
        client.execute()
    except CellTimeoutError:
        how = f"stopped at the time limit ({timeout:g} s), {where()}"
    except DeadKernelError:
        how = f"the kernel died {where()}"
    except Exception as error:  # the kernel would not start, a cell could not be sent
        how = f"could not run: {type(error).__name__}: {error}"
    if errors:
        how += f"; errors in code cells {', '.join(map(str, errors))}"
    return how


def main(argv: list[str]) -> int:
    """``_kernel_run.py NOTEBOOK``: runs it and writes ``run.json`` beside it."""
    path = Path(argv[0])
    (path.parent / "run.json").write_text(json.dumps({"run": run(path)}), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
