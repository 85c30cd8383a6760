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
from typing import Any

import pytest

from benchmarks._epoch_timing import close_stream, time_run
from benchmarks._image_loaders import _with_environment, allocator_environment
from benchmarks._image_summary import refuse_earlier_rule, summarize

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu"}


def _run(module: str, *args: str, timeout: int) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", module, *args]
    done = subprocess.run(
        command, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done


class _Clock:
    """Seconds that pass only when a test says so, so the timing rule is checked
    without the machine's load in the figures."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_run_is_timed_from_its_first_batch_to_its_last_with_every_epoch_beside() -> None:
    clock = _Clock()
    made: list[int] = []
    finished: list[int] = []
    closed: list[bool] = []

    def stream() -> Iterator[int]:
        try:
            clock.now += 2.0  # the loader's start-up
            for batch in range(1000):
                clock.now += 0.1 * (batch + 1)  # each batch slower than the last
                made.append(batch)
                yield batch
        finally:
            closed.append(True)

    def check(batch: int) -> str:
        clock.now += 50.0  # the check's own time is on neither clock
        return str(batch)

    times = time_run(
        stream, batches_per_epoch=3, epochs=2, finish=finished.append, check=check, clock=clock
    )

    assert times.first_batch == "0" and times.first_batch_s == pytest.approx(2.1)
    assert made == finished == list(range(6))  # 2 whole epochs, every batch finished
    assert len(times.epoch_s) == len(times.epoch_ms) == 2 and times.batches == 6
    # Batches 1-2 close the first epoch, 3-5 the second: 0.2 + 0.3 and 0.4 + 0.5 + 0.6 s.
    assert times.epoch_s == pytest.approx([0.5, 1.5])
    assert times.first_to_last_s == pytest.approx(2.0)
    assert times.ms_per_batch == pytest.approx(2.0 / 5 * 1e3)
    assert times.epoch_ms == pytest.approx([0.5 / 2 * 1e3, 1.5 / 3 * 1e3])  # the first: after it
    assert closed == [True]  # the stream is closed: a loader's processes stop


def test_each_epoch_shows_a_loader_that_slows_down_as_its_read_ahead_drains() -> None:
    clock = _Clock()

    def stream() -> Iterator[int]:
        for batch in range(1000):
            clock.now += 0.0001 if batch < 4 else 0.01  # made ahead, then made as asked
            yield batch

    times = time_run(stream, batches_per_epoch=4, epochs=2, clock=clock)

    assert times.epoch_ms == pytest.approx([0.1, 10.0])
    assert times.ms_per_batch == pytest.approx((0.0003 + 0.04) / 7 * 1e3)


def test_a_run_of_fewer_than_two_batches_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 2 batches"):
        time_run(lambda: iter(range(10)), batches_per_epoch=1, epochs=1)


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
    assert set(case["records_per_s"]) == set(case["first_batch_s"]) == set(case["runs"]) == names
    for name in names:
        [rate], [first_batch_s] = case["records_per_s"][name], case["first_batch_s"][name]
        [run] = case["runs"][name]
        assert rate > 0 and first_batch_s == run["first_batch_s"] > 0
        # The rate is the run's, first batch to last: 2 x 32 - 1 batches of 128 after the first.
        assert rate == pytest.approx(63 * 128 / run["first_to_last_s"])
        assert len(run["epoch_ms"]) == 2 and run["first_to_last_s"] >= sum(run["epoch_s"]) - 1e-9
        assert f"round 1/1: {name}: " in done.stdout  # printed as soon as it is measured
    assert case["workers_over_none"] > 0 and case["pipeline_over_best_grain"] > 0
    assert "| ms per record (measured) | plain loop |" in done.stdout  # the markdown table


def _timed(ms: float) -> dict | None:
    """A made-up run of 2 epochs of 3 batches at `ms` a batch; None for 0 (not run)."""
    if not ms:
        return None
    return {
        "ms_per_batch": ms,
        "first_to_last_s": 5 * ms / 1e3,
        "epoch_ms": [ms, ms],
        "first_batch_s": 1.0,
        "first_batch": "same",
    }


def _results(preset: str, **candidates: tuple[Any, ...]) -> dict:
    """Results of a made-up run: per candidate its kind, workers, and per round its host
    ms a batch, then its placed ms (and prefetched ms, if given), first batch to last."""
    ways = ("host", "placed", "prefetched")
    return {
        "preset": preset,
        "batch_bytes": 40e6,
        "stage": {"ideal_ms": 5.0, "default_ms": 9.0},
        "expected_first_batch": "same",
        "candidates": {name: {"kind": c[0], "workers": c[1]} for name, c in candidates.items()},
        "runs": {
            name: [
                {way: _timed(ms) for way, ms in zip(ways, per_way, strict=False)}
                for per_way in zip(*c[2:], strict=True)
            ]
            for name, c in candidates.items()
        },
    }


def test_ratios_are_medians_of_per_round_ratios_of_the_best_of_each_kind() -> None:
    results = _results(
        "v5e",
        w0=("pipeline", 0, [100, 100, 100], [140, 140, 140], [150, 150, 150]),
        w4=("pipeline", 4, [20, 30, 10], [45, 30, 50], [21, 44, 12]),
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
    assert ratios["prefetched_over_bound"]["per_round"] == [21 / 20, 44 / 40, 12 / 10]
    assert ratios["shard_gb_per_s"]["per_round"] == [0.04 / 0.020, 0.04 / 0.040, 0.04 / 0.005]
    assert ratios["speed_over_workers_0"]["w4"]["per_round"] == [100 / 20, 100 / 30, 100 / 10]
    assert ratios["best_over_ideal"]["per_round"] == [20 / 5, 30 / 5, 10 / 5]


def test_each_preset_checks_its_own_targets() -> None:
    two_core = _results(
        "two-core",
        w0=("pipeline", 0, [10, 12], [11, 13], [12, 12]),
        w1=("pipeline", 1, [11, 10], [12, 11], [11, 10.5]),
        g1=("grain", 1, [13, 14], [20, 20]),
        shard=("copy-shard", 0, [0, 0], [2, 2]),
    )

    targets = {row["name"]: row for row in summarize(two_core)["targets"]}

    [over_grain, one_worker, placed, prefetched] = targets.values()
    assert over_grain["value"] == pytest.approx((13 / 10 + 14 / 10) / 2)
    assert over_grain["target"] == ">= 1.1" and over_grain["pass"] is True
    assert one_worker["value"] == pytest.approx((10 / 11 + 12 / 10) / 2)
    assert one_worker["pass"] is True
    assert placed["value"] == pytest.approx((11 / 10 + 11 / 10) / 2) and placed["pass"] is True
    assert prefetched["value"] == pytest.approx((11 / 11 + 10.5 / 10) / 2)
    assert prefetched["target"] == "<= 1.15"
    two_core["stage"]["default_ms"] = 4.0  # a stage under 5 ms: the target does not apply
    [_, short_stage, *_] = summarize(two_core)["targets"]
    assert short_stage["pass"] is None


def test_a_figure_is_the_run_from_first_batch_to_last_and_epochs_are_shown_beside() -> None:
    """A loader that reads far ahead makes uneven epochs; the whole run is its figure."""
    results = _results(
        "two-core",
        w2=("pipeline", 2, [11, 12], [11, 12]),
        g2=("grain", 2, [20, 22], [21, 23]),
    )
    for at, epochs in enumerate(([49.0, 6.0], [55.0, 8.0])):
        results["runs"]["g2"][at]["host"]["epoch_ms"] = epochs

    summary = summarize(results)

    assert summary["ratios"]["over_grain"]["per_round"] == [20 / 11, 22 / 12]
    row = summary["summary"]["g2"]["host"]
    assert row["ms_per_batch"] == {"median": 21.0, "range": [20, 22]}
    assert row["epoch_ms"] == [52.0, 7.0]  # each epoch's median over the rounds
    assert row["run_s"]["range"] == pytest.approx([1.0 + 5 * 0.020, 1.0 + 5 * 0.022])


def test_a_file_recorded_by_the_earlier_rule_is_refused_by_name(tmp_path: Path) -> None:
    earlier = {"runs": {"w0": [{"host_ms": [10.0], "placed_ms": [11.0], "first_batch_s": 1.0}]}}

    with pytest.raises(SystemExit, match=r"old\.json was recorded by the earlier rule"):
        refuse_earlier_rule(earlier, tmp_path / "old.json")
    refuse_earlier_rule(_results("v5e", w0=("pipeline", 0, [10], [11])), tmp_path / "new.json")


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
    close_stream(stream)

    assert seen == [True, True, True]
    assert {name: os.environ.get(name) for name in environment} == before
    assert notes == {"processes_started": 0, "processes_with_settings": 0}


# Batches of 8 rows: placed over the 8 simulated CPU devices, a row on each.
TINY = ["--images", "24", "--side", "32", "--batch-size", "8", "--epochs", "2"]


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
    ways = {name: ["host", "placed"] for name in grain} | {name: ["placed"] for name in copies}
    ways |= {name: ["host", "placed", "prefetched"] for name in pipelines}
    for name in names:
        [run] = results["runs"][name]
        assert list(run) == results["candidates"][name]["ways"] == ways[name]
        for way, timed in run.items():
            # Each way a run of 2 epochs of 3 batches, timed from its first batch to its
            # last; its epochs add up to that stretch and lie beside it.
            assert timed["batches"] == 6 and len(timed["epoch_ms"]) == len(timed["epoch_s"]) == 2
            assert timed["first_to_last_s"] >= sum(timed["epoch_s"]) - 1e-9
            assert timed["first_to_last_s"] == pytest.approx(sum(timed["epoch_s"]))
            assert timed["ms_per_batch"] == pytest.approx(timed["first_to_last_s"] / 5 * 1e3)
            assert timed["first_batch_s"] > 0
            summary = results["summary"][name][way]
            assert summary["ms_per_batch"]["median"] == timed["ms_per_batch"]
            assert summary["epoch_ms"] == timed["epoch_ms"]
            assert f"| {name} | {way} | " in done.stdout  # the epochs' table
        assert 0 < results["summary"][name]["peak_memory_gb"] < results["memory_bound_gb"]
        assert f"| {name} |" in done.stdout  # the markdown table
    assert results["first_batches_agree"], results["first_batch"]
    assert results["first_batch"] == [results["expected_first_batch"]]
    assert results["first_batch"][0].startswith("uint8[8, 32, 32, 3]")
    assert results["batches_per_epoch"] == 3 and results["batch_bytes"] == 8 * 32 * 32 * 3 + 32
    assert results["placement"] == {"devices": 8, "device_kind": "cpu", "platform": "cpu"}
    # What the benchmarks page quotes: the stage alone and the ideal line, every copy's
    # GB/s, the allocator settings seen in Grain's processes, the targets with a verdict.
    stage = results["stage"]
    assert stage["default_ms"] > 0 and stage["kept_ms"] > 0
    assert stage["ideal_ms"] == stage["kept_ms"] / stage["usable_cores"]
    assert all(results["summary"][name]["gb_per_s"] > 0 for name in copies)
    [kept] = results["notes"]["Grain per batch, kept memory workers=1"]
    for way in ("host", "placed"):
        assert kept[way]["processes_started"] >= 1
        assert kept[way]["processes_with_settings"] == kept[way]["processes_started"]
    [auto] = results["notes"]["Pipeline workers=auto"]
    assert auto["host"]["workers_choice"].startswith("workers='auto' chose")
    assert set(auto["host"]["time_report_ms"]) >= {"read", "stages", "move", "wait", "step"}
    assert auto["placed"]["time_report_ms"]["place"] > 0  # Pipeline(sharding=) placed them
    assert len(results["targets"]) == 4
    for row in results["targets"]:
        verdict = "PASS" if row["pass"] else "MISS"
        assert f"{row['name']}: {row['value']:.3f}" in done.stdout
        assert f"target {row['target']}: {verdict}" in done.stdout
    assert results["command"].startswith("python -m benchmarks.host_work_images --images 24")


@pytest.mark.stress
def test_the_two_core_preset_runs_its_case_and_its_targets(tmp_path: Path) -> None:
    out = tmp_path / "two_core.json"
    arguments = ["--preset", "two-core", *TINY, "--rounds", "1", "--grain-ways", "--out", str(out)]
    _run("benchmarks.host_work_images", *arguments, timeout=400)

    results = json.loads(out.read_text())
    assert results["preset"] == "two-core" and results["workers"] == ["0", "1", "2"]
    assert [row["name"] for row in results["targets"]] == [
        "2 cores: workers=1 / workers=0 (speed), stage >= 5 ms",
        "2 cores: Pipeline(sharding=) ms at the best count / max(host ms, copy ms)",
        "2 cores: prefetch_to_device ms at the best count / max(host ms, copy ms)",
    ]  # no Grain run: its ratio has no data, so it is not reported
    assert results["ratios"]["best_count_placed"][0].startswith("Pipeline workers=")


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


def test_without_smaps_rollup_the_watch_counts_the_machines_used_memory_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gVisor gives no smaps_rollup: there the measure is MemTotal - MemAvailable, not the
    processes' resident sizes (which count a shared page in every process that maps it)."""
    from benchmarks import _memory_guard

    (tmp_path / "self").mkdir()
    (tmp_path / "meminfo").write_text(
        "MemTotal:       41943040 kB\nMemFree:         1000 kB\nMemAvailable:   31457280 kB\n"
    )
    monkeypatch.setattr(_memory_guard, "PROC", tmp_path)
    assert _memory_guard.measure() == "machine"
    assert _memory_guard.tree_memory() == (41943040 - 31457280) * 1024
    (tmp_path / "self" / "smaps_rollup").write_text("Pss:  1 kB\n")
    assert _memory_guard.measure() == "pss"
