"""The store benchmark keeps working: its ratios and targets follow the stated rules, its
page-cache tools see what is cached, and a tiny run measures every candidate, its reads
and its memory, and writes the targets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks._page_cache import cached_bytes, drop
from benchmarks._store_summary import summarize
from benchmarks.store import LOADS, candidates

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu"}


def _results(cores: int, rates: dict[str, float], data: dict | None = None) -> dict:
    chosen = candidates(2)
    runs = {name: [{"tokens_per_s": rates.get(name, 1.0), "fill": 1.0}] for name in chosen}
    for run in runs.values():
        run[0] |= {"first_batch_s": 1.0, "timed_batches": 10, "peak_rss_mb": 1.0}
        run[0] |= {"peak_tree_rss_mb": 1.0, "read_bytes_per_token": 2.0}
    return {"candidates": chosen, "runs": runs, "usable_cores": cores, "data": data or {}}


def _targets(summary: dict) -> dict[str, dict]:
    return {row["name"]: row for row in summary["targets"]}


def test_every_candidate_runs_with_no_workers_and_with_the_cores() -> None:
    chosen = candidates(2)

    assert len(chosen) == 2 * len(LOADS)
    assert chosen["ours-store concat in-order workers=2"] == {
        "loader": "ours-store",
        "method": "concat",
        "order": "in-order",
        "workers": 2,
    }
    assert set(candidates(0)) == {name for name in chosen if name.endswith("workers=0")}


def test_speed_ratios_take_each_side_at_its_best_worker_count() -> None:
    rates = {
        "ours-store concat in-order workers=0": 10.0,
        "ours-store concat in-order workers=2": 20.0,
        "ours-store concat shuffled workers=0": 18.0,
        "ours-store concat shuffled workers=2": 12.0,
        "ours-store first_fit shuffled workers=2": 9.0,
        "grain-streamed first_fit in-order workers=0": 3.0,
        "grain-streamed concat in-order workers=2": 10.0,
        "grain-arrayrecord first_fit shuffled workers=2": 2.0,
        "grain-arrayrecord concat shuffled workers=0": 6.0,
        "ours-parquet first_fit shuffled workers=0": 0.9,
        "ours-parquet first_fit shuffled workers=2": 0.5,
    }

    targets = _targets(summarize(_results(2, rates)))

    shuffle = targets[
        "concat: tokens/s, ours-store concat shuffled workers=0 / "
        "ours-store concat in-order workers=2"
    ]
    assert shuffle["value"] == pytest.approx(0.9) and shuffle["target"] == ">= 0.8"
    assert shuffle["pass"] and shuffle["counts"]
    streamed = targets[
        "first_fit: tokens/s, ours-store first_fit shuffled workers=2 / "
        "grain-streamed first_fit in-order workers=0"
    ]
    assert streamed["value"] == 3.0 and streamed["target"] == ">= 2" and streamed["pass"]
    streamed = targets[
        "concat: tokens/s, ours-store concat shuffled workers=0 / "
        "grain-streamed concat in-order workers=2"
    ]
    assert streamed["value"] == pytest.approx(1.8) and not streamed["pass"]
    array_record = targets[
        "first_fit: tokens/s, ours-store first_fit shuffled workers=2 / "
        "grain-arrayrecord first_fit shuffled workers=2"
    ]
    assert array_record["value"] == 4.5 and array_record["target"] == ">= 3"
    assert array_record["pass"]
    array_record = targets[
        "concat: tokens/s, ours-store concat shuffled workers=0 / "
        "grain-arrayrecord concat shuffled workers=0"
    ]
    assert array_record["value"] == 3.0 and array_record["pass"]  # the bound itself passes
    parquet = targets[
        "tokens/s, ours-parquet first_fit shuffled workers=0 / "
        "ours-store first_fit shuffled workers=2"
    ]
    assert parquet["value"] == pytest.approx(0.1) and parquet["target"] == "-"
    assert not parquet["counts"]


def test_writing_the_store_counts_building_the_documents_and_the_fdatasync() -> None:
    store = {"index_s": 1.0, "write_s": 2.0, "sync_s": 1.0, "s": 4.0}
    data = {"read_parquet": {"s": 1.8}, "store": store}

    summary = summarize(_results(2, {}, data))

    [write] = [row for row in summary["targets"] if row["name"].startswith("writing the store")]
    assert write["value"] == pytest.approx(0.45) and write["target"] == ">= 0.5"
    assert not write["pass"] and write["counts"]
    assert "Documents 1.00 + write 2.00 + fdatasync 1.00" in write["name"]
    [alone] = [row for row in summary["targets"] if "write_documents call alone" in row["name"]]
    assert alone["value"] == pytest.approx(0.9) and not alone["counts"]


def test_the_targets_count_on_two_cores_only_and_a_failed_candidate_is_left_out() -> None:
    results = _results(13, {})
    for name in results["runs"]:
        if name.startswith("grain-arrayrecord first_fit"):
            results["runs"][name] = [{"error": "killed: timeout"}]

    summary = summarize(results)

    assert summary["summary"]["grain-arrayrecord first_fit shuffled workers=0"] is None
    assert not any("grain-arrayrecord first_fit" in row["name"] for row in summary["targets"])
    assert any("grain-arrayrecord concat" in row["name"] for row in summary["targets"])
    assert all(not row["counts"] for row in summary["targets"])
    assert {row["note"] for row in summary["targets"] if row["target"] != "-"} == {
        "the targets are stated for 2 cores"
    }


def test_a_dropped_file_is_out_of_the_page_cache_until_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "tokens.bin"
    np.arange(300_000, dtype=np.int32).tofile(path)  # 1.2 MB: a last page part full

    drop([str(path)])
    assert cached_bytes([str(path)]) == 0
    path.read_bytes()
    assert cached_bytes([str(path)]) == path.stat().st_size


@pytest.mark.stress
def test_a_tiny_run_measures_every_candidate(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "benchmarks.store", "--tiny", "--out", str(tmp_path)]
    done = subprocess.run(
        [*command, "--label", "tiny"],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr

    results = json.loads((tmp_path / "store_tiny.json").read_text())
    names = set(candidates(1))
    assert results["partial"] is False and set(results["summary"]) == names
    for name in names:
        figures = results["summary"][name]
        assert figures is not None, results["runs"][name]
        assert figures["tokens_per_s"] > 0 and 0 < figures["fill"] <= 1
        assert figures["timed_batches"] > 0 and figures["peak_rss_mb"] > 0
        assert figures["read_bytes_per_token"] > 0 and figures["data_read_bytes_per_token"] > 0
        assert figures["rss_anon_mb"] > 0 and figures["rss_file_mb"] > 0
        assert f"| {name} |" in done.stdout  # the markdown table
    for run in (run for runs in results["runs"].values() for run in runs):
        assert run["cached_before_bytes"] == 0 and run["children_killed"] == 0
    # Every write timed, the store from the same documents as the Parquet.
    data = results["data"]
    for step in ("parquet", "read_parquet", "store", "array_record"):
        assert data[step]["s"] > 0 and data[step]["tokens"] == data["corpus"]["tokens"]
    assert data["plans"]["first_fit seeded"]["first_s"] > 0
    # What a quote of the run needs: the machine, the versions, the command, the targets.
    assert results["command"].startswith("python -m benchmarks.store --tiny --out")
    assert results["usable_cores"] >= 1 and results["load_average_before"]
    versions = results["versions"]
    assert all(versions[name] for name in ("jax", "grain", "numpy", "pyarrow", "array_record"))
    named = {row["name"].split(":")[0] for row in results["targets"] if row["target"] != "-"}
    assert named == {"concat", "first_fit", "writing the store from Parquet"}
    assert len([row for row in results["targets"] if row["target"] != "-"]) == 6
    for row in results["targets"]:
        verdict = "PASS" if row["pass"] else "MISS"
        verdict = verdict if row["target"] != "-" else "reference"
        assert (
            f"{row['name']}: {row['value']:.3f}, target {row['target']}: {verdict}" in done.stdout
        )


PAGE = REPO / "docs" / "benchmarks" / "README.md"
ROWS = {
    "ours, store, concat, in order": "ours-store concat in-order",
    "ours, store, concat, shuffled": "ours-store concat shuffled",
    "ours, store, first-fit, shuffled": "ours-store first_fit shuffled",
    "ours, Parquet, first-fit, shuffled": "ours-parquet first_fit shuffled",
    "Grain, streaming Parquet, first-fit": "grain-streamed first_fit in-order",
    "Grain, streaming Parquet, concat": "grain-streamed concat in-order",
    "Grain, ArrayRecord shuffled, first-fit": "grain-arrayrecord first_fit shuffled",
    "Grain, ArrayRecord shuffled, concat": "grain-arrayrecord concat shuffled",
}


@pytest.mark.parametrize(
    ("heading", "recorded", "workers"),
    [
        ("### The store on 2 cores", "store_two_core.json", 2),
        ("### The store on a TPU v5e host", "store_tpu_host.json", 12),
    ],
)
def test_the_benchmarks_page_quotes_the_recorded_rates(
    heading: str, recorded: str, workers: int
) -> None:
    """Each candidate's tokens a second on the page, at both worker counts, are its means
    in the recorded results, as the summary computes them."""
    section = PAGE.read_text().split(heading)[1].split("\n### ")[0]
    summary = summarize(json.loads((REPO / "docs" / "benchmarks" / recorded).read_text()))
    rates = summary["summary"]
    for label, name in ROWS.items():
        [line] = [row for row in section.splitlines() if row.startswith(f"| {label} |")]
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        for cell, count in zip(cells[1:3], (0, workers), strict=True):
            assert cell == f"{rates[f'{name} workers={count}']['tokens_per_s'] / 1e6:.2f}", (
                label,
                count,
            )
