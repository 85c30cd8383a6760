"""The host-work benchmark keeps working: its timing rule counts what it says, and a
tiny run of each case, every candidate in it, writes the results it promises."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from benchmarks._epoch_timing import time_epochs

REPO = Path(__file__).resolve().parents[1]


def test_the_clock_starts_after_the_first_epoch_and_placed_epochs_come_last() -> None:
    made: list[int] = []
    placed: list[int] = []
    closed: list[bool] = []

    def stream() -> Iterator[int]:
        try:
            for batch in range(1000):
                made.append(batch)
                yield batch
        finally:
            closed.append(True)

    times = time_epochs(stream, batches_per_epoch=3, epochs=2, place=placed.append, check=str)

    assert times.first_batch == "0"
    assert len(times.host_ms) == len(times.placed_ms) == 2
    assert made == list(range(3 + 2 * 3 + 2 * 3))  # the first epoch, then 2 + 2 timed
    assert placed == list(range(9, 15))  # only the last two epochs' batches
    assert closed == [True]  # the stream is closed: a loader's processes stop


def test_without_place_only_host_epochs_are_timed() -> None:
    times = time_epochs(lambda: iter(range(1000)), batches_per_epoch=4, epochs=3)

    assert len(times.host_ms) == 3 and times.placed_ms == []


def test_a_tiny_records_run_times_every_candidate_by_epochs(tmp_path: Path) -> None:
    out = tmp_path / "records.json"
    command = [sys.executable, "-m", "benchmarks.host_work_records", "--costs", "0.01"]
    command += ["--workers", "0", "1", "--rounds", "1", "--epochs", "2", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout + done.stderr

    results = json.loads(out.read_text())
    assert results["epochs"] == 2 and results["rounds"] == 1
    [case] = results["cases"]
    names = {"plain loop", "Pipeline workers=0", "Pipeline workers=1"}
    names |= {"Grain default", "Grain 2 threads", "Grain mp_prefetch 1", "Grain mp_prefetch 2"}
    assert set(case["records_per_s"]) == set(case["first_batch_s"]) == names
    for name in names:
        [rate], [first_batch_s] = case["records_per_s"][name], case["first_batch_s"][name]
        assert rate > 0 and first_batch_s > 0
        assert f"round 1/1: {name}: " in done.stdout  # printed as soon as it is measured
    assert case["workers_over_none"] > 0 and case["pipeline_over_best_grain"] > 0
    assert "| ms per record (measured) | plain loop |" in done.stdout  # the markdown table


def test_a_tiny_images_run_measures_every_candidate(tmp_path: Path) -> None:
    out = tmp_path / "images.json"
    command = [sys.executable, "-m", "benchmarks.host_work", "--case", "images"]
    command += ["--images", "12", "--batch-size", "4", "--workers", "0", "1"]
    command += ["--passes", "1", "--epochs", "1", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr

    results = json.loads(out.read_text())
    names = {"Pipeline workers=0", "Pipeline workers=1", "Grain workers=0", "Grain workers=1"}
    assert results["partial"] is False and results["errors"] == {}
    assert set(results["summary"]) == names | {"placement alone"}
    assert results["first_batches_agree"], results["first_batch"]
    assert results["first_batch"][0].startswith("uint8[4, 224, 224, 3]")
    assert results["batches_per_epoch"] == 3 and results["passes"] == 1
    for name in names:
        runs = results["runs"][name]
        assert len(runs) == 1 and len(runs[0]["host_ms"]) == len(runs[0]["placed_ms"]) == 1
    assert "| Pipeline workers=1 |" in done.stdout
