"""`benchmarks.packing`'s figures: each candidate's mean over its rounds, the ratios of
ours to Grain's best of the same method, the targets with a verdict, and the table."""

from __future__ import annotations

import itertools
import statistics
from typing import Any

GRAIN_SOURCES = ("grain-shuffled", "grain-streamed")
PLAN_LIMIT_S = 10.0
REFERENCE = {  # why a ratio is shown but is not one of the targets
    ("ours", "grain-streamed"): "reference: Grain's streaming reader, no global shuffle",
    ("ours-cold", "grain-shuffled"): "reference: ours with no row group kept",
    ("ours-cold", "grain-streamed"): "reference: a corpus far beyond the cache, against "
    "Grain's streaming reader (no global shuffle)",
}


def _candidate(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    done = [run for run in runs if "error" not in run]
    if not done:
        return None
    rates = [run["tokens_per_s"] for run in done]
    return {
        "tokens_per_s": statistics.fmean(rates),
        "tokens_per_s_rounds": rates,
        "fill": statistics.fmean(run["fill"] for run in done),
        "first_batch_s": statistics.fmean(run["first_batch_s"] for run in done),
        "timed_batches": done[0]["timed_batches"],
        "peak_rss_mb": max(run["peak_rss_mb"] for run in done),
        "peak_tree_rss_mb": max(run["peak_tree_rss_mb"] for run in done),
        "failed_rounds": len(runs) - len(done),
    }


def _best(summary: dict[str, Any], candidates: dict[str, Any], loader: str, method: str):
    """(name, figures) of the fastest candidate of `loader` and `method`, or None."""
    found = [
        (name, summary[name])
        for name, what in candidates.items()
        if what["loader"] == loader and what["method"] == method and summary.get(name)
    ]
    return max(found, key=lambda item: item[1]["tokens_per_s"]) if found else None


def summarize(results: dict[str, Any]) -> dict[str, Any]:
    """Per candidate, ratios and targets from the recorded runs (see the module doc)."""
    candidates = results["candidates"]
    summary = {name: _candidate(runs) for name, runs in results["runs"].items()}
    wanted = 1.0 if results["usable_cores"] <= 4 else 1.5
    ratios: dict[str, Any] = {}
    targets: list[dict[str, Any]] = []
    for method in ("first_fit", "concat"):
        for loader, source in itertools.product(("ours", "ours-cold"), GRAIN_SOURCES):
            ours = _best(summary, candidates, loader, method)
            grain = _best(summary, candidates, source, method)
            if ours is None or grain is None:
                continue
            value = ours[1]["tokens_per_s"] / grain[1]["tokens_per_s"]
            ratios[f"{method} {loader} / {source}"] = {
                "value": value,
                "ours": ours[0],
                "grain": grain[0],
            }
            counts = loader == "ours" and source == "grain-shuffled"
            targets.append(
                {
                    "name": f"{method}: tokens/s, {ours[0]} / {grain[0]}",
                    "value": value,
                    "target": f">= {wanted}",
                    "pass": value >= wanted,
                    "counts": counts,
                    "note": "" if counts else REFERENCE[loader, source],
                }
            )
    ours_fills = [s["fill"] for n, s in summary.items() if s and _is(candidates[n], "ours")]
    grain_fills = [
        s["fill"]
        for n, s in summary.items()
        if s and candidates[n]["loader"] in GRAIN_SOURCES and candidates[n]["method"] == "first_fit"
    ]
    if ours_fills and grain_fills:
        ours_fill, grain_fill = min(ours_fills), max(grain_fills)
        ratios["first_fit fill ours - grain"] = ours_fill - grain_fill
        targets.append(
            {
                "name": f"first_fit fill: ours {ours_fill:.4f} vs Grain's best {grain_fill:.4f}",
                "value": ours_fill - grain_fill,
                "target": ">= 0",
                "pass": ours_fill >= grain_fill,
                "counts": True,
                "note": "",
            }
        )
    planning = results.get("planning", {})
    for method in ("first_fit", "concat"):
        if method in planning:
            seconds = planning[method]["s"]
            targets.append(
                {
                    "name": f"planning {planning['documents']:,} documents, {method} (s)",
                    "value": seconds,
                    "target": f"< {PLAN_LIMIT_S:g}",
                    "pass": seconds < PLAN_LIMIT_S,
                    "counts": True,
                    "note": "",
                }
            )
    return {"summary": summary, "ratios": ratios, "targets": targets}


def _is(candidate: dict[str, Any], loader: str, method: str = "first_fit") -> bool:
    return candidate["loader"] == loader and candidate["method"] == method


def print_results(results: dict[str, Any]) -> None:
    """The table (markdown), then every target with its verdict."""
    print()
    print(
        "| candidate | M tokens/s (mean of rounds) | rounds | fill | first batch (s) "
        "| peak RSS MB: process / tree |"
    )
    print("|---|---|---|---|---|---|")
    for name, figures in results["summary"].items():
        if figures is None:
            print(f"| {name} | failed | | | | |")
            continue
        rounds = " ".join(f"{rate / 1e6:.2f}" for rate in figures["tokens_per_s_rounds"])
        print(
            f"| {name} | {figures['tokens_per_s'] / 1e6:.2f} | {rounds} | {figures['fill']:.4f} "
            f"| {figures['first_batch_s']:.2f} | {figures['peak_rss_mb']:.0f} / "
            f"{figures['peak_tree_rss_mb']:.0f} |"
        )
    print()
    for row in results["targets"]:
        verdict = "PASS" if row["pass"] else "MISS"
        note = f" ({row['note']})" if row["note"] else ""
        print(f"{row['name']}: {row['value']:.3f}, target {row['target']}: {verdict}{note}")
