"""The host-work benchmarks keep working: their timing rule counts what it says, the
images case's ratios and targets are what its docs say they are, and a tiny run of each
case, every candidate in it, writes the results that docs/benchmarks/README.md quotes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks._epoch_timing import time_epochs
from benchmarks._image_loaders import _with_environment, allocator_environment
from benchmarks._image_summary import summarize

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu"}


def _run(module: str, *args: str, timeout: int) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", module, *args]
    done = subprocess.run(
        command, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


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


@pytest.mark.stress
def test_a_tiny_records_run_times_every_candidate_by_epochs(tmp_path: Path) -> None:
    out = tmp_path / "records.json"
    arguments = ["--costs", "0.01", "--workers", "0", "1", "--rounds", "1", "--epochs", "2"]
    done = _run("benchmarks.host_work_records", *arguments, "--out", str(out), timeout=400)

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


def _results(preset: str, **candidates: tuple[str, int, list[float], list[float]]) -> dict:
    """Results of a made-up run: per candidate its kind, workers, and per round its host
    and placed ms (one epoch each)."""
    return {
        "preset": preset,
        "batch_bytes": 40e6,
        "stage": {"ideal_ms": 5.0, "default_ms": 9.0},
        "expected_first_batch": "same",
        "candidates": {name: {"kind": c[0], "workers": c[1]} for name, c in candidates.items()},
        "runs": {
            name: [
                {
                    "host_ms": [host],
                    "placed_ms": [placed],
                    "first_batch_s": 1.0,
                    "first_batch": "same",
                }
                for host, placed in zip(c[2], c[3], strict=True)
            ]
            for name, c in candidates.items()
        },
    }


def test_ratios_are_medians_of_per_round_ratios_of_the_best_of_each_kind() -> None:
    results = _results(
        "v5e",
        w0=("pipeline", 0, [100, 100, 100], [140, 140, 140]),
        w4=("pipeline", 4, [20, 30, 10], [45, 30, 50]),
        g4=("grain", 4, [40, 90, 30], [90, 90, 90]),
        r4=("grain", 4, [60, 45, 20], [90, 90, 90]),
        k4=("grain-kept", 4, [25, 30, 5], [90, 90, 90]),
        put=("copy-put", 0, [0, 0, 0], [40, 40, 40]),
        shard=("copy-shard", 0, [0, 0, 0], [20, 40, 5]),
    )

    ratios = summarize(results)["ratios"]

    # Round by round: Grain's best host ms (of both its ways) over Pipeline's best.
    assert ratios["over_grain"]["per_round"] == [40 / 20, 45 / 30, 20 / 10]
    assert ratios["over_grain"]["median"] == 2.0
    assert ratios["over_kept"]["per_round"] == [25 / 20, 30 / 30, 5 / 10]
    # The count placed fastest in each round, against max(its host ms, the copy's ms).
    assert ratios["best_count_placed"] == ["w4", "w4", "w4"]
    assert ratios["placed_over_bound"]["per_round"] == [45 / 20, 30 / 40, 50 / 10]
    assert ratios["shard_gb_per_s"]["per_round"] == [0.04 / 0.020, 0.04 / 0.040, 0.04 / 0.005]
    assert ratios["speed_over_workers_0"]["w4"]["per_round"] == [100 / 20, 100 / 30, 100 / 10]
    assert ratios["best_over_ideal"]["per_round"] == [20 / 5, 30 / 5, 10 / 5]


def test_each_preset_checks_its_own_targets() -> None:
    two_core = _results(
        "two-core",
        w0=("pipeline", 0, [10, 12], [11, 13]),
        w1=("pipeline", 1, [11, 10], [12, 11]),
        g1=("grain", 1, [13, 14], [20, 20]),
    )

    targets = {row["name"]: row for row in summarize(two_core)["targets"]}

    [over_grain, one_worker] = targets.values()
    assert over_grain["value"] == pytest.approx((13 / 10 + 14 / 10) / 2)
    assert over_grain["target"] == ">= 1.1" and over_grain["pass"] is True
    assert one_worker["value"] == pytest.approx((10 / 11 + 12 / 10) / 2)
    assert one_worker["pass"] is True
    two_core["stage"]["default_ms"] = 4.0  # a stage under 5 ms: the target does not apply
    [_, short_stage] = summarize(two_core)["targets"]
    assert short_stage["pass"] is None


def test_grain_gets_the_allocator_settings_only_while_its_stream_runs() -> None:
    environment = allocator_environment()
    assert set(environment) == {
        "MALLOC_MMAP_THRESHOLD_",
        "MALLOC_TRIM_THRESHOLD_",
        "MALLOC_TOP_PAD_",
    }
    # Our workers' default, as docs/benchmarks/README.md quotes it: 1 GiB, 1 GiB, 64 MiB.
    assert int(environment["MALLOC_MMAP_THRESHOLD_"]) == 2**30
    assert int(environment["MALLOC_TRIM_THRESHOLD_"]) == 2**30
    assert int(environment["MALLOC_TOP_PAD_"]) == 64 * 2**20
    before = {name: os.environ.get(name) for name in environment}
    seen: list[bool] = []

    def opened() -> Iterator[int]:
        for batch in range(5):
            seen.append(all(os.environ.get(k) == v for k, v in environment.items()))
            yield batch

    notes: dict = {}
    stream = _with_environment(environment, opened, notes)
    assert [next(stream) for _ in range(3)] == [0, 1, 2]
    stream.close()

    assert seen == [True, True, True]
    assert {name: os.environ.get(name) for name in environment} == before
    assert notes == {"processes_started": 0, "processes_with_settings": 0}


TINY = ["--images", "12", "--side", "32", "--batch-size", "4", "--epochs", "1"]


@pytest.mark.stress
def test_a_tiny_images_run_measures_every_candidate(tmp_path: Path) -> None:
    out = tmp_path / "images.json"
    arguments = [*TINY, "--workers", "0", "1", "auto", "--out", str(out)]
    done = _run("benchmarks.host_work_images", *arguments, timeout=400)

    results = json.loads(out.read_text())
    pipelines = {f"Pipeline workers={n}" for n in ("0", "1", "auto")}
    grain = {f"Grain per {way} workers={n}" for way in ("batch", "record") for n in (0, 1)}
    grain.add("Grain per batch, kept memory workers=1")
    copies = {"placement alone: jax.device_put", "placement alone: ArraySharder.shard"}
    names = pipelines | grain | copies
    assert results["partial"] is False and results["errors"] == {}
    assert set(results["runs"]) == set(results["summary"]) == names
    for name in names:
        [run] = results["runs"][name]
        assert len(run["host_ms"]) == len(run["placed_ms"]) == 1
        assert run["run_s"] > run["first_batch_s"] > 0
        row = results["summary"][name]
        assert row["last_half_host_ms"] == run["host_ms"][0]  # one epoch: its own half
        assert 0 < row["peak_memory_gb"] < results["memory_bound_gb"]
        assert f"| {name} |" in done.stdout  # the markdown table
    assert results["first_batches_agree"], results["first_batch"]
    assert results["first_batch"] == [results["expected_first_batch"]]
    assert results["first_batch"][0].startswith("uint8[4, 32, 32, 3]")
    assert results["batches_per_epoch"] == 3 and results["batch_bytes"] == 4 * 32 * 32 * 3 + 16
    # What the benchmarks page quotes: the stage alone and the ideal line, every copy's
    # GB/s, the allocator settings seen in Grain's processes, the targets with a verdict.
    stage = results["stage"]
    assert stage["default_ms"] > 0 and stage["kept_ms"] > 0
    assert stage["ideal_ms"] == stage["kept_ms"] / stage["usable_cores"]
    assert all(results["summary"][name]["gb_per_s"] > 0 for name in copies)
    [kept] = results["notes"]["Grain per batch, kept memory workers=1"]
    assert kept["processes_started"] >= 1
    assert kept["processes_with_settings"] == kept["processes_started"]
    [auto] = results["notes"]["Pipeline workers=auto"]
    assert auto["workers_choice"].startswith("workers='auto' chose")
    assert set(auto["time_report_ms"]) >= {"read", "stages", "move", "wait", "step"}
    assert len(results["targets"]) == 4
    for row in results["targets"]:
        verdict = "PASS" if row["pass"] else "MISS"
        assert f"{row['name']}: {row['value']:.3f}" in done.stdout
        assert f"target {row['target']}: {verdict}" in done.stdout
    assert results["command"].startswith("python -m benchmarks.host_work_images --images 12")


@pytest.mark.stress
def test_the_two_core_preset_runs_its_case_and_its_targets(tmp_path: Path) -> None:
    out = tmp_path / "two_core.json"
    arguments = ["--preset", "two-core", *TINY, "--rounds", "1", "--grain-ways", "--out", str(out)]
    _run("benchmarks.host_work_images", *arguments, timeout=400)

    results = json.loads(out.read_text())
    assert results["preset"] == "two-core" and results["workers"] == ["0", "1", "2"]
    assert {row["name"] for row in results["targets"]} == {
        "2 cores: workers=1 / workers=0 (speed), stage >= 5 ms"
    }  # no Grain run: its ratio has no data, so it is not reported


def test_a_round_counts_every_timed_epoch_not_the_median_one() -> None:
    """A loader that reads far ahead makes uneven epochs (49, 6 and 6 ms a batch for
    Grain with 2 processes on 2 cores); the whole timed stretch is what it delivered."""
    results = _results(
        "two-core",
        w0=("pipeline", 0, [22], [22]),
        w2=("pipeline", 2, [11], [11]),
        g2=("grain", 2, [0], [0]),
    )
    results["runs"]["g2"][0]["host_ms"] = [49.0, 6.0, 6.0]
    results["runs"]["w2"][0]["host_ms"] = [10.0, 11.0, 12.0]

    summary = summarize(results)

    assert summary["ratios"]["over_grain"]["per_round"] == [pytest.approx((49 + 6 + 6) / 33)]
    assert summary["summary"]["g2"]["host_ms"] == {"mean": pytest.approx(61 / 3), "range": [6, 49]}


# Run in a process of its own, whose tree holds nothing else: a test worker's tree can hold
# processes of earlier tests that end while this one runs (their memory leaving the tree's
# sum), and its heap memory that earlier tests freed and keep_freed_memory() kept resident.
_BOUNDED = """
import json, mmap, time
from benchmarks._memory_guard import MemoryBoundError, Watch, tree_memory, watched
held, watch, stopped = [], Watch(), None
bound = tree_memory() + 64 * 2**20
page = b"\\x01" * 8 * 2**20
try:
    with watched("Grain per batch workers=4", bound, watch):
        for _ in range(100):  # up to 800 MB, 8 MB every 10 ms: the watcher stops it first
            block = mmap.mmap(-1, len(page))  # fresh pages, written: resident
            block.write(page)
            held.append(block)
            time.sleep(0.01)
except MemoryBoundError as error:
    stopped = str(error)
blocks = len(held)
held.clear()
quiet = Watch()
with watched("placement alone", 0, quiet):  # no bound: watched, never stopped
    time.sleep(0.3)
print(json.dumps({"stopped": stopped, "watch": [watch.stopped, watch.peak > bound],
                  "blocks": blocks, "quiet": [quiet.stopped, quiet.peak > 0]}))
"""


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_a_candidate_past_the_memory_bound_is_stopped_and_named(sigint: str) -> None:
    """Also where the process starts with SIGINT ignored, as a shell's background job does."""
    ignore = "import signal; signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
    done = subprocess.run(
        [sys.executable, "-c", (ignore if sigint == "ignored" else "") + _BOUNDED],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["stopped"] and "Grain per batch workers=4 was stopped" in seen["stopped"], seen
    assert seen["watch"] == [True, True], seen
    assert seen["blocks"] < 100, seen  # stopped, not finished
    assert seen["quiet"] == [False, True], seen
