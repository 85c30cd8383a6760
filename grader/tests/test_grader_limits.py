"""The grader's disk and terminal are bounded per submission, as its memory and time are,
and a limit that would limit nothing, or overflow, is refused at the command line."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import pytest

from datarax_grader import grade
from datarax_grader._contained import OUTPUT_KEPT, disk_bytes, run_contained

ROOT = Path(__file__).parents[2]
MIB = 1 << 20


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--timeout", "1e308"),  # every run "could not run: OverflowError"
        ("--timeout", "0.001"),
        ("--memory", "1e300"),  # a traceback once grading had begun
        ("--memory", "1e-12"),  # rounded to 0 bytes: no limit at all
        ("--disk", "1e300"),
        ("--disk", "0"),
        ("--disk", "nan"),
    ],
)
def test_a_limit_out_of_range_is_refused_at_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str
) -> None:
    started = time.monotonic()
    with pytest.raises(SystemExit) as stopped:
        grade.main([str(tmp_path), "--out", str(tmp_path.parent / "g.csv"), option, value])
    assert stopped.value.code == 2
    said = capsys.readouterr().err
    assert f"argument {option}: {option} must be a finite number of" in said, said
    assert " from " in said and repr(value) in said, said
    assert time.monotonic() - started < 5  # refused before any notebook or device


def _run(
    tmp_path: Path, script: str, disk: int = 0, folders: tuple[Path, ...] = (), output: int = 0
) -> tuple[str, Path, float]:
    """`script` run by run_contained under these limits; how it ended, its log, its
    seconds."""
    log = tmp_path / "log"
    started = time.monotonic()
    command = [sys.executable, "-c", script]
    how = run_contained(
        command, tmp_path, dict(os.environ), 60, log, disk=disk, folders=folders, output=output
    )
    return how, log, time.monotonic() - started


def test_a_flood_on_the_terminal_stops_the_run_and_the_log_keeps_its_ends(tmp_path: Path) -> None:
    flood = "import os; os.system('echo first; head -c 2000000000 /dev/zero; echo last')"
    how, log, took = _run(tmp_path, flood, output=64 * MIB)
    assert how == "output" and took < 30, (how, took)
    kept = log.read_bytes()
    assert kept.startswith(b"first\n") and len(kept) <= 2 * OUTPUT_KEPT + 100, len(kept)
    assert b"bytes of output left out]" in kept


def test_the_log_keeps_the_first_and_last_lines_of_a_long_output(tmp_path: Path) -> None:
    talk = "print('start'); print('x' * 50_000_000); print('the last line')"
    how, log, _ = _run(tmp_path, talk)
    kept = log.read_text()
    assert how == "exited" and kept.startswith("start\n") and kept.endswith("the last line\n")
    assert "[grading: 49,8" in kept and len(kept) <= 2 * OUTPUT_KEPT + 100, len(kept)


def test_files_past_the_allowance_stop_the_run(tmp_path: Path) -> None:
    folder = tmp_path / "home"
    folder.mkdir()
    writer = (  # 3 GiB in files of 64 MiB, as a notebook writing into its home would
        "import os\n"
        f"for number in range(48):\n"
        f"    with open(os.path.join({str(folder)!r}, f'part{{number}}'), 'wb') as part:\n"
        "        for _ in range(4):\n"
        "            part.write(bytes(16 << 20))\n"
        "print('all written')\n"
    )
    how, log, _ = _run(tmp_path, writer, disk=256 * MIB, folders=(folder,))
    assert how == "disk", (how, log.read_text()[-500:])
    assert "all written" not in log.read_text()
    assert disk_bytes([folder]) < 768 * MIB  # what it wrote between two counts at most


def test_no_process_of_a_run_writes_a_file_past_the_allowance(tmp_path: Path) -> None:
    target = tmp_path / "big"
    writer = (
        "import os, subprocess\n"
        f"subprocess.run(['sh', '-c', 'head -c 100000000 /dev/zero > {target}'])\n"
        "try:\n"
        f"    open({str(target)!r} + '-python', 'wb').write(bytes(100_000_000))\n"
        "except OSError as error:\n"
        "    print('refused:', error.strerror)\n"
    )
    how, log, _ = _run(tmp_path, writer, disk=16 * MIB, folders=(tmp_path / "elsewhere",))
    assert how == "exited" and "refused: File too large" in log.read_text(), log.read_text()
    assert target.stat().st_size <= 16 * MIB
    assert Path(f"{target}-python").stat().st_size <= 16 * MIB


NOTEBOOK_NAME = "07_performance.ipynb"
EXERCISE = "07.epoch_ms"
RIGHT = """\
def epoch_ms(step_ms, input_ms, steps, prefetch):
    if not prefetch:
        return steps * (step_ms + input_ms)
    return input_ms + step_ms + (steps - 1) * max(step_ms, input_ms)
"""
TERMINAL_FLOOD = "import os\nos.system('head -c 2000000000 /dev/zero')"
HOME_FILLER = """\
import os
for number in range(48):  # 3 GiB
    with open(os.path.expanduser(f"~/part{number}"), "wb") as part:
        for _ in range(4):
            part.write(bytes(16 << 20))
"""


def _notebook(before: str) -> nbformat.NotebookNode:
    cells = [
        nbformat.v4.new_code_cell("from datarax_course import check"),
        nbformat.v4.new_code_cell(before),
        nbformat.v4.new_code_cell(RIGHT),
        nbformat.v4.new_code_cell(f'check("{EXERCISE}", epoch_ms)'),
    ]
    return nbformat.v4.new_notebook(cells=cells)


@pytest.mark.notebooks
def test_a_notebook_cannot_fill_the_graders_disk_and_the_next_one_is_graded(
    tmp_path: Path,
) -> None:
    submissions, scratch = tmp_path / "submissions", tmp_path / "grader-tmp"
    scratch.mkdir()
    for student, before in [("a_flood", TERMINAL_FLOOD), ("b_home", HOME_FILLER), ("c_ok", "")]:
        (submissions / student).mkdir(parents=True)
        nbformat.write(_notebook(before), submissions / student / NOTEBOOK_NAME)
    peak, done_counting = [0], threading.Event()

    def count() -> None:  # the grader's own folders of each submission live in scratch
        while not done_counting.wait(0.05):
            peak[0] = max(peak[0], disk_bytes([scratch]))

    counter = threading.Thread(target=count, daemon=True)
    counter.start()
    out = tmp_path / "grades.csv"
    command = [sys.executable, "-m", "datarax_grader.grade", str(submissions)]
    try:
        done = subprocess.run(
            [*command, "--out", str(out), "--timeout", "60", "--memory", "2", "--disk", "0.25"],
            cwd=tmp_path,
            env={**os.environ, "TMPDIR": str(scratch), "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        done_counting.set()
        counter.join(timeout=10)
    assert done.returncode == 0, done.stderr[-3000:]
    with open(out, newline="") as file:
        rows = {row["student"]: row for row in csv.DictReader(file) if row["exercise"] == EXERCISE}
    assert "wrote more than 64 MiB to the terminal" in rows["a_flood"]["run"], rows
    assert "its files took more than 0.25 GiB of disk" in rows["b_home"]["run"], rows
    assert rows["c_ok"]["result"] == "right", rows
    # The library's copy and a kernel's folders, and 0.25 GiB of files at most, plus what
    # was written between two counts.
    assert peak[0] < 640 * MIB, f"the grader's folders held {peak[0] / MIB:.0f} MiB"
