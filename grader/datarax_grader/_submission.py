"""Grading one submission: its folder, its kernel, its run and its rows.

`grade_submission` gives each submission a private folder of its own, deleted
afterwards, holding:

- ``lib/``: a fresh copy of the library the kernel imports
  (`datarax_grader._integrity.Library`: the grader's datarax, datarax_course without
  its answer keys, and datarax_grader), made read-only and checked against the
  grader's hash right before the run;
- ``scratch/``: the kernel's working and temporary folder (``TMPDIR``), where the
  harvest writes what the student's functions returned;
- ``home/``: the kernel's ``HOME``, IPython and Jupyter folders, empty;
- ``run/``: the kernel's sockets and connection file; ``runner/``: the runner's plan,
  report and log, which a kernel in namespaces cannot reach.

The runner (`datarax_grader._kernel_run`, from the copy) starts the kernel: in
namespaces of its own (`datarax_grader._sandbox`) where the machine allows, else as
the teacher behind a seccomp filter (`datarax_grader._seccomp`). Its environment is
built from nothing (`kernel_environment`), so no variable of the teacher's leads
anywhere. Each row comes from `_row`, by the rule in `datarax_grader.grade`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import jax
import nbformat

from datarax_course.grading import judged
from datarax_grader import _sandbox
from datarax_grader._contained import run_contained
from datarax_grader._integrity import Library
from datarax_grader._reading import answer_names, exercises_in, hints_shown, student_cells
from datarax_grader._students import is_solution

RECORD_LIMIT = 64 << 20  # bytes of a kernel's record read at most
TERMINAL_LIMIT = 64 << 20  # bytes a submission's processes may write to their terminal
NAMESPACES, SECCOMP = "namespaces", "seccomp"


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


@dataclasses.dataclass(frozen=True)
class Settings:
    """How to grade: `timeout` seconds per notebook, `memory` bytes per submission,
    `isolation` (`NAMESPACES` or `SECCOMP`), the `library`, the folders a kernel in
    namespaces must not see (`hidden`) or that must not be bound at all (`skip`), the
    processes a kernel behind the seccomp filter must not signal (`guarded`: the
    grader and the processes it runs under), and `disk`, the bytes a submission's
    folders may hold together, which is also the largest file it may write."""

    timeout: float
    memory: int
    isolation: str
    library: Library
    hidden: list[Path]
    skip: list[Path]
    guarded: list[int]
    disk: int = 1 << 30


def kernel_environment(folder: Path) -> dict[str, str]:
    """The whole environment of the runner and the kernel of the submission in `folder`.

    Example:
        >>> kernel_environment(Path("/tmp/x"))["HOME"]
        '/tmp/x/home'
    """
    home, scratch = folder / "home", folder / "scratch"
    places = {
        "HOME": home,
        "IPYTHONDIR": home / ".ipython",
        "JUPYTER_CONFIG_DIR": home / ".jupyter",
        "JUPYTER_DATA_DIR": home / ".local" / "share" / "jupyter",
        "JUPYTER_RUNTIME_DIR": folder / "run" / "runtime",
        "MPLCONFIGDIR": home / ".config" / "matplotlib",
        "XDG_CONFIG_HOME": home / ".config",
        "XDG_CACHE_HOME": home / ".cache",
        "XDG_DATA_HOME": home / ".local" / "share",
        "TMPDIR": scratch,
        "TEMP": scratch,
        "TMP": scratch,
        "PYTHONPATH": folder / "lib",  # for processes the notebook starts (local clusters)
    }
    return {
        **{name: str(path) for name, path in places.items()},
        "PATH": os.pathsep.join(
            [str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]
        ),
        "LANG": "C.UTF-8",
        "USER": "student",
        "LOGNAME": "student",
        "PYTHONNOUSERSITE": "1",
        "PYTHONDONTWRITEBYTECODE": "1",  # no compiled file in the Python installation
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
    }


def _prepared(notebook: Any) -> tuple[Any, list[int]]:
    """The notebook the kernel runs (the grader's device set-up, then the student's cells)
    and each cell's number among the submission's code cells (0 for the grader's)."""
    setup = "from datarax.distributed import setup_devices as _datarax_setup\n_datarax_setup(8)"
    cells = [nbformat.v4.new_code_cell(setup), *student_cells(notebook)]
    numbers, count = [0], 0
    for cell in notebook.cells:
        count += cell.cell_type == "code"
        if not is_solution(cell):
            numbers.append(count if cell.cell_type == "code" else -1)
    prepared = nbformat.v4.new_notebook(cells=cells)
    prepared.metadata = notebook.metadata
    return prepared, numbers


def _kernel_argv(folder: Path, settings: Settings) -> list[str]:
    """The kernel's command: in namespaces, or behind the seccomp filter that protects the
    grader and the runner ("{runner_pid}", which the runner fills in)."""
    lib = folder / "lib"
    scripts = lib / "datarax_grader"
    python = _sandbox.reachable(sys.executable)
    guarded = ",".join(str(pid) for pid in settings.guarded)
    protected = "-" if settings.isolation == NAMESPACES else f"{guarded},{{runner_pid}}"
    boot = [python, "-I", "-B", str(scripts / "_kernel_boot.py"), str(lib), protected]
    boot += ["-f", "{connection_file}"]
    if settings.isolation != NAMESPACES:
        return boot
    plan = _sandbox.plan_for(
        folder / "root",
        read_only=[lib],
        writable=[folder / "scratch", folder / "home", folder / "run"],
        hidden=settings.hidden,
        argv=boot,
        skip=settings.skip,
    )
    plan_file = folder / "runner" / "sandbox.json"
    plan_file.write_text(json.dumps(dataclasses.asdict(plan)), encoding="utf-8")
    return _sandbox.command(python, scripts / "_sandbox.py", plan_file)


def _read_json(path: Path) -> Any:
    try:
        if path.stat().st_size > RECORD_LIMIT:
            return None
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # missing, cut short, or nested on purpose
        return None


def _run_text(how: str, folder: Path, limit: float, settings: Settings) -> str:
    if how == "stopped":
        return "the notebook stopped its grading process (SIGSTOP); it was killed"
    if how == "time":
        return f"stopped at the time limit ({limit:g} s for the whole run)"
    if how == "memory":
        return f"stopped: its processes held more than {settings.memory / 2**30:g} GiB of memory"
    if how == "disk":
        return (
            f"stopped: its files took more than {settings.disk / 2**30:g} GiB of disk "
            "(home, working and temporary folders together)"
        )
    if how == "output":
        return (
            f"stopped: its processes wrote more than {TERMINAL_LIMIT >> 20} MiB to the "
            "terminal (os.system, subprocesses), where no cell shows it"
        )
    if how != "exited":
        return f"the notebook's grading process was {how}"
    report = _read_json(folder / "runner" / "report.json")
    if isinstance(report, dict) and isinstance(report.get("run"), str):
        return report["run"][:500]
    try:
        log = (folder / "runner" / "log").read_text(errors="replace").strip().splitlines()
    except OSError:  # the notebook deleted its grading folder
        return "could not run: the grading folder of this submission was deleted during its run"
    return "could not run: " + (log[-1] if log else "no report")


def grade_submission(student: str, name: str, content: bytes, settings: Settings) -> list[Grade]:
    """The rows of one submission, one per exercise it holds; runs it when it holds any."""
    try:
        notebook = nbformat.reads(content.decode("utf-8"), as_version=4)
    except Exception as error:  # not a notebook at all
        return [Grade(student, name, "", "not checked", "", f"unreadable: {error}"[:500])]
    exercises = exercises_in(name, notebook)
    if not exercises:
        note = "no exercise found: name the file NN_... as the tutorial, or keep its check cells"
        return [Grade(student, name, "", "not checked", "", note)]
    names = answer_names(notebook)
    folder = Path(tempfile.mkdtemp(prefix="grade-"))
    try:
        run, record, seed = _run(notebook, names, folder, settings)
    finally:
        with contextlib.suppress(OSError):  # the library copy is read-only, and so may
            for path in folder.rglob("*"):  # be what a notebook made in its folders
                if path.is_dir() and not path.is_symlink():
                    path.chmod(0o755)
        shutil.rmtree(folder, ignore_errors=True)
    return [
        _row(student, name, exercise, record, names, run, notebook, seed) for exercise in exercises
    ]


def _run(
    notebook: Any, names: dict[str, str], folder: Path, settings: Settings
) -> tuple[str, Any, int]:
    """Runs the submission in `folder`: how the run went, the kernel's record, the seed."""
    for part in ("scratch", "home", "run", "runner", "root"):
        (folder / part).mkdir()
    settings.library.write(folder / "lib")
    prepared, numbers = _prepared(notebook)
    nbformat.write(prepared, folder / "runner" / "submission.ipynb")
    seed = secrets.randbits(63)
    answers = folder / "scratch" / "answers.json"
    harvest = (
        "from datarax_course.grading import harvest as _datarax_harvest\n"
        f"_datarax_harvest({names!r}, globals(), {seed}, {str(answers)!r})"
    )
    env = kernel_environment(folder)
    plan = {
        "notebook": str(folder / "runner" / "submission.ipynb"),
        "code_cells": numbers,
        "timeout": settings.timeout,
        "argv": _kernel_argv(folder, settings),
        "env": env,
        "folder": str(folder / "run"),
        "workdir": str(folder / "scratch"),
        "harvest": harvest,
        "report": str(folder / "runner" / "report.json"),
    }
    runner = [
        sys.executable,
        "-I",
        "-B",
        str(folder / "lib" / "datarax_grader" / "_kernel_run.py"),
    ]
    limit = 2 * settings.timeout + 60  # the cells, the checks, a kernel starting and stopping
    how = run_contained(
        runner,
        folder / "runner",
        env,
        limit,
        folder / "runner" / "log",
        json.dumps(plan).encode(),
        settings.memory,
        disk=settings.disk,
        folders=[folder / part for part in ("scratch", "home", "run")],
        output=TERMINAL_LIMIT,
    )
    run = _run_text(how, folder, limit, settings)
    return run, _read_json(answers), seed


def _row(
    student: str,
    name: str,
    exercise: str,
    record: Any,
    names: dict[str, str],
    run: str,
    notebook: Any,
    seed: int,
) -> Grade:
    """The row of one exercise, by the rule in `datarax_grader.grade`."""
    hints = hints_shown(notebook, exercise)
    answers = record.get("answers") if isinstance(record, dict) else None
    if exercise not in names or not isinstance(answers, dict) or exercise not in answers:
        why = "" if exercise in names else f'; no check("{exercise}", your_function) found'
        return Grade(student, name, exercise, "not checked", "", run + why, hints)
    devices = len(jax.devices())
    if record.get("devices") != devices:
        note = f"; the kernel had {record.get('devices')!r:.20} devices, the grader {devices}"
        return Grade(student, name, exercise, "not checked", "", run + note, hints)
    feedback = judged(exercise, answers[exercise], seed)
    if feedback is None:
        note = "; the values recorded in the kernel do not answer the checker's cases"
        return Grade(student, name, exercise, "not checked", "", run + note, hints)
    result = "checker error" if feedback.checker_bug else "right" if feedback.ok else "not yet"
    return Grade(student, name, exercise, result, str(feedback), run, hints)
