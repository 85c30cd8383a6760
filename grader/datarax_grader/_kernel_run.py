"""Runs one prepared submission in its kernel: the grader's runner, a child of the grader.

``python -I -B _kernel_run.py`` reads its plan as JSON on stdin (`Plan`): the prepared
notebook (the grader's device set-up, then the student's cells without solutions), the
kernel's command and environment, the time limit, and the code of the grader's last
cell, the harvest, which holds the seed of the secret cases. That cell is never written
to a file: the kernel learns the seed only when the harvest runs, after every cell of
the notebook. The runner writes how the run went to the plan's `report` file.

The runner stores no output of the kernel's: it counts it. A cell's output is capped in
the kernel itself (`datarax_grader._kernel_boot.CappedStream`); past
`NOTEBOOK_OUTPUT_LIMIT` bytes for the whole notebook (pictures, say, which that cap does
not see) the runner stops the kernel. No message larger than `MESSAGE_LIMIT` is read.
The runner's memory cannot be read by another process of its user
(``PR_SET_DUMPABLE``). It imports only nbformat, nbclient and jupyter_client, so it runs
by path without importing JAX.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import nbformat
import zmq
import zmq.asyncio
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError

NOTEBOOK_OUTPUT_LIMIT = 64 << 20  # bytes of output for the whole notebook
MESSAGE_LIMIT = 32 << 20  # bytes of one message from the kernel
CELL_LIMIT_TEXT = "1,048,576 characters"  # datarax_grader._kernel_boot.CELL_OUTPUT_LIMIT
KERNEL_NAME = "datarax-grading"
CUT_MARK = "[grading: this cell's output was cut here"  # datarax_grader._kernel_boot.CUT


@dataclasses.dataclass(frozen=True)
class Plan:
    """What to run: `notebook` (a path), `code_cells` (each cell's number among the
    submission's code cells, 0 for the grader's), `timeout` (seconds for the notebook),
    the kernel's `argv` and `env`, `folder` (the runner's own: the kernel's spec and
    connection file), `workdir` (the kernel's working folder), `harvest` (code) and
    `report` (where the result goes)."""

    notebook: str
    code_cells: list[int]
    timeout: float
    argv: list[str]
    env: dict[str, str]
    folder: str
    workdir: str
    harvest: str
    report: str


class _Runner(NotebookClient):
    """A notebook client that counts the kernel's output instead of keeping it, and notes
    the cells whose output the kernel cut."""

    output_bytes = 0
    flooded = False
    cut: tuple[int, ...] = ()

    def output(self, outs: Any, msg: dict[str, Any], display_id: Any, cell_index: int) -> None:
        content = json.dumps(msg["content"])
        self.output_bytes += len(content)
        if CUT_MARK in content and cell_index not in self.cut:
            self.cut = (*self.cut, cell_index)
        if self.output_bytes > NOTEBOOK_OUTPUT_LIMIT and not self.flooded:
            self.flooded = True
            process = getattr(self.km.provisioner, "process", None) if self.km else None
            if process is not None:
                process.kill()


def _kernel_manager(plan: Plan) -> AsyncKernelManager:
    folder = Path(plan.folder)
    spec = folder / "kernels" / KERNEL_NAME
    spec.mkdir(parents=True, exist_ok=True)
    argv = [part.replace("{runner_pid}", str(os.getpid())) for part in plan.argv]
    described = {"argv": argv, "env": plan.env, "display_name": "grading", "language": "python"}
    (spec / "kernel.json").write_text(json.dumps(described), encoding="utf-8")
    context = zmq.asyncio.Context()
    context.setsockopt(zmq.MAXMSGSIZE, MESSAGE_LIMIT)
    return AsyncKernelManager(
        kernel_name=KERNEL_NAME,
        kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(folder / "kernels")]),
        transport="ipc",
        ip=str(folder / "k"),
        connection_file=str(folder / "kernel.json"),
        context=context,
    )


def run(plan: Plan) -> str:
    """Executes the notebook of `plan`, then its harvest; returns how the run went."""
    notebook = nbformat.read(plan.notebook, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell(plan.harvest))
    numbers, timeout = [*plan.code_cells, 0], plan.timeout
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

    client = _Runner(
        notebook,
        km=_kernel_manager(plan),
        timeout=int(timeout),
        timeout_func=cell_limit,
        allow_errors=True,
        shutdown_kernel="immediate",
        resources={"metadata": {"path": plan.workdir}},
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
        if getattr(client, "flooded", False):
            limit = NOTEBOOK_OUTPUT_LIMIT >> 20
            how = f"stopped {where()}: the notebook printed more than {limit} MiB"
    except Exception as error:  # the kernel would not start, a cell could not be sent
        how = f"could not run: {type(error).__name__}: {str(error)[:300]}"
    if errors:
        how += f"; errors in code cells {', '.join(map(str, errors))}"
    cut = [numbers[index] for index in client.cut if numbers[index]]
    if cut:
        how += f"; output cut at {CELL_LIMIT_TEXT} in code cells {', '.join(map(str, cut))}"
    return how


def main() -> int:
    """Reads the plan on stdin, runs it, writes the report."""
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE: no reading of this memory
    plan = Plan(**json.loads(sys.stdin.read()))
    Path(plan.report).write_text(json.dumps({"run": run(plan)}), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
