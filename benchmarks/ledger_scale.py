"""Planning a pod: how the cost of a `RowLedger` grows with the number of devices.

For 256, 1024 and 4096 simulated CPU devices, each count in a process of its own
(``jax_num_cpu_devices``; creating 4096 devices takes a few seconds, not counted):
hosts of 4 consecutive devices (`pretend_hosts`), a (hosts, 4) ``('data', 'model')``
mesh with ``P('data')`` and a global batch of 8 rows per host. One sample builds the
`RowLedger` and asks `rows_of_host` for every host; JAX's caches are cleared before
each sample, so JAX's own placement (``devices_indices_map``) is computed every time,
as it is when a pod is planned once.

The time of a size is the fastest of 15 samples (the median is recorded beside it):
a sample takes milliseconds, and on a shared machine the scheduler stalls a third or
more of them by several milliseconds, which lifts the median of the small sizes far
more than the large ones and would flatten the fitted exponent.

Targets: 4096 devices in about a second, and time per device that does not grow
with the device count (fitted exponent of time against devices <= 1.1). Alone::

    python -m benchmarks.ledger_scale
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time
from typing import Any

from benchmarks._child import run_module
from benchmarks._timing import power_law_exponent

DEVICE_COUNTS = (256, 1024, 4096)
DEVICES_PER_HOST = 4
ROWS_PER_HOST = 8
TARGET_SECONDS = 1.0
TARGET_EXPONENT = 1.1


def _time_plan(devices: int, rounds: int) -> dict[str, Any]:
    """Seconds to build the ledger and read every host's rows (fastest and median)."""
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from datarax.sharding import RowLedger, pretend_hosts

    num_hosts = devices // DEVICES_PER_HOST
    mesh = Mesh(np.array(jax.devices()).reshape(num_hosts, DEVICES_PER_HOST), ("data", "model"))
    sharding = NamedSharding(mesh, P("data"))
    host_of = pretend_hosts(num_hosts)
    build_s, rows_s = [], []
    for _ in range(rounds):
        jax.clear_caches()
        gc.collect()
        start = time.perf_counter()
        ledger = RowLedger(sharding, ROWS_PER_HOST * num_hosts, host_of=host_of)
        built = time.perf_counter()
        counts = [len(ledger.rows_of_host(host)) for host in ledger.hosts]
        done = time.perf_counter()
        if counts != [ROWS_PER_HOST] * num_hosts:
            raise AssertionError(f"hosts read {sorted(set(counts))} rows, not {ROWS_PER_HOST}")
        build_s.append(built - start)
        rows_s.append(done - built)
    total_s = [a + b for a, b in zip(build_s, rows_s, strict=True)]
    return {
        "devices": devices,
        "hosts": num_hosts,
        "rounds": rounds,
        "build_s": min(build_s),
        "rows_of_every_host_s": min(rows_s),
        "total_s": min(total_s),
        "median_total_s": statistics.median(total_s),
    }


def _child(devices: int, rounds: int, timeout_s: float) -> dict[str, Any]:
    env = {key: value for key, value in os.environ.items() if key != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    args = ["--devices", str(devices), "--rounds", str(rounds)]
    what = f"{devices}-device ledger run"
    return run_module("benchmarks.ledger_scale", args, env, timeout_s, what)


def ledger_scale(
    counts: tuple[int, ...] = DEVICE_COUNTS, rounds: int = 15, timeout_s: float = 120.0
) -> dict[str, Any]:
    """Seconds per size (fastest sample, and median), per device, and the growth exponent."""
    rows = [_child(count, rounds, timeout_s) for count in counts]
    total_s, median_s = [row["total_s"] for row in rows], [row["median_total_s"] for row in rows]
    return {
        "devices": list(counts),
        "devices_per_host": DEVICES_PER_HOST,
        "rows_per_host": ROWS_PER_HOST,
        "rounds": rounds,
        "build_s": [row["build_s"] for row in rows],
        "rows_of_every_host_s": [row["rows_of_every_host_s"] for row in rows],
        "total_s": total_s,
        "median_total_s": median_s,
        "us_per_device": [s / n * 1e6 for s, n in zip(total_s, counts, strict=True)],
        "exponent": power_law_exponent(list(map(float, counts)), total_s),
        "median_exponent": power_law_exponent(list(map(float, counts)), median_s),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--devices", type=int, help="measure in this process (a child run)")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    if args.devices is not None:
        import jax

        jax.config.update("jax_num_cpu_devices", args.devices)
        if jax.device_count() != args.devices:
            raise SystemExit(f"asked for {args.devices} devices, JAX has {jax.device_count()}")
        print(json.dumps(_time_plan(args.devices, args.rounds)), flush=True)
        os._exit(0)  # tearing down thousands of devices takes longer than the measurement
    result = ledger_scale(rounds=args.rounds)
    for devices, total, per_device in zip(
        result["devices"], result["total_s"], result["us_per_device"], strict=True
    ):
        print(f"{devices:>5} devices: {total * 1e3:.1f} ms, {per_device:.1f} us per device")
    print(f"exponent {result['exponent']:.2f} (target <= {TARGET_EXPONENT})")


if __name__ == "__main__":
    main()
