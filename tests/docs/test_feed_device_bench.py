"""The device feed benchmark's tiny mode runs on CPU and records every candidate."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.stress  # about 30 s: a process per candidate
REPO = Path(__file__).resolve().parents[2]


def test_tiny_mode_times_every_candidate(tmp_path: Path) -> None:
    environment = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "benchmarks.feed_device", "--preset", "tiny"]
    subprocess.run(
        [*command, "--out", str(tmp_path)], cwd=REPO, env=environment, check=True, timeout=300
    )
    results = json.loads((tmp_path / "feed_device.json").read_text())
    runs = results["runs"]
    assert "copy" in runs and runs["copy"]["gb_per_s"]["ArraySharder.shard"] > 0
    timed = {name: run for name, run in runs.items() if name != "copy"}
    assert {"images Pipeline workers=1 placed", "tokens Pipeline workers=1 host"} <= set(timed)
    for name, run in timed.items():
        assert "error" not in run, (name, run)
        assert len(run["epoch_ms"]) == len(run["epoch_s"]) == 2 and run["first_batch_s"] > 0
        # Timed from the first batch to the last; the epochs add up to that stretch.
        assert run["first_to_last_s"] >= sum(run["epoch_s"]) - 1e-9
        assert run["first_to_last_s"] == pytest.approx(sum(run["epoch_s"]))
        assert run["ms_per_batch"] == pytest.approx(
            run["first_to_last_s"] / (run["batches"] - 1) * 1e3
        )
    assert any("placed / max(host, copy)" in name for name in results["ratios"])
