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

from benchmarks import (  # noqa: E402
    _cluster,
    global_batch,
    global_pipeline,
    growth,
    host_work_records,
    ledger_scale,
    placement,
    plots,
    replica_check,
    resume,
    throughput,
)

CLUSTER_BENCHMARKS = {
    "global_batch": global_batch.summarize,
    "replica_check": replica_check.summarize,
    "global_pipeline": global_pipeline.summarize,
    "resume": resume.summarize,
}


def _on_two_hosts() -> dict[str, Any]:
    """Every 2-host benchmark in one local cluster (starting one costs seconds)."""
    per_host = _cluster.run(list(CLUSTER_BENCHMARKS))
    return {name: summarize(per_host[name]) for name, summarize in CLUSTER_BENCHMARKS.items()}


def _targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    large, tiny = results["large_batch"], results["tiny_batch"]
    rows: list[tuple[str, float, str]] = [
        ("large batch: shard / device_put", large["shard_over_device_put"], "<= 1.05"),
        ("tiny batch: shard / device_put", tiny["shard_over_device_put"], "<= 1.2"),
        (
            "1,000 small leaves: shard / device_put",
            results["many_leaves"]["shard_over_device_put"],
            "<= 1.05",
        ),
        ("large batch: staged / shard", large["staged_over_shard"], ">= 6"),
        (
            "pipeline, tiny batches: shard stage / plain loop (throughput)",
            results["pipeline"]["shard_stage_throughput_ratio"],
            f">= {throughput.TINY_BATCH_TARGET}",
        ),
    ]
    for case in results["overlap"]["cases"]:
        rows.append(
            (
                f"prefetch: step / max(t_step, t_input) at t_step={case['T_ms']:.0f} "
                f"t_input={case['D_ms']:.1f} ms",
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
    ledger = results["ledger"]
    rows += [
        (
            f"ledger: {ledger['devices'][-1]} devices, build + every host's rows (s)",
            ledger["total_s"][-1],
            "<= 1.0",
        ),
        (
            f"ledger: exponent of time ({ledger['devices'][0]}-{ledger['devices'][-1]} devices)",
            ledger["exponent"],
            "<= 1.1",
        ),
    ]
    for name, ratio in results["global_batch"]["worst_ratio"].items():
        rows.append((f"2 hosts, worst host: shard / device_put, {name}", ratio, "<= 1.2"))
    pipeline, read = (
        results["global_pipeline"],
        results["global_pipeline"]["rows_per_host_per_batch"],
    )
    rows += [
        (
            "2 hosts, worst host: global Pipeline / plain loop (throughput)",
            pipeline["worst_throughput_ratio"],
            ">= 0.9",
        ),
        (
            "2 hosts: rows read per host per batch (= B/P)",
            read["farthest"],
            f"= {read['expected']}",
        ),
        (
            "2 hosts, worst host: resume near epoch end / near start",
            results["resume"]["worst_end_over_start"],
            "<= 1.2",
        ),
    ]
    for case in results["host_work"]["cases"]:
        cost = case["cost_ms"]
        rows.append(
            (
                f"host work {cost:g} ms/record: Pipeline best / Grain best (records/s)",
                case["pipeline_over_best_grain"],
                ">= 1.0",
            )
        )
        if cost >= 1.6:
            rows.append(
                (
                    f"host work {cost:g} ms/record: "
                    f"workers={host_work_records.WORKERS} / workers=0",
                    case["workers_over_none"],
                    ">= 1.5",
                )
            )
    table = []
    for name, value, target in rows:
        relation, bound = target.split()[0], float(target.split()[1])
        passed = {"<=": value <= bound, ">=": value >= bound, "=": value == bound}[relation]
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
            f"overlap t_step={case['T_ms']:.1f} t_input={case['D_ms']:.1f}: no prefetch "
            f"{case['serial_ms']:.1f} ms, prefetch {case['prefetch_ms']:.1f} ms, "
            f"max(t_step, t_input) {case['bound_ms']:.1f} ms"
        )
    for name, ratio in results["global_batch"]["worst_strict_ratio"].items():
        print(f"2 hosts, {name}: with check_every_batch, shard / device_put {ratio:.2f}")
    _print_two_hosts(results)
    host_work_records.print_results(results["host_work"])


def _print_two_hosts(results: dict[str, Any]) -> None:
    ledger = results["ledger"]
    for devices, total, median, per_device in zip(
        ledger["devices"],
        ledger["total_s"],
        ledger["median_total_s"],
        ledger["us_per_device"],
        strict=True,
    ):
        print(
            f"ledger, {devices} devices: fastest {total * 1e3:.1f} ms ({per_device:.1f} us per "
            f"device), median {median * 1e3:.1f} ms"
        )
    print(f"ledger: exponent of the median times {ledger['median_exponent']:.2f}")
    checks = results["replica_check"]
    for case, first in checks["worst_first_ratio"].items():
        strict = checks["worst_strict_ratio"][case]
        print(
            f"2 hosts, {case}: first call of a signature / steady shard {first:.2f}, "
            f"check_every_batch / steady shard {strict:.2f}"
        )
    for index, host in enumerate(results["global_pipeline"]["hosts"]):
        ms = ", ".join(f"{name} {value:.2f} ms" for name, value in host["ms_per_batch"].items())
        print(f"2 hosts, host {index}, per batch: {ms}")
    read = results["global_pipeline"]["rows_per_host_per_batch"]
    mark = "\N{CHECK MARK}" if read["exact"] else "\N{BALLOT X}"
    print(
        f"2 hosts: rows read per host per batch {read['read']}, B/P = {read['expected']} {mark}; "
        f"'model' axis across hosts: {read['model axis across hosts']} (all B rows on each)"
    )
    for index, host in enumerate(results["resume"]["hosts"]):
        ms = ", ".join(f"{name} {value:.2f} ms" for name, value in host["ms"].items())
        print(f"2 hosts, host {index}: {ms}")


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
        ("many_leaves", placement.many_leaves),
        ("pipeline", throughput.pipeline_throughput),
        ("overlap", throughput.prefetch_overlap),
        ("bytes_sweep", growth.bytes_sweeps),
        ("device_sweep", growth.device_sweep),
        ("ledger", ledger_scale.ledger_scale),
        ("2 hosts", _on_two_hosts),
        ("host_work", host_work_records.host_work),
    )
    for key, run in steps:
        step_start = time.perf_counter()
        result = run()
        if key == "2 hosts":
            results.update(result)
        else:
            results[key] = result
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
