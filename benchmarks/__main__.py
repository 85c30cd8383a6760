"""``make bench``: every benchmark side by side, every ratio against its target.

Writes docs/benchmarks/results.json and the PNG figures next to it. Absolute times
depend on the machine and its load; the ratios, measured in one process with
interleaved runs, are the result.

    python -m benchmarks [--out docs/benchmarks]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import jax

jax.config.update("jax_num_cpu_devices", 8)

from benchmarks import global_batch, growth, placement, plots, throughput  # noqa: E402


def _targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    large, tiny = results["large_batch"], results["tiny_batch"]
    rows: list[tuple[str, float, str]] = [
        ("large batch: shard / device_put", large["shard_over_device_put"], "<= 1.05"),
        ("tiny batch: shard / device_put", tiny["shard_over_device_put"], "<= 1.2"),
        ("large batch: staged / shard", large["staged_over_shard"], ">= 6"),
        (
            "pipeline: shard stage / plain loop (throughput)",
            results["pipeline"]["shard_stage_throughput_ratio"],
            ">= 0.9",
        ),
    ]
    for case in results["overlap"]["cases"]:
        rows.append(
            (
                f"prefetch: step / max(T, D) at T={case['T_ms']:.0f} D={case['D_ms']:.1f} ms",
                case["prefetch_over_bound"],
                "<= 1.15",
            )
        )
    rows.append(
        (
            "bytes: exponent of shard time (1-256 MiB)",
            results["bytes_sweep"]["default_malloc"]["exponent"],
            "<= 1.1",
        )
    )
    rows.append(
        ("devices: exponent of shard time (1-64)", results["device_sweep"]["exponent"], "<= 1.0")
    )
    for name, ratio in results["global_batch"]["worst_ratio"].items():
        rows.append((f"2 hosts, worst host: shard / device_put, {name}", ratio, "<= 1.2"))
    table = []
    for name, value, target in rows:
        bound = float(target.split()[1])
        passed = value <= bound if target.startswith("<=") else value >= bound
        table.append({"name": name, "value": value, "target": target, "pass": passed})
    return table


def _print_info(results: dict[str, Any]) -> None:
    large = results["large_batch"]
    print("large batch, median ms:", {k: round(v * 1e3, 2) for k, v in large["seconds"].items()})
    print(
        f"  shard / make_array_from_process_local_data {large['shard_over_process_local']:.3f}, "
        f"shard / numpy copy {large['shard_over_numpy_copy']:.3f}, "
        f"shard {large['shard_gb_per_s']:.1f} GB/s"
    )
    for key, sweep in results["bytes_sweep"].items():
        print(
            f"bytes sweep ({key}): ms {[round(s * 1e3, 2) for s in sweep['shard_s']]}, "
            f"shard/device_put {[round(r, 2) for r in sweep['shard_over_device_put']]}, "
            f"exponent {sweep['exponent']:.2f} (from 8 MiB {sweep['exponent_from_8mb']:.2f})"
        )
    devices = results["device_sweep"]
    print(
        f"device sweep {devices['devices']}: ms {[round(s * 1e3, 2) for s in devices['shard_s']]}"
        f", shard/device_put {[round(r, 2) for r in devices['shard_over_device_put']]}"
    )
    pipeline = results["pipeline"]
    print("pipeline, batches/s:", {k: round(v) for k, v in pipeline["batches_per_s"].items()})
    print(
        f"  prefetch (no step) / plain loop throughput {pipeline['prefetch_throughput_ratio']:.3f}"
    )
    for case in results["overlap"]["cases"]:
        print(
            f"overlap T={case['T_ms']:.1f} D={case['D_ms']:.1f}: no prefetch "
            f"{case['serial_ms']:.1f} ms, prefetch {case['prefetch_ms']:.1f} ms, "
            f"max(T, D) {case['bound_ms']:.1f} ms"
        )
    for name, ratio in results["global_batch"]["worst_strict_ratio"].items():
        print(f"2 hosts, {name}: with check_every_batch, shard / device_put {ratio:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks"))
    args = parser.parse_args()
    start = time.perf_counter()
    results: dict[str, Any] = {
        "machine": {
            "jax": jax.__version__,
            "cpu_cores": os.cpu_count(),
            "python": platform.python_version(),
            "devices": jax.device_count(),
        }
    }
    steps = (
        ("large_batch", placement.large_batch),
        ("tiny_batch", placement.tiny_batch),
        ("pipeline", throughput.pipeline_throughput),
        ("overlap", throughput.prefetch_overlap),
        ("bytes_sweep", growth.bytes_sweeps),
        ("device_sweep", growth.device_sweep),
        ("global_batch", global_batch.global_batch),
    )
    for key, run in steps:
        step_start = time.perf_counter()
        results[key] = run()
        print(f"[{key}: {time.perf_counter() - step_start:.0f} s]", flush=True)
    results["targets"] = _targets(results)
    _print_info(results)
    print(f"\n{'ratio':<66} {'value':>7}  target   result")
    for row in results["targets"]:
        verdict = "PASS" if row["pass"] else "MISS"
        print(f"{row['name']:<66} {row['value']:>7.3f}  {row['target']:<8} {verdict}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    for path in plots.save_all(results, args.out):
        print("wrote", path)
    print(f"total {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
