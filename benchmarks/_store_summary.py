"""`benchmarks.store`'s figures: each candidate's mean over its rounds, the ratios the
issue sets targets for, each with a verdict, and the tables.

The targets (stated for 2 cores; elsewhere the same bounds are shown, ``counts`` False):

- ``ours-store concat shuffled`` / ``ours-store concat in-order`` >= 0.8: the same
  method both sides, so the ratio is what the shuffle costs;
- ``ours-store M shuffled`` / ``grain-streamed M`` >= 2, for M first_fit and concat;
- ``ours-store M shuffled`` / ``grain-arrayrecord M shuffled`` >= 3, for each M;
- writing the store from Parquet at least half as fast as reading that Parquet in
  order: ``read_parquet`` seconds / ``store`` seconds >= 0.5, where the store's seconds
  are its whole write (`Documents` built, the write, ``fdatasync``;
  `benchmarks._store_data`).

Each side of a speed ratio is taken at its best worker count (the fastest mean). The
reference ratios (not targets): ours over the same Parquet shuffled against ours from
the store, and the `write_documents` call alone (no ``fdatasync``).
"""

from __future__ import annotations

import statistics
from typing import Any

METHODS = ("first_fit", "concat")
TARGET_CORES = 2


def _candidate(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    done = [run for run in runs if "error" not in run]
    if not done:
        return None
    rates = [run["tokens_per_s"] for run in done]

    def mean(key: str) -> float | None:
        values = [run[key] for run in done if run.get(key) is not None]
        return statistics.fmean(values) if values else None

    def most(key: str) -> float | None:
        values = [run[key] for run in done if run.get(key) is not None]
        return max(values) if values else None

    return {
        "tokens_per_s": statistics.fmean(rates),
        "tokens_per_s_rounds": rates,
        "fill": statistics.fmean(run["fill"] for run in done),
        "first_batch_s": statistics.fmean(run["first_batch_s"] for run in done),
        "timed_batches": done[0]["timed_batches"],
        "read_bytes": mean("read_bytes"),
        "read_bytes_per_token": mean("read_bytes_per_token"),
        "data_read_bytes": mean("data_read_bytes"),
        "data_read_bytes_per_token": mean("data_read_bytes_per_token"),
        "peak_rss_mb": most("peak_rss_mb"),
        "peak_tree_rss_mb": most("peak_tree_rss_mb"),
        "rss_anon_mb": most("rss_anon_mb"),
        "rss_file_mb": most("rss_file_mb"),
        "failed_rounds": len(runs) - len(done),
    }


def best(
    summary: dict[str, Any], candidates: dict[str, Any], loader: str, method: str, order: str
) -> tuple[str, dict[str, Any]] | None:
    """(name, figures) of the fastest candidate of `loader`, `method` and `order`."""
    found = [
        (name, summary[name])
        for name, what in candidates.items()
        if (what["loader"], what["method"], what["order"]) == (loader, method, order)
        and summary.get(name)
    ]
    return max(found, key=lambda item: item[1]["tokens_per_s"]) if found else None


SPEED_TARGETS = (  # (method, ours' order, other loader, other order, bound, what)
    ("concat", "shuffled", "ours-store", "in-order", 0.8, "the store shuffled / in order"),
    ("first_fit", "shuffled", "grain-streamed", "in-order", 2.0, "over Grain streamed"),
    ("concat", "shuffled", "grain-streamed", "in-order", 2.0, "over Grain streamed"),
    ("first_fit", "shuffled", "grain-arrayrecord", "shuffled", 3.0, "over Grain ArrayRecord"),
    ("concat", "shuffled", "grain-arrayrecord", "shuffled", 3.0, "over Grain ArrayRecord"),
)
REFERENCES = (  # (numerator, denominator, note)
    (
        ("ours-parquet", "first_fit", "shuffled"),
        ("ours-store", "first_fit", "shuffled"),
        "reference: ours over the same Parquet, shuffled, against the store",
    ),
    (
        ("ours-store", "first_fit", "shuffled"),
        ("ours-store", "concat", "in-order"),
        "reference: first-fit shuffled against the store read in order (concat)",
    ),
)
WRITE_BOUND = 0.5


def summarize(results: dict[str, Any]) -> dict[str, Any]:
    """Per candidate, ratios and targets from the recorded runs (see the module doc)."""
    candidates = results["candidates"]
    summary = {name: _candidate(runs) for name, runs in results["runs"].items()}
    counts = results["usable_cores"] == TARGET_CORES
    note = "" if counts else f"the targets are stated for {TARGET_CORES} cores"
    ratios: dict[str, Any] = {}
    targets: list[dict[str, Any]] = []
    for method, order, loader, other_order, bound, what in SPEED_TARGETS:
        ours = best(summary, candidates, "ours-store", method, order)
        other = best(summary, candidates, loader, method, other_order)
        if ours is None or other is None:
            continue
        value = ours[1]["tokens_per_s"] / other[1]["tokens_per_s"]
        ratios[f"{method}: {what}"] = {"value": value, "ours": ours[0], "other": other[0]}
        targets.append(
            {
                "name": f"{method}: tokens/s, {ours[0]} / {other[0]}",
                "value": value,
                "target": f">= {bound:g}",
                "pass": value >= bound,
                "counts": counts,
                "note": note,
            }
        )
    for top, bottom, why in REFERENCES:
        over = best(summary, candidates, *top)
        under = best(summary, candidates, *bottom)
        if over is None or under is None:
            continue
        value = over[1]["tokens_per_s"] / under[1]["tokens_per_s"]
        ratios[f"{over[0]} / {under[0]}"] = {"value": value, "note": why}
        targets.append(
            {
                "name": f"tokens/s, {over[0]} / {under[0]}",
                "value": value,
                "target": "-",
                "pass": True,
                "counts": False,
                "note": why,
            }
        )
    data = results.get("data", {})
    if "store" in data and "read_parquet" in data:
        read_s, store = data["read_parquet"]["s"], data["store"]
        value = read_s / store["s"]
        ratios["write store / read Parquet in order (speed)"] = value
        targets.append(
            {
                "name": (
                    f"writing the store from Parquet: read in order {read_s:.2f} s / write "
                    f"{store['s']:.2f} s (Documents {store['index_s']:.2f} + write "
                    f"{store['write_s']:.2f} + fdatasync {store['sync_s']:.2f})"
                ),
                "value": value,
                "target": f">= {WRITE_BOUND:g}",
                "pass": value >= WRITE_BOUND,
                "counts": counts,
                "note": note,
            }
        )
        alone = read_s / store["write_s"]
        ratios["write_documents call alone / read Parquet in order (speed)"] = alone
        targets.append(
            {
                "name": f"read Parquet in order s / write_documents call alone s "
                f"({store['write_s']:.2f} s)",
                "value": alone,
                "target": "-",
                "pass": True,
                "counts": False,
                "note": "reference: the write_documents call alone, no fdatasync",
            }
        )
    return {"summary": summary, "ratios": ratios, "targets": targets}


def _mb(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _per_token(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def print_results(results: dict[str, Any]) -> None:
    """The candidates' table, the writes' table (markdown), then every target."""
    print()
    print(
        "| candidate | M tokens/s (mean) | rounds | fill | first batch (s) | batches timed "
        "| bytes read / token: process tree / data files cached | peak RSS MB: process "
        "/ tree | RssAnon / RssFile MB |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, figures in results["summary"].items():
        if figures is None:
            print(f"| {name} | failed | | | | | | | |")
            continue
        rounds = " ".join(f"{rate / 1e6:.2f}" for rate in figures["tokens_per_s_rounds"])
        print(
            f"| {name} | {figures['tokens_per_s'] / 1e6:.2f} | {rounds} | {figures['fill']:.4f} "
            f"| {figures['first_batch_s']:.2f} | {figures['timed_batches']} "
            f"| {_per_token(figures['read_bytes_per_token'])} / "
            f"{_per_token(figures['data_read_bytes_per_token'])} "
            f"| {_mb(figures['peak_rss_mb'])} / {_mb(figures['peak_tree_rss_mb'])} "
            f"| {_mb(figures['rss_anon_mb'])} / {_mb(figures['rss_file_mb'])} |"
        )
    data = results.get("data", {})
    print()
    print("| step | s | M tokens/s | MB on disk | bytes / token on disk | reused |")
    print("|---|---|---|---|---|---|")
    for step in ("parquet", "read_parquet", "store", "array_record"):
        if step not in data:
            continue
        figures = data[step]
        size = figures.get("bytes")
        on_disk = "-" if size is None else f"{size / 1e6:.0f}"
        per_token = "-" if size is None else f"{size / figures['tokens']:.3f}"
        print(
            f"| {step} | {figures['s']:.2f} | {figures['tokens_per_s'] / 1e6:.1f} | {on_disk} "
            f"| {per_token} | {figures.get('reused', False)} |"
        )
    print()
    for row in results["targets"]:
        verdict = "PASS" if row["pass"] else "MISS"
        verdict = verdict if row["target"] != "-" else "reference"
        note = f" ({row['note']})" if row["note"] else ""
        print(f"{row['name']}: {row['value']:.3f}, target {row['target']}: {verdict}{note}")
