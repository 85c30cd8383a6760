"""The host-work benchmark's images case keeps working: its timing rule counts what it
says, and a tiny run of every candidate writes the results it promises."""

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
