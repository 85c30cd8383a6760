"""Tutorial 07's cells that measure the machine hold on every machine: where a counter
reads 0 (page faults, CPU time, the load average), where there is 1 core or 13, and where
the kernel has no transparent huge pages, as on a TPU v5e host. Each test runs the
lesson's own cells, taken from its text, with what they read from the machine faked,
and checks that what they print is what the figures say. The figures the lesson quotes
from the TPU records are the recorded ones."""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import pathlib
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jupytext
import matplotlib.pyplot as plt
import numpy as np
import pytest

ROOT = Path(__file__).parents[2]
LESSON = ROOT / "tutorials/07_performance.md"
HUGE_PAGES = "/sys/kernel/mm/transparent_hugepage/enabled"


def _cells(first: str, last: str) -> str:
    """The lesson's code cells from the first one holding `first` to the next one
    holding `last`, as one piece of code."""
    cells = [cell.source for cell in jupytext.read(LESSON).cells if cell.cell_type == "code"]
    start = next(number for number, source in enumerate(cells) if first in source)
    stop = next(number for number in range(start, len(cells)) if last in cells[number])
    return "\n".join(cells[start : stop + 1])


def _run(code: str, namespace: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> str:
    """What `code` prints, run in `namespace`; its figures drawn nowhere."""
    monkeypatch.setattr(plt, "show", lambda *args, **kwargs: None)
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            exec(code, namespace)
    finally:
        plt.close("all")
    return printed.getvalue()


# Cores and load ------------------------------------------------------------------------


@pytest.mark.parametrize("cores", [1, 2, 13, None])
@pytest.mark.parametrize("load", [0.0, 0.7, 1.9, 20.0, None])
def test_the_cores_and_the_load_are_told_as_they_are(
    cores: int | None, load: float | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def loadavg() -> tuple[float, float, float]:
        if load is None:
            raise OSError("no load average here")
        return (load, load, load)

    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    monkeypatch.setattr(os, "getloadavg", loadavg)
    printed = _run(_cells("os.getloadavg", "os.getloadavg"), {"os": os}, monkeypatch)
    counted = cores or 1
    assert printed.startswith(f"{counted} CPU core"), printed
    assert ("none idle" in printed) == (bool(load) and load >= counted), printed
    idle = re.search(r"about ([\d.]+) of them idle", printed)
    if idle:
        assert load and load < counted and float(idle.group(1)) == round(counted - load, 1)
    if load == 0.0:
        assert "does not count" in printed, printed


# How many passes make a batch of about 30 ms -------------------------------------------


def test_the_pass_count_survives_timings_that_do_not_grow(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One pass and five timed alike (a coarse or jittery clock): a pass count all the
    same, not a ZeroDivisionError."""
    namespace: dict[str, Any] = {
        "np": np,
        "rng": np.random.default_rng(0),
        "median_seconds": lambda run, repeats=7: 0.004,
    }
    saved_path = list(sys.path)
    try:
        printed = _run(_cells("augment07.py", "passes:"), namespace, monkeypatch)
    finally:
        sys.path[:] = saved_path
        sys.modules.pop("augment07", None)
        namespace["stage_folder"].cleanup()
    assert namespace["passes"] >= 1 and "passes:" in printed, printed


# Page faults and huge pages --------------------------------------------------------------


def _faking_the_runs(
    monkeypatch: pytest.MonkeyPatch, runs: dict[str, Any], huge: str | None
) -> None:
    """The two child processes of the page-fault cell answer `runs` ({label: (ms a batch,
    faults a batch)}); the huge-page setting reads `huge` (None: no such file)."""

    def run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess:
        labels = (
            ["no huge pages", "keep_freed_memory()"] if "then kept" in command else ["defaults"]
        )
        lines = "".join(f"{runs[label][0]} {runs[label][1]}\n" for label in labels)
        return subprocess.CompletedProcess(command, 0, stdout=lines, stderr="")

    exists, read_text = pathlib.Path.exists, pathlib.Path.read_text

    def exists_here(self: Path, *args: Any, **kwargs: Any) -> bool:
        return huge is not None if str(self) == HUGE_PAGES else exists(self, *args, **kwargs)

    def read_here(self: Path, *args: Any, **kwargs: Any) -> str:
        return f"{huge}\n" if str(self) == HUGE_PAGES else read_text(self, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", run)
    monkeypatch.setattr(pathlib.Path, "exists", exists_here)
    monkeypatch.setattr(pathlib.Path, "read_text", read_here)


def _fault_cells(monkeypatch: pytest.MonkeyPatch) -> str:
    namespace = {"np": np, "plt": plt, "os": os, "sys": sys, "Path": Path}
    namespace["textwrap"] = __import__("textwrap")
    return _run(_cells("FAULTS = ", "modes = list(stage_ms)"), namespace, monkeypatch)


def test_a_kernel_that_counts_no_page_faults_and_has_no_huge_pages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A TPU v5e host: getrusage reads 0 faults in every run, and there is no
    transparent_hugepage setting; the times alone are reported."""
    runs = {"defaults": (212.0, 0), "no huge pages": (210.0, 0), "keep_freed_memory()": (75.0, 0)}
    _faking_the_runs(monkeypatch, runs, huge=None)
    printed = _fault_cells(monkeypatch)
    assert "no such setting in this kernel" in printed, printed
    assert "counts no page faults" in printed and "a fault (" not in printed, printed
    assert "keeping freed memory saved 135.0 ms of 210.0" in printed, printed


def test_page_faults_counted_with_4_kib_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = {
        "defaults": (18.5, 581),
        "no huge pages": (28.1, 10801),
        "keep_freed_memory()": (12.9, 0),
    }
    _faking_the_runs(monkeypatch, runs, huge="always [madvise] never")
    printed = _fault_cells(monkeypatch)
    assert "transparent huge pages: always [madvise] never" in printed, printed
    assert f"about {(28.1 - 12.9) / 10801 * 1e3:.2f} us a fault" in printed, printed


def test_huge_pages_given_without_asking(monkeypatch: pytest.MonkeyPatch) -> None:
    """THP on `always`: few faults even when numpy does not ask, and no fault cost printed
    from a difference of a few faults."""
    runs = {"defaults": (15.0, 22), "no huge pages": (15.2, 22), "keep_freed_memory()": (15.1, 0)}
    _faking_the_runs(monkeypatch, runs, huge="[always] madvise never")
    printed = _fault_cells(monkeypatch)
    assert "huge pages anyway" in printed and "a fault (" not in printed, printed


def test_no_time_saved_is_said_so(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = {"defaults": (15.0, 0), "no huge pages": (15.0, 0), "keep_freed_memory()": (15.6, 0)}
    _faking_the_runs(monkeypatch, runs, huge=None)
    printed = _fault_cells(monkeypatch)
    assert "saved no time here (0.6 ms more" in printed, printed


# Workers: the sentence the figures decide ------------------------------------------------

WORKERS = {  # wall s a batch by workers, this process's CPU s a batch, a worker's s, cores
    "2 busy cores": ({0: 0.0311, 2: 0.0358}, {0: 0.028, 2: 0.001}, 0.052, 2),
    "13 idle cores": ({0: 0.028, 2: 0.0146}, {0: 0.028, 2: 0.001}, 0.029, 13),
    "1 core": ({0: 0.028, 2: 0.061}, {0: 0.028, 2: 0.001}, 0.056, 1),
    "no CPU time counted": ({0: 0.028, 2: 0.0146}, {0: 0.0, 2: 0.0}, 0.029, 13),
    "workers as fast, batches not": ({0: 0.028, 2: 0.030}, {0: 0.028, 2: 0.001}, 0.028, 2),
}


@pytest.mark.parametrize("case", sorted(WORKERS))
def test_the_workers_verdict_is_the_figures(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    wall, cpu, in_worker_s, cores = WORKERS[case]
    namespace = {
        "wall": wall,
        "cpu": cpu,
        "in_worker_s": in_worker_s,
        "work_s": 0.028,
        "cores": cores,
        "busy": "load average 1.9: about 0.1 of them idle",
    }
    printed = _run(_cells("gain = wall[0] / wall[2]", "gain ="), namespace, monkeypatch)
    gain = wall[0] / wall[2]
    assert f"{gain:.2f} times as fast" in printed, printed
    assert ("side by side" in printed) == (gain >= 1.2), printed
    assert ("no gain here" in printed) == (gain < 1.05), printed
    if cores == 1:
        assert "one core" in printed, printed
    if case == "2 busy cores":
        assert "shared cores" in printed, printed
    if case == "no CPU time counted":
        assert "counts no CPU time" in printed, printed
    if case == "workers as fast, batches not":
        assert "time report below" in printed, printed


# Figures quoted from the TPU records ----------------------------------------------------


def _dict_in_lesson(name: str) -> dict[str, Any]:
    """The dict of recorded figures the lesson writes out as `name = {...}`."""
    code = _cells(f"{name} = {{", f"{name} = {{")
    found = re.search(rf"{name} = (\{{.*?\n\}})", code, re.S)
    assert found, f"tutorial 07 no longer holds {name}"
    return ast.literal_eval(found[1])


def _text() -> str:
    return "\n".join(cell.source for cell in jupytext.read(LESSON).cells)


def test_the_pinned_and_pageable_ranges_are_the_recorded_ones() -> None:
    layouts = json.loads((ROOT / "docs/benchmarks/tpu_link.json").read_text())["layouts"]
    pinned = [found["pinned GB/s"] for found in layouts.values()]
    pageable = [found["pageable GB/s"] for found in layouts.values()]
    quoted = re.search(
        r"crossed at ([\d.]+) to ([\d.]+) GB/s in the four\s+shapes, against ([\d.]+) to "
        r"([\d.]+) GB/s from pageable memory",
        _text(),
    )
    assert quoted, "tutorial 07 no longer quotes the pinned and pageable ranges"
    assert [float(n) for n in quoted.groups()] == [
        round(min(pinned), 2),
        round(max(pinned), 2),
        round(min(pageable), 2),
        round(max(pageable), 2),
    ]
    first = layouts["uint8 (256, 3, 224, 224)"]["pageable GB/s"]
    assert f"crossed from pageable memory at {first:.2f} GB/s" in " ".join(_text().split())


def test_the_layouts_the_lesson_reads_are_the_recorded_ones() -> None:
    layouts = json.loads((ROOT / "docs/benchmarks/tpu_link.json").read_text())["layouts"]
    recorded = {}
    for name, found in layouts.items():
        order = re.search(r"major_to_minor=\(([\d, ]+)\)", found["layout"])
        tile = re.search(r"tiling=\(\((\d+), (\d+)\)", found["layout"])
        assert order and tile, found["layout"]
        recorded[name] = (
            tuple(int(n) for n in order.group(1).split(",")),
            (int(tile.group(1)), int(tile.group(2))),
        )
    quoted = _dict_in_lesson("recorded_v5e_layouts")
    named = {  # the lesson's names for the record's shapes
        "uint8 (256, 224, 224, 3)": "uint8 (256, 224, 224, 3)",
        "the same bytes, flat (256, 150528)": "uint8 (256, 150528)",
        "uint8 (256, 3, 224, 224)": "uint8 (256, 3, 224, 224)",
        "float32 (64, 224, 224, 3), 38.5 MB": "float32 (64, 224, 224, 3)",
    }
    assert {name: recorded[named[name]] for name in quoted} == quoted


def test_the_copy_times_the_lesson_draws_are_the_recorded_ones() -> None:
    copies = json.loads((ROOT / "docs/benchmarks/tpu_copy.json").read_text())["copies"]
    quoted = _dict_in_lesson("recorded_tpu_v5e_ms")
    for name, ms in quoted.items():
        recorded = copies[name.replace("shard,", "ArraySharder.shard,")]["ms"]
        assert ms == round(recorded, 1), (name, ms, recorded)
