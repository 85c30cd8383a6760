"""The images case's results: figures per candidate and way, ratios per round, the targets.

A run (`benchmarks.host_work_images`) records, per candidate and round, one timed run of
each of its ways (host, placed, prefetched; `benchmarks._epoch_timing`), and what kind
of loader it is (``results["candidates"]``: pipeline, grain, grain-kept, copy-put or
copy-shard, and its worker count). A candidate's figure for a way in a round is that
run's milliseconds a batch from its first batch to its last. A ratio between
candidates is taken within each round, and the median over rounds is reported with its
range. The best of a kind in a round is its fastest candidate in that round.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks._host_work import spread

Relation = tuple[str, str, str, float]  # name, ratio key, ">=" or "<=", bound
TARGETS: dict[str, list[Relation]] = {
    "v5e": [
        ("host only: Pipeline best / Grain best as its docs write it", "over_grain", ">=", 2),
        ("host only: Pipeline best / Grain best, our allocator settings", "over_kept", ">=", 1),
        ("placed ms at the best count / max(host ms, copy ms)", "placed_over_bound", "<=", 1.15),
        ("one batch through ArraySharder.shard, GB/s", "shard_gb_per_s", ">=", 8),
    ],
    "two-core": [
        ("2 cores: Pipeline best / Grain best as its docs write it", "over_grain", ">=", 1.1),
        ("2 cores: workers=1 / workers=0 (speed), stage >= 5 ms", "one_over_none", ">=", 1.0),
        (
            "2 cores: Pipeline(sharding=) ms at the best count / max(host ms, copy ms)",
            "placed_over_bound",
            "<=",
            1.15,
        ),
        (
            "2 cores: prefetch_to_device ms at the best count / max(host ms, copy ms)",
            "prefetched_over_bound",
            "<=",
            1.15,
        ),
    ],
}
STAGE_MS_FOR_ONE_WORKER = 5.0  # the workers=1 target holds for stages at least this long
WAYS = ("host", "placed", "prefetched")

Figures = dict[str, list[float | None]]  # per candidate, per round: ms a batch, first to last


def refuse_earlier_rule(results: dict[str, Any], path: Path) -> None:
    """Stops with a clear message where `results` were recorded by the earlier rule
    (epochs timed after an untimed first one), which has no first-to-last times."""
    for runs in results.get("runs", {}).values():
        for run in runs:
            if run and "host_ms" in run:
                raise SystemExit(
                    f"{path} was recorded by the earlier rule (a window of epochs after "
                    "an untimed first one) and holds no time from the first batch to the "
                    "last: run the benchmark again to record one by this rule."
                )


def _figures(results: dict[str, Any], way: str) -> Figures:
    def figure(run: dict[str, Any] | None) -> float | None:
        timed = (run or {}).get(way)
        return timed["ms_per_batch"] if timed else None

    return {name: [figure(run) for run in runs] for name, runs in results["runs"].items()}


def _at(figures: Figures, name: str | None, at: int) -> float | None:
    """`name`'s figure in round `at`; None where it has none (not run, or failed)."""
    values = figures.get(name, []) if name else []
    return values[at] if at < len(values) else None


def _over(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator and denominator else None


def summarize(results: dict[str, Any]) -> dict[str, Any]:
    """Per candidate, per ratio and per target, from the runs in `results`."""
    kinds = results["candidates"]
    host, placed, prefetched = (_figures(results, way) for way in WAYS)
    rounds = max((len(runs) for runs in results["runs"].values()), default=0)
    gigabytes, ideal = results["batch_bytes"] / 1e9, results["stage"]["ideal_ms"]

    def named(kind: str) -> list[str]:
        return [name for name, about in kinds.items() if about["kind"] == kind]

    def one(kind: str) -> str | None:
        return next(iter(named(kind)), None)

    def worker(count: int) -> str | None:
        return next((n for n in named("pipeline") if kinds[n]["workers"] == count), None)

    def best(kind: str, figures: Figures, at: int) -> str | None:
        done = [name for name in named(kind) if _at(figures, name, at)]
        return min(done, key=lambda name: _at(figures, name, at) or 0.0) if done else None

    def best_host(kind: str, at: int) -> float | None:
        return _at(host, best(kind, host, at), at)

    def over_rounds(ratio: Callable[[int], float | None]) -> dict[str, Any] | None:
        values = [value for at in range(rounds) if (value := ratio(at)) is not None]
        return {**spread(values), "per_round": values} if values else None

    def over_bound(figures: Figures) -> Callable[[int], float | None]:
        def ratio(at: int) -> float | None:
            count = best("pipeline", figures, at)  # the worker count fastest this way
            ms, host_ms = _at(figures, count, at), _at(host, count, at)
            copy_ms = _at(placed, one("copy-shard"), at)
            return ms / max(host_ms, copy_ms) if ms and host_ms and copy_ms else None

        return ratio

    none = worker(0)
    ratios = {
        "over_grain": over_rounds(
            lambda at: _over(best_host("grain", at), best_host("pipeline", at))
        ),
        "over_kept": over_rounds(
            lambda at: _over(best_host("grain-kept", at), best_host("pipeline", at))
        ),
        "placed_over_bound": over_rounds(over_bound(placed)),
        "prefetched_over_bound": over_rounds(over_bound(prefetched)),
        "shard_gb_per_s": over_rounds(
            lambda at: _over(gigabytes * 1e3, _at(placed, one("copy-shard"), at))
        ),
        "put_gb_per_s": over_rounds(
            lambda at: _over(gigabytes * 1e3, _at(placed, one("copy-put"), at))
        ),
        "one_over_none": over_rounds(
            lambda at: _over(_at(host, none, at), _at(host, worker(1), at))
        ),
        "speed_over_workers_0": {
            name: over_rounds(lambda at, name=name: _over(_at(host, none, at), _at(host, name, at)))
            for name in named("pipeline")
            if name != none
        },
        "best_count_placed": [best("pipeline", placed, at) for at in range(rounds)],
        "best_count_prefetched": [best("pipeline", prefetched, at) for at in range(rounds)],
        "best_over_ideal": over_rounds(lambda at: _over(best_host("pipeline", at), ideal)),
    }
    return {
        "summary": _per_candidate(results, gigabytes),
        "ratios": ratios,
        "targets": _targets(results, ratios),
        **_first_batches(results),
    }


def _per_candidate(results: dict[str, Any], gigabytes: float) -> dict[str, Any]:
    """Per candidate and way over rounds: the ms a batch first to last, the seconds to
    the first batch and the whole run's, median (range); each epoch's ms a batch, the
    median over rounds; and the candidate's peak memory."""
    summary = {}
    for name, runs in results["runs"].items():
        row: dict[str, Any] = {}
        for way in WAYS:
            done = [run[way] for run in runs if run and run.get(way)]
            if not done:
                continue
            epochs = zip(*(timed["epoch_ms"] for timed in done), strict=True)
            row[way] = {
                "ms_per_batch": spread([timed["ms_per_batch"] for timed in done]),
                "first_batch_s": spread([timed["first_batch_s"] for timed in done]),
                "run_s": spread([t["first_batch_s"] + t["first_to_last_s"] for t in done]),
                "epoch_ms": [statistics.median(epoch) for epoch in epochs],
            }
        if not row:
            continue
        peaks = [note.get("peak_memory_gb", 0.0) for note in results.get("notes", {}).get(name, [])]
        row["peak_memory_gb"] = max(peaks, default=0.0)
        if results["candidates"][name]["kind"].startswith("copy") and "placed" in row:
            row["gb_per_s"] = gigabytes / (row["placed"]["ms_per_batch"]["median"] / 1e3)
        summary[name] = row
    return summary


def _targets(results: dict[str, Any], ratios: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for name, key, relation, bound in TARGETS.get(results["preset"], []):
        ratio = ratios[key]
        if ratio is None:
            continue  # its candidates were not run
        row = {"name": name, "value": ratio["median"], "range": ratio["range"]}
        row["target"] = f"{relation} {bound:g}"
        value = ratio["median"]
        row["pass"] = value >= bound if relation == ">=" else value <= bound
        if key == "one_over_none" and results["stage"]["default_ms"] < STAGE_MS_FOR_ONE_WORKER:
            row["pass"] = None  # the target holds for stages of 5 ms or more only
        rows.append(row)
    return rows


def _first_batches(results: dict[str, Any]) -> dict[str, Any]:
    seen = {
        timed["first_batch"]
        for runs in results["runs"].values()
        for run in runs
        if run
        for timed in run.values()
        if timed and timed["first_batch"]
    }
    seen.add(results["expected_first_batch"])
    return {"first_batches_agree": len(seen) == 1, "first_batch": sorted(seen)}


def _cell(row: dict[str, Any] | None, digits: int = 1) -> str:
    """A median with its range."""
    if not row:
        return ""
    low, high = row["range"]
    return f"{row['median']:.{digits}f} ({low:.{digits}f}-{high:.{digits}f})"


def markdown(results: dict[str, Any]) -> str:
    """One row per candidate, each way's ms a batch from the first batch to the last and
    the host run's seconds to its first batch and whole run, median (range) over rounds;
    the host speed over workers=0 as the median (range) of per-round ratios; the peak
    memory of any round."""
    lines = [
        "| candidate | first batch (s) | whole host run (s) | host ms/batch | placed ms/batch "
        "| prefetched ms/batch | host speed over workers=0 | peak memory (GB) |",
        "|" + " --- |" * 8,
    ]
    speeds = results["ratios"]["speed_over_workers_0"]
    for name in results["candidates"]:
        row = results["summary"].get(name)
        if row is None:
            failed = results["errors"].get(name, ["not run"])[0]
            lines.append(f"| {name} | failed: {failed} | | | | | | |")
            continue
        started = row.get("host") or row.get("placed") or {}
        cells = [
            name,
            _cell(started.get("first_batch_s"), 2),
            _cell(row.get("host", {}).get("run_s")),
        ]
        cells += [_cell(row.get(way, {}).get("ms_per_batch")) for way in WAYS]
        if "gb_per_s" in row:
            cells[4] += f", {row['gb_per_s']:.2f} GB/s"
        cells += [_cell(speeds.get(name), 2), f"{row['peak_memory_gb']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def epochs_markdown(results: dict[str, Any]) -> str:
    """One row per candidate and way: each epoch's ms a batch, the median over rounds."""
    lines = ["| candidate | way | each epoch, ms a batch |", "|" + " --- |" * 3]
    for name, row in results["summary"].items():
        for way in WAYS:
            if way in row:
                epochs = ", ".join(f"{ms:.1f}" for ms in row[way]["epoch_ms"])
                lines.append(f"| {name} | {way} | {epochs} |")
    return "\n".join(lines)


def print_results(results: dict[str, Any]) -> None:
    stage, placement = results["stage"], results["placement"]
    print(
        f"\n{results['images']} images of {results['image']} in batches of "
        f"{results['batch_size']} ({results['batches_per_epoch']} an epoch, "
        f"{results['batch_bytes'] / 1e6:.1f} MB); {results['cores']} cores, placement onto "
        f"{placement['devices']} {placement['platform']} device(s); {results['rounds']} "
        f"round(s), each way a run of {results['epochs']} epochs timed from its first "
        f"batch to its last; load average {results['load_average_before']} before, "
        f"{results.get('load_average_after', 'not recorded (a run cut short)')} after\n"
    )
    print(markdown(results))
    print()
    print(epochs_markdown(results))
    print(
        f"\nthe stage in one process: {stage['default_ms']:.1f} ms a batch, "
        f"{stage['kept_ms']:.1f} ms keeping freed memory; ideal line (kept / "
        f"{stage['usable_cores']} cores): {stage['ideal_ms']:.1f} ms a batch"
    )
    ratios = results["ratios"]
    for key, what in (
        ("best_over_ideal", "Pipeline best host ms / ideal"),
        ("put_gb_per_s", "one batch through jax.device_put, GB/s"),
    ):
        if ratios[key]:
            print(f"{what}: {_cell(ratios[key], 2)}")
    for name, said in results["notes"].items():
        last = said[-1] if said else {}  # the last round's
        for way in WAYS:
            note, which = last.get(way, {}), f"{name} ({way})"
            if "processes_started" in note:
                print(
                    f"{which}: {note['processes_with_settings']} of "
                    f"{note['processes_started']} processes hold the allocator settings"
                )
            if note.get("workers_choice"):
                print(f"{which}: {note['workers_choice']}")
            if "time_report_ms" in note:
                report = note["time_report_ms"]
                parts = ", ".join(f"{part} {ms:.1f}" for part, ms in report.items())
                print(f"{which}, time_report over {note['time_report_batches']} batches: {parts}")
    print("first batches agree:", results["first_batches_agree"], "; ".join(results["first_batch"]))
    for row in results["targets"]:
        verdict = {True: "PASS", False: "MISS", None: "n/a (stage under 5 ms)"}[row["pass"]]
        low, high = row["range"]
        print(
            f"{row['name']}: {row['value']:.3f} ({low:.3f}-{high:.3f}), "
            f"target {row['target']}: {verdict}"
        )
