"""Grading a class's notebooks: one command, one CSV row per student and exercise.

::

    datarax-grade SUBMISSIONS_DIR --out grades.csv --timeout 120
    python -m datarax_grader SUBMISSIONS_DIR --out grades.csv   # the same

`SUBMISSIONS_DIR` holds the submitted notebooks, either one folder per student
(``alice/03_uneven_batches.ipynb``: the student is the folder's name) or files directly
in it (``alice.ipynb``: the student is the file's name); ``.IPYNB`` counts as
``.ipynb``. A student folder (or file) without a notebook gets a row saying what was
found. Every submission is read into memory before the first one runs, and ``--out``
is checked and written (its header) before then too. Each submission, one after the
other (`datarax_grader._submission`):

1. loses its cells tagged ``solution`` and runs top to bottom in a fresh kernel, with
   errors allowed and a time limit; the kernel imports a fresh read-only copy of the
   library without the answer keys, has a home of its own, and runs in namespaces of
   its own where the machine allows (`datarax_grader._sandbox`), else behind a
   seccomp filter (`datarax_grader._seccomp`); when it ends, stops, or runs out of
   time, memory, disk (its folders' files, and any one file) or terminal output
   (`datarax_grader._contained`), every process it started is killed;
2. after the notebook, and only then, the kernel gets a secret seed and the checkers
   call the student's functions on cases drawn from it, recording what they returned;
3. is judged by this rule: **an exercise's result is its checker's verdict, computed in
   the grader's process with the answer keys, on the cases drawn from that seed, on the
   values that the function named in the notebook's last ``check("NN.name", function)``
   call returned**. Nothing else the kernel prints, writes or claims counts.

The CSV, rewritten whole after each submission, has the columns `FIELDS`: ``result`` is
``right``, ``not yet``, ``not checked`` (no values to judge) or ``checker error``;
``feedback`` is the verdict with the checker's idea as hint; ``run`` says how the run
went ("in code cell 7" counts code cells only); ``hints`` is the furthest hint the
submitted notebook's saved outputs show for that exercise, or its checks ask for
(``hint=2``): ``none``, ``idea`` or ``method``. A value that a spreadsheet would read as
a formula (starting with ``=``, ``+``, ``-`` or ``@``) gets a leading apostrophe.
docs/teaching.md says what each isolation protects, and what it does not.
"""

from __future__ import annotations

import sys

try:  # the tutorials extra's: a missing one is said in one line, with the pip command
    import nbclient  # noqa: F401
    import nbformat  # noqa: F401
except ImportError as missing:
    said = (
        f"datarax-grade needs {missing.name}, which is not installed: "
        "pip install 'datarax-sharding[tutorials]' (or pip install ./grader)"
    )
    if __name__ == "__main__":
        sys.exit(said)
    raise ImportError(said) from missing

import argparse
import csv
import ctypes
import dataclasses
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import psutil

import datarax
import datarax_course
import datarax_grader
from datarax.distributed import setup_devices
from datarax_course import grading
from datarax_grader import _sandbox
from datarax_grader._integrity import Library, changed_since_install, differences, snapshot
from datarax_grader._reading import submissions
from datarax_grader._submission import NAMESPACES, SECCOMP, Grade, Settings, grade_submission

# The packages a graded kernel imports (each copied fresh, read-only, for every
# submission), with the distribution that installed each one.
PACKAGES = (
    (datarax, "datarax-sharding"),
    (datarax_course, "datarax-sharding"),
    (datarax_grader, "datarax-grader"),
)
FIELDS = ("student", "notebook", "exercise", "result", "feedback", "run", "hints")
DEFAULT_MEMORY_GIB = 6.0
DEFAULT_DISK_GIB = 1.0
# What each limit may be: a kernel with JAX needs about 0.4 GiB and a second to start,
# and no run is given more than a day, or more memory or disk than a large machine has.
TIMEOUT_S = (1.0, 86_400.0)
MEMORY_GIB = (0.5, 4096.0)
DISK_GIB = (0.05, 4096.0)
_PR_SET_DUMPABLE, _PR_SET_CHILD_SUBREAPER = 4, 36  # from <linux/prctl.h>


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
    out.parent.mkdir(parents=True, exist_ok=True)  # a notebook may have deleted it
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


def _between(option: str, unit: str, low: float, high: float, example: str) -> Any:
    """The type of an option whose value is a number of `unit` from `low` to `high`: a
    limit that would stop every run, limit nothing, or not fit the system's clocks and
    counters is refused before anything runs.

    Example:
        >>> _between("--timeout", "seconds", 1, 86_400, "120")("90")
        90.0
    """

    def read(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not low <= value <= high:  # nan and the infinities included
            raise argparse.ArgumentTypeError(
                f"{option} must be a finite number of {unit} from {low:,g} to {high:,g}, "
                f"such as {example}; got {text!r}"
            )
        return value

    return read


def _isolation(asked: str) -> tuple[str, str]:
    """(isolation, a line saying what it means) for ``--isolation`` `asked`."""
    with tempfile.TemporaryDirectory(prefix="grade-probe-") as folder:
        why_not = _sandbox.probe(sys.executable, Path(_sandbox.__file__), Path(folder))
    if why_not is None and asked != SECCOMP:
        return NAMESPACES, (
            "isolation: each kernel runs in user, mount, PID and network namespaces of its "
            "own, seeing only the system, Python and its own folders"
        )
    if asked == NAMESPACES:
        raise SystemExit(
            f"--isolation namespaces: this machine does not let the kernel run in namespaces "
            f"({why_not}); see docs/teaching.md, or use --isolation seccomp"
        )
    why = "as asked" if asked == SECCOMP else f"namespaces are not available here: {why_not}"
    return SECCOMP, (
        f"isolation: each kernel runs as you, behind a seccomp filter ({why}); it can read "
        "what you can read and write what you can write: see docs/teaching.md"
    )


def _lineage() -> list[int]:
    """This process and those it runs under (its shell...), init aside.

    Example:
        >>> _lineage()[0] == os.getpid() and os.getppid() in [*_lineage(), 0, 1]
        True
    """
    try:
        above = [process.pid for process in psutil.Process().parents()]
    except psutil.Error:  # the process table cannot be read: this process alone
        above = []
    return [pid for pid in (os.getpid(), *above) if pid > 1]


def _prctl(option: int, value: int) -> bool:
    """Linux's ``prctl(option, value)`` for this process (no library offers it): whether
    it was done; False elsewhere."""
    try:
        return ctypes.CDLL(None).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):  # no C library to load, or no prctl in it
        return False


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="datarax-grade",
        description="Run every submitted notebook without its solution cells and write "
        "one CSV row per student and exercise.",
    )
    parser.add_argument("submissions", type=Path, help="folder of submitted notebooks")
    parser.add_argument("--out", type=Path, default=Path("grades.csv"), help="CSV to write")
    parser.add_argument(
        "--timeout",
        type=_between("--timeout", "seconds", *TIMEOUT_S, "120"),
        default=120,
        help="seconds a notebook may run (default 120)",
    )
    parser.add_argument(
        "--memory",
        type=_between("--memory", "GiB", *MEMORY_GIB, "6"),
        default=DEFAULT_MEMORY_GIB,
        help=f"GiB a submission's processes may hold together (default {DEFAULT_MEMORY_GIB:g})",
    )
    parser.add_argument(
        "--disk",
        type=_between("--disk", "GiB", *DISK_GIB, "1"),
        default=DEFAULT_DISK_GIB,
        help="GiB a submission's files may take in its home, working and temporary folders "
        f"together, and the largest file it may write (default {DEFAULT_DISK_GIB:g})",
    )
    parser.add_argument(
        "--isolation",
        choices=("auto", NAMESPACES, SECCOMP),
        default="auto",
        help="namespaces where the machine allows them (auto, the default), or insist",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """The command line: grades a folder of submissions into a CSV file."""
    parser = _parser()
    args = parser.parse_args(argv)
    if not args.submissions.is_dir():
        parser.error(f"{args.submissions} is not a folder of notebooks")
    problem = _out_problem(args.out, args.submissions)
    if problem:
        parser.error(problem)
    packages = [Path(module.__file__ or "").resolve().parent for module, _ in PACKAGES]
    changed = [
        path
        for (_, distribution), package in zip(PACKAGES, packages, strict=True)
        for path in changed_since_install(distribution, package)
    ]
    if changed:
        parser.error(
            f"the installed grader or library differs from what pip installed "
            f"({', '.join(changed[:3])}); reinstall them (pip install --force-reinstall "
            "datarax-sharding ./grader) before grading"
        )
    sys.dont_write_bytecode = True  # so that only a submission could change the installation
    out = args.out.resolve()
    write_csv([], out)
    found = submissions(args.submissions)
    os.environ["JAX_PLATFORMS"] = "cpu"  # the grader's devices are the kernels': 8 on the CPU
    setup_devices(8)
    grading.load_keys()
    # Orphans among the kernels' processes become the grader's children, so their runs'
    # containment finds them (`datarax_grader._contained`); and no other process of this
    # user may read the grader's memory (the answer keys).
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    _prctl(_PR_SET_DUMPABLE, 0)
    isolation, said = _isolation(args.isolation)
    print(said, file=sys.stderr, flush=True)
    folders = sorted({package.parent for package in packages})
    checkouts = [
        folder for folder in folders if folder.name not in ("site-packages", "dist-packages")
    ]
    settings = Settings(
        timeout=args.timeout,
        memory=int(args.memory * 2**30),
        disk=int(args.disk * 2**30),
        isolation=isolation,
        library=Library.of(packages, left_out=(grading.keys_file().name,)),
        hidden=[*packages, *(f / "tutorials" for f in folders), args.submissions, out.parent],
        skip=checkouts,
        guarded=_lineage(),
    )
    before = snapshot(skip=packages) if isolation == SECCOMP else {}
    grades: list[Grade] = []
    spoiled = ""
    for submission in found:
        print(f"grading {submission.student}: {submission.name}", file=sys.stderr, flush=True)
        if submission.content is None:
            grades.append(
                Grade(submission.student, submission.name, "", "not checked", "", submission.note)
            )
        elif spoiled:
            grades.append(
                Grade(submission.student, submission.name, "", "not checked", "", spoiled)
            )
        else:
            grades += grade_submission(
                submission.student, submission.name, submission.content, settings
            )
            if before and (paths := differences(before, snapshot(skip=packages))):
                spoiled = (
                    f"not run: while {submission.student}'s notebook ran, files this Python "
                    f"runs changed ({', '.join(paths)}); check them, then grade the rest again"
                )
        try:
            write_csv(grades, out)
        except OSError as error:
            print(f"could not write {out} yet: {error}", file=sys.stderr, flush=True)
    write_csv(grades, out)
    right = sum(grade.result == "right" for grade in grades)
    print(f"{len(grades)} rows, {right} right, in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
