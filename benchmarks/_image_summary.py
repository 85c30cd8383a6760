"""The images case's results: medians per candidate, ratios per round, the targets.

A run (`benchmarks.host_work_images`) records every candidate's epochs per round and
what kind of loader it is (``results["candidates"]``: pipeline, grain, grain-kept,
copy-put or copy-shard, and its worker count). Here a candidate's figure for a round is
the median of that round's epochs; a ratio between candidates is taken within each
round, and the median over rounds is reported with its range. The best of a kind in a
round is its fastest candidate in that round.
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


def _round_medians(results: dict[str, Any], key: str) -> dict[str, list[float | None]]:
    return {
        name: [statistics.median(run[key]) if run and run[key] else None for run in runs]
        for name, runs in results["runs"].items()
    }


def summarize(results: dict[str, Any]) -> dict[str, Any]:
    """Per candidate, per ratio and per target, from the runs in `results`."""
    kinds = results["candidates"]
    host, placed = _round_medians(results, "host_ms"), _round_medians(results, "placed_ms")
    rounds = max((len(runs) for runs in results["runs"].values()), default=0)
    gigabytes = results["batch_bytes"] / 1e9

    def named(kind: str) -> list[str]:
        return [name for name, about in kinds.items() if about["kind"] == kind]

    def best(kind: str, figures: dict[str, list[float | None]], at: int) -> str | None:
        done = [name for name in named(kind) if at < len(figures[name]) and figures[name][at]]
        return min(done, key=lambda name: figures[name][at] or 0.0) if done else None

    def over_rounds(ratio: Callable[[int], float | None]) -> dict[str, Any] | None:
        values = [value for at in range(rounds) if (value := ratio(at)) is not None]
        return {**spread(values), "per_round": values} if values else None

    def faster(slow_kind: str, fast_kind: str) -> Callable[[int], float | None]:
        def ratio(at: int) -> float | None:
            slow, fast = best(slow_kind, host, at), best(fast_kind, host, at)
            return host[slow][at] / host[fast][at] if slow and fast else None  # type: ignore[operator]

        return ratio

    def worker(count: int | str) -> str | None:
        return next((n for n in named("pipeline") if kinds[n]["workers"] == count), None)

    def speed_over(base: str | None, name: str | None) -> Callable[[int], float | None]:
        def ratio(at: int) -> float | None:
            if base is None or name is None or at >= len(host[name]) or at >= len(host[base]):
                return None
            pair = host[base][at], host[name][at]
            return pair[0] / pair[1] if pair[0] and pair[1] else None

        return ratio

    def placed_over_bound(at: int) -> float | None:
        count, copies = best("pipeline", placed, at), named("copy-shard")
        copy = placed[copies[0]][at] if copies and at < len(placed[copies[0]]) else None
        if count is None or copy is None or not host[count][at]:
            return None
        return placed[count][at] / max(host[count][at], copy)  # type: ignore[arg-type, operator]

    def gb_per_s(kind: str) -> Callable[[int], float | None]:
        def ratio(at: int) -> float | None:
            names = named(kind)
            ms = placed[names[0]][at] if names and at < len(placed[names[0]]) else None
            return gigabytes / (ms / 1e3) if ms else None

        return ratio

    none = worker(0)
    ratios = {
        "over_grain": over_rounds(faster("grain", "pipeline")),
        "over_kept": over_rounds(faster("grain-kept", "pipeline")),
        "placed_over_bound": over_rounds(placed_over_bound),
        "shard_gb_per_s": over_rounds(gb_per_s("copy-shard")),
        "put_gb_per_s": over_rounds(gb_per_s("copy-put")),
        "one_over_none": over_rounds(speed_over(none, worker(1))),
        "speed_over_workers_0": {
            name: over_rounds(speed_over(none, name)) for name in named("pipeline") if name != none
        },
        "best_count_placed": [best("pipeline", placed, at) for at in range(rounds)],
    }
    ideal = results["stage"]["ideal_ms"]
    ratios["best_over_ideal"] = over_rounds(
        lambda at: (lambda name: host[name][at] / ideal if name else None)(
            best("pipeline", host, at)
        )
    )
    return {
        "summary": _per_candidate(results, gigabytes),
        "ratios": ratios,
        "targets": _targets(results, ratios),
        **_first_batches(results),
    }


def _per_candidate(results: dict[str, Any], gigabytes: float) -> dict[str, Any]:
    """Medians (ranges) over every epoch of every round."""
    summary = {}
    for name, runs in results["runs"].items():
        done = [run for run in runs if run]
        if not done:
            continue
        row = {
            key: spread([value for run in done for value in run[key]])
            for key in ("host_ms", "placed_ms")
        }
        row["first_batch_s"] = spread([run["first_batch_s"] for run in done])
        if results["candidates"][name]["kind"].startswith("copy"):
            row["gb_per_s"] = gigabytes / (row["placed_ms"]["median"] / 1e3)
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
    if not row:
        return ""
    low, high = row["range"]
    return f"{row['median']:.{digits}f} ({low:.{digits}f}-{high:.{digits}f})"


def markdown(results: dict[str, Any]) -> str:
    """One row per candidate: medians (ranges) of its epochs over every round."""
    lines = [
        "| candidate | first batch (s) | host ms/batch | host + placement ms/batch "
        "| host speed over workers=0 |",
        "|" + " --- |" * 5,
    ]
    speeds = results["ratios"]["speed_over_workers_0"]
    for name in results["candidates"]:
        row = results["summary"].get(name)
        if row is None:
            failed = results["errors"].get(name, ["not run"])[0]
            lines.append(f"| {name} | failed: {failed} | | | |")
            continue
        placed = _cell(row["placed_ms"])
        if "gb_per_s" in row:
            placed += f", {row['gb_per_s']:.2f} GB/s"
        cells = [name, _cell(row["first_batch_s"], 2), _cell(row["host_ms"]), placed]
        cells.append(_cell(speeds.get(name), 2))
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
