"""PNG figures of the benchmark results, drawn from the results dictionary."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def _placement(results: dict[str, Any], path: Path) -> None:
    large, tiny, many = results["large_batch"], results["tiny_batch"], results["many_leaves"]
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(13, 4), width_ratios=(3, 1.2, 1.2))
    names = list(large["seconds"])
    values = [large["seconds"][name] * 1e3 for name in names]
    bars = left.barh(names, values, color=["C0", "C1", "C2", "C7", "C3"][: len(names)])
    left.bar_label(bars, fmt="%.1f ms", padding=3)
    left.invert_yaxis()
    left.set_xlabel("median time per batch (ms)")
    left.set_title(
        f"{large['megabytes']:.1f} MB image batch onto 8 devices: shard / device_put "
        f"{large['shard_over_device_put']:.2f}, staged / shard {large['staged_over_shard']:.1f}",
        fontsize=10,
    )
    left.set_xlim(0, max(values) * 1.25)
    for axis, result, scale, unit, title in (
        (middle, tiny, 1e6, "us", "tiny batch"),
        (right, many, 1e3, "ms", f"{many['leaves']:,} small leaves"),
    ):
        small_names = list(result["seconds"])
        small_values = [result["seconds"][name] * scale for name in small_names]
        bars = axis.bar(small_names, small_values, color=["C0", "C1"])
        axis.bar_label(bars, fmt=f"%.0f {unit}" if unit == "us" else f"%.1f {unit}", padding=3)
        axis.set_ylabel(f"median time per call ({unit})")
        axis.set_title(f"{title}: ratio {result['shard_over_device_put']:.2f}", fontsize=10)
        axis.set_ylim(0, max(small_values) * 1.25)
        axis.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _growth(results: dict[str, Any], path: Path) -> None:
    sweeps, devices = results["bytes_sweep"], results["device_sweep"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for label, key, style in (
        ("shard, default malloc", "default_malloc", "o-"),
        ("shard, freed memory reused", "reused_memory", "s--"),
    ):
        sweep = sweeps[key]
        left.loglog(sweep["megabytes"], [s * 1e3 for s in sweep["shard_s"]], style, label=label)
    sweep = sweeps["default_malloc"]
    left.loglog(
        sweep["megabytes"], [s * 1e3 for s in sweep["device_put_s"]], "x:", label="device_put"
    )
    first_mb, first_ms = sweep["megabytes"][3], sweep["shard_s"][3] * 1e3
    left.loglog(
        sweep["megabytes"],
        [first_ms * mb / first_mb for mb in sweep["megabytes"]],
        color="gray",
        alpha=0.5,
        label="linear (slope 1)",
    )
    left.set_xlabel("batch size (MiB)")
    left.set_ylabel("median shard time (ms)")
    left.set_title(f"8 devices: fitted exponent {sweep['exponent']:.2f}")
    left.legend(fontsize=8)
    counts = devices["devices"]
    right.semilogx(counts, [s * 1e3 for s in devices["shard_s"]], "o-", label="shard")
    right.semilogx(counts, [s * 1e3 for s in devices["device_put_s"]], "x:", label="device_put")
    right.set_xscale("log", base=2)
    right.set_xlabel("simulated devices (one process each)")
    right.set_ylabel("median time (ms)")
    right.set_title(f"{devices['megabytes']} MiB batch: fitted exponent {devices['exponent']:.2f}")
    right.set_ylim(bottom=0)
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _pipeline(results: dict[str, Any], path: Path) -> None:
    throughput, overlap = results["pipeline"], results["overlap"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    names = list(throughput["batches_per_s"])
    values = list(throughput["batches_per_s"].values())
    bars = left.bar(range(len(names)), values, color=["C7", "C0", "C2"])
    left.bar_label(bars, fmt="%.0f", padding=3)
    labels = [
        n.replace(" (", "\n(").replace(" with ", "\nwith ").replace(" + ", "\n+ ") for n in names
    ]
    left.set_xticks(range(len(names)), labels, fontsize=8)
    left.set_ylabel("batches per second (one epoch, no step)")
    left.set_ylim(0, max(values) * 1.2)
    left.set_title(
        f"no step: {throughput['batches_per_epoch']} batches of {throughput['batch_size']} "
        f"32x32x3 images; shard stage / plain {throughput['shard_stage_throughput_ratio']:.2f}\n"
        "(with no step to hide behind, prefetch only adds its thread hand-off)",
        fontsize=9,
    )
    cases = overlap["cases"]
    labels = [f"t_step={c['T_ms']:.0f}\nt_input={c['D_ms']:.0f}" for c in cases]
    positions = range(len(cases))
    width = 0.27
    for offset, key, label, color in (
        (-width, "serial_ms", "no prefetch (t_step + t_input)", "C7"),
        (0.0, "prefetch_ms", "prefetch_to_device", "C2"),
        (width, "bound_ms", "max(t_step, t_input)", "C1"),
    ):
        right.bar(
            [p + offset for p in positions],
            [c[key] for c in cases],
            width,
            label=label,
            color=color,
        )
    right.set_xticks(list(positions), labels)
    right.set_ylabel("time per step (ms)")
    right.set_title("a step of t_step ms, batches made in t_input ms", fontsize=10)
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _ledger(results: dict[str, Any], path: Path) -> None:
    ledger = results["ledger"]
    counts = ledger["devices"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.loglog(counts, [s * 1e3 for s in ledger["total_s"]], "o-", label="build + every host")
    left.loglog(
        counts,
        [s * 1e3 for s in ledger["median_total_s"]],
        "o-",
        color="C0",
        alpha=0.3,
        label="the same, median",
    )
    left.loglog(counts, [s * 1e3 for s in ledger["build_s"]], "s--", label="build RowLedger")
    left.loglog(
        counts,
        [s * 1e3 for s in ledger["rows_of_every_host_s"]],
        "x:",
        label="rows_of_host for every host",
    )
    first = ledger["total_s"][0] * 1e3
    left.loglog(
        counts,
        [first * n / counts[0] for n in counts],
        color="gray",
        alpha=0.5,
        label="linear (slope 1)",
    )
    left.set_xscale("log", base=2)
    left.set_xlabel("simulated devices (hosts of 4)")
    left.set_ylabel(f"fastest of {ledger['rounds']} samples (ms)")
    left.set_title(f"planning a pod: fitted exponent {ledger['exponent']:.2f}")
    left.legend(fontsize=8)
    bars = right.bar([str(n) for n in counts], ledger["us_per_device"], color="C0")
    right.bar_label(bars, fmt="%.0f us", padding=3)
    right.set_xlabel("simulated devices")
    right.set_ylabel("build + every host, per device (us)")
    right.set_ylim(0, max(ledger["us_per_device"]) * 1.25)
    right.set_title(f"{counts[-1]} devices: {ledger['total_s'][-1] * 1e3:.0f} ms in all")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _two_hosts(results: dict[str, Any], path: Path) -> None:
    checks, pipeline, resume = (
        results["replica_check"],
        results["global_pipeline"],
        results["resume"],
    )
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(13, 4.2), width_ratios=(2.2, 1.2, 1.2))
    cases = list(checks["worst_first_ratio"])
    positions = range(len(cases))
    width = 0.38
    for offset, key, label, color in (
        (-width / 2, "worst_first_ratio", "first call of a signature", "C1"),
        (width / 2, "worst_strict_ratio", "check_every_batch", "C3"),
    ):
        bars = left.bar(
            [p + offset for p in positions],
            list(checks[key].values()),
            width,
            label=label,
            color=color,
        )
        left.bar_label(bars, fmt="%.1f", padding=2, fontsize=8)
    labels = [c.replace("model axis across hosts", "'model' across hosts") for c in cases]
    left.set_xticks(list(positions), [c.replace(", ", "\n") for c in labels], fontsize=8)
    left.axhline(1.0, color="gray", linestyle="--", linewidth=1, label="steady-state shard")
    highest = max(max(checks[key].values()) for key in ("worst_first_ratio", "worst_strict_ratio"))
    left.set_ylim(0, highest * 1.2)
    left.set_ylabel("time / steady-state shard (worse host)")
    left.set_title("what the cross-host check costs (19.3 MB and 8 rows per host)", fontsize=10)
    left.legend(fontsize=8)
    hosts = pipeline["hosts"]
    names = list(hosts[0]["ms_per_batch"])
    for offset, name, color in ((-0.2, names[0], "C0"), (0.2, names[1], "C7")):
        middle.bar(
            [h + offset for h in range(len(hosts))],
            [host["ms_per_batch"][name] for host in hosts],
            0.4,
            label=name.replace(" (", "\n("),
            color=color,
        )
    middle.set_xticks(range(len(hosts)), [f"host {h}" for h in range(len(hosts))])
    middle.set_ylabel("ms per global batch of 256")
    middle.set_title(
        f"global Pipeline: throughput {pipeline['worst_throughput_ratio']:.2f} of plain",
        fontsize=10,
    )
    middle.set_ylim(0, middle.get_ylim()[1] * 1.45)
    middle.legend(fontsize=7, loc="upper center")
    resumed = resume["hosts"]
    labels = list(resumed[0]["ms"])
    for offset, name, color in ((-0.2, labels[0], "C2"), (0.2, labels[1], "C4")):
        right.bar(
            [h + offset for h in range(len(resumed))],
            [host["ms"][name] for host in resumed],
            0.4,
            label=name,
            color=color,
        )
    right.set_xticks(range(len(resumed)), [f"host {h}" for h in range(len(resumed))])
    right.set_ylabel("set_state + first batch (ms)")
    right.set_title(f"resume: end / start {resume['worst_end_over_start']:.2f}", fontsize=10)
    right.set_ylim(0, right.get_ylim()[1] * 1.35)
    right.legend(fontsize=7, loc="upper center")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def host_work(results: dict[str, Any], path: Path) -> None:
    """The records case (`benchmarks.host_work_records`): records per second against the
    cost of a record, and the two ratios per cost."""
    work = results["host_work"]
    cases = work["cases"]
    costs = [case["measured_ms_per_record"] for case in cases]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.4), width_ratios=(1.4, 1))
    styles = {
        "plain loop": ("C7", "o", ":"),
        "Pipeline workers=0": ("C0", "o", "-"),
        f"Pipeline workers={work['workers']}": ("C2", "s", "-"),
        "Grain default": ("C1", "v", "--"),
        "Grain 2 threads": ("C5", "^", "--"),
        "Grain mp_prefetch 1": ("C3", "<", "--"),
        "Grain mp_prefetch 2": ("C4", ">", "--"),
    }
    for name, (color, marker, line) in styles.items():
        drawn = [case for case in cases if name in case["records_per_s"]]
        rates = [case["records_per_s"][name] for case in drawn]
        middle = [statistics.median(r) for r in rates]
        spread = [
            [m - min(r) for m, r in zip(middle, rates, strict=True)],
            [max(r) - m for m, r in zip(middle, rates, strict=True)],
        ]
        left.errorbar(
            [case["measured_ms_per_record"] for case in drawn],
            middle,
            yerr=spread,
            color=color,
            marker=marker,
            linestyle=line,
            capsize=3,
            label=name,
        )
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xticks(costs, [f"{c:.2g}" for c in costs])
    left.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    left.set_xlabel("work per record on one core (ms)")
    left.set_ylabel("records per second (median, bars: range)")
    left.set_title(
        f"{work['records']:,} 32x32x3 images in batches of {work['batch_size']}, "
        f"{work['cores']} cores, {work['rounds']} rounds",
        fontsize=10,
    )
    left.legend(fontsize=7, ncol=2)
    positions = range(len(cases))
    width = 0.38
    for offset, key, label, color in (
        (-width / 2, "pipeline_over_best_grain", "Pipeline best / Grain best (target >= 1)", "C0"),
        (width / 2, "workers_over_none", f"workers={work['workers']} / workers=0", "C2"),
    ):
        values = [case[key] for case in cases]
        low = [v - case[f"{key}_range"][0] for v, case in zip(values, cases, strict=True)]
        high = [case[f"{key}_range"][1] - v for v, case in zip(values, cases, strict=True)]
        bars = right.bar(
            [q + offset for q in positions],
            values,
            width,
            yerr=[low, high],
            capsize=3,
            color=color,
            label=label,
        )
        right.bar_label(bars, fmt="%.2f", padding=2, fontsize=7)
    right.axhline(1.0, color="gray", linewidth=0.8)
    right.axhline(
        1.5, color="C2", linewidth=0.8, linestyle=":", label="workers target at >= 1.6 ms (1.5)"
    )
    right.set_xticks(list(positions), [f"{c:.2g} ms" for c in costs])
    right.set_ylabel("ratio of records per second (median of rounds)")
    right.set_title("side by side, per round", fontsize=10)
    right.legend(fontsize=7, loc="upper right")
    right.set_ylim(
        0,
        max(
            max(c["pipeline_over_best_grain_range"][1], c["workers_over_none_range"][1])
            for c in cases
        )
        * 1.3,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def save_all(results: dict[str, Any], folder: Path) -> list[Path]:
    """Writes placement.png, growth.png, pipeline.png, ledger.png, two_hosts.png and
    host_work.png."""
    folder.mkdir(parents=True, exist_ok=True)
    drawings = {
        "placement.png": _placement,
        "growth.png": _growth,
        "pipeline.png": _pipeline,
        "ledger.png": _ledger,
        "two_hosts.png": _two_hosts,
        "host_work.png": host_work,
    }
    paths = []
    for name, draw in drawings.items():
        draw(results, folder / name)
        paths.append(folder / name)
    return paths
