"""PNG figures of the benchmark results, drawn from the results dictionary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def _placement(results: dict[str, Any], path: Path) -> None:
    large, tiny = results["large_batch"], results["tiny_batch"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), width_ratios=(3, 1.3))
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
    tiny_names = list(tiny["seconds"])
    tiny_values = [tiny["seconds"][name] * 1e6 for name in tiny_names]
    bars = right.bar(tiny_names, tiny_values, color=["C0", "C1"])
    right.bar_label(bars, fmt="%.0f us", padding=3)
    right.set_ylabel("median latency per call (us)")
    right.set_title(f"tiny batch: ratio {tiny['shard_over_device_put']:.2f}")
    right.set_ylim(0, max(tiny_values) * 1.25)
    right.tick_params(axis="x", labelsize=8)
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
        f"{throughput['batches_per_epoch']} batches of {throughput['batch_size']} 32x32x3 images:"
        f" shard stage / plain {throughput['shard_stage_throughput_ratio']:.2f}",
        fontsize=10,
    )
    cases = overlap["cases"]
    labels = [f"T={c['T_ms']:.0f}\nD={c['D_ms']:.0f}" for c in cases]
    positions = range(len(cases))
    width = 0.27
    for offset, key, label, color in (
        (-width, "serial_ms", "no prefetch (T + D)", "C7"),
        (0.0, "prefetch_ms", "prefetch_to_device", "C2"),
        (width, "bound_ms", "max(T, D)", "C1"),
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
    right.set_title("step of T ms on batches that cost D ms")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def save_all(results: dict[str, Any], folder: Path) -> list[Path]:
    """Writes placement.png, growth.png and pipeline.png into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / "placement.png", folder / "growth.png", folder / "pipeline.png"]
    for draw, path in zip((_placement, _growth, _pipeline), paths, strict=True):
        draw(results, path)
    return paths
