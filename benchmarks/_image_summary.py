"""The images case's results: means per candidate, ratios per round, the targets.

A run (`benchmarks.host_work_images`) records every candidate's epochs per round and
what kind of loader it is (``results["candidates"]``: pipeline, grain, grain-kept,
copy-put or copy-shard, and its worker count). Here a candidate's figure for a round is
the mean of that round's timed epochs, which all have the same number of batches: the
whole timed stretch's milliseconds per batch. A median of epochs would favour a loader
whose epochs are uneven: Grain's processes read up to 500 elements ahead, and their
first timed epochs (built up) alternate with fast ones (drained), 49, 6 and 6 ms a
batch on 2 cores. A ratio between candidates is taken within each round, and the
median over rounds is reported with its range. The best of a kind in a round is its
fastest candidate in that round.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
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
    ],
}
STAGE_MS_FOR_ONE_WORKER = 5.0  # the workers=1 target holds for stages at least this long


Figures = dict[str, list[float | None]]  # per candidate, per round: the mean of its epochs


def _round_means(results: dict[str, Any], key: str) -> Figures:
    return {
        name: [statistics.fmean(run[key]) if run and run[key] else None for run in runs]
        for name, runs in results["runs"].items()
    }


def _at(figures: Figures, name: str | None, at: int) -> float | None:
    """`name`'s figure in round `at`; None where it has none (not run, or failed)."""
    values = figures.get(name, []) if name else []
    return values[at] if at < len(values) else None


def _over(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator and denominator else None


def summarize(results: dict[str, Any]) -> dict[str, Any]:
    """Per candidate, per ratio and per target, from the runs in `results`."""
    kinds = results["candidates"]
    host, placed = _round_means(results, "host_ms"), _round_means(results, "placed_ms")
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

    def placed_over_bound(at: int) -> float | None:
        count = best("pipeline", placed, at)  # the worker count placed fastest this round
        ms, host_ms = _at(placed, count, at), _at(host, count, at)
        copy_ms = _at(placed, one("copy-shard"), at)
        return ms / max(host_ms, copy_ms) if ms and host_ms and copy_ms else None

    none = worker(0)
    ratios = {
        "over_grain": over_rounds(
            lambda at: _over(best_host("grain", at), best_host("pipeline", at))
        ),
        "over_kept": over_rounds(
            lambda at: _over(best_host("grain-kept", at), best_host("pipeline", at))
        ),
        "placed_over_bound": over_rounds(placed_over_bound),
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
        "best_over_ideal": over_rounds(lambda at: _over(best_host("pipeline", at), ideal)),
    }
    return {
        "summary": _per_candidate(results, gigabytes),
        "ratios": ratios,
        "targets": _targets(results, ratios),
        **_first_batches(results),
    }


def _per_candidate(results: dict[str, Any], gigabytes: float) -> dict[str, Any]:
    """Per candidate: the mean over every timed epoch of every round, with the fastest
    and slowest epoch; the first batch's median and range over rounds."""
    summary = {}
    for name, runs in results["runs"].items():
        done = [run for run in runs if run]
        if not done:
            continue
        row = {}
        for key in ("host_ms", "placed_ms"):
            epochs = [value for run in done for value in run[key]]
            row[key] = {"mean": statistics.fmean(epochs), "range": [min(epochs), max(epochs)]}
        halves = [statistics.fmean(run["host_ms"][len(run["host_ms"]) // 2 :]) for run in done]
        row["last_half_host_ms"] = statistics.fmean(halves)
        row["first_batch_s"] = spread([run["first_batch_s"] for run in done])
        row["run_s"] = spread([run.get("run_s", 0.0) for run in done])
        peaks = [note.get("peak_memory_gb", 0.0) for note in results.get("notes", {}).get(name, [])]
        row["peak_memory_gb"] = max(peaks, default=0.0)
        if results["candidates"][name]["kind"].startswith("copy"):
            row["gb_per_s"] = gigabytes / (row["placed_ms"]["mean"] / 1e3)
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
    seen = {run["first_batch"] for runs in results["runs"].values() for run in runs if run}
    seen.add(results["expected_first_batch"])
    return {"first_batches_agree": len(seen) == 1, "first_batch": sorted(seen)}


def _cell(row: dict[str, Any] | None, digits: int = 1) -> str:
    """A figure with its range: the mean where `row` has one, else the median."""
    if not row:
        return ""
    low, high = row["range"]
    middle = row.get("mean", row.get("median"))
    return f"{middle:.{digits}f} ({low:.{digits}f}-{high:.{digits}f})"


def markdown(results: dict[str, Any]) -> str:
    """One row per candidate: the first batch's and the whole run's median (range) over
    rounds, the mean ms per batch over every timed epoch of every round (fastest-slowest
    epoch) and over the last half of each round's host epochs, the speed over workers=0
    as the median (range) of per-round ratios, and the peak memory of any round."""
    lines = [
        "| candidate | first batch (s) | whole run (s) | host ms/batch | last half "
        "| host + placement ms/batch | host speed over workers=0 | peak memory (GB) |",
        "|" + " --- |" * 8,
    ]
    speeds = results["ratios"]["speed_over_workers_0"]
    for name in results["candidates"]:
        row = results["summary"].get(name)
        if row is None:
            failed = results["errors"].get(name, ["not run"])[0]
            lines.append(f"| {name} | failed: {failed} | | | | | | |")
            continue
        placed = _cell(row["placed_ms"])
        if "gb_per_s" in row:
            placed += f", {row['gb_per_s']:.2f} GB/s"
        cells = [name, _cell(row["first_batch_s"], 2), _cell(row["run_s"], 1)]
        cells += [_cell(row["host_ms"]), f"{row['last_half_host_ms']:.1f}", placed]
        cells += [_cell(speeds.get(name), 2), f"{row['peak_memory_gb']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def print_results(results: dict[str, Any]) -> None:
    stage = results["stage"]
    print(
        f"\n{results['images']} images of {results['image']} in batches of "
        f"{results['batch_size']} ({results['batches_per_epoch']} an epoch, "
        f"{results['batch_bytes'] / 1e6:.1f} MB); {results['cores']} cores, placement onto "
        f"{results['device']}; {results['rounds']} round(s) of {results['epochs']} + "
        f"{results['epochs']} timed epochs; load average {results['load_average_before']}"
        f" before, {results['load_average_after']} after\n"
    )
    print(markdown(results))
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
        note = said[-1] if said else {}  # the last round's
        if "processes_started" in note:
            print(
                f"{name}: {note['processes_with_settings']} of "
                f"{note['processes_started']} processes hold the allocator settings"
            )
        if note.get("workers_choice"):
            print(f"{name}: {note['workers_choice']}")
        if "time_report_ms" in note:
            parts = ", ".join(f"{part} {ms:.1f}" for part, ms in note["time_report_ms"].items())
            print(f"{name}, its time_report over {note['time_report_batches']} batches: {parts}")
    print("first batches agree:", results["first_batches_agree"], "; ".join(results["first_batch"]))
    for row in results["targets"]:
        verdict = {True: "PASS", False: "MISS", None: "n/a (stage under 5 ms)"}[row["pass"]]
        low, high = row["range"]
        print(
            f"{row['name']}: {row['value']:.3f} ({low:.3f}-{high:.3f}), "
            f"target {row['target']}: {verdict}"
        )
