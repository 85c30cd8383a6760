"""Building a global batch on 2 hosts, against ``jax.device_put`` onto one host's devices.

A local cluster of 2 processes x 4 CPU devices (`datarax.distributed.launch_local`).
In every process, side by side and interleaved:

- ``JaxProcessSharder.shard(per_host_batch, global_sharding)``: the global
  ``jax.Array`` over all 8 devices, built from this host's numpy rows;
- ``jax.device_put(per_host_batch, local_sharding)``: the same rows onto this host's
  4 devices only, in one process: the cost of the copies alone;
- the same ``shard`` with ``JaxProcessSharder(check_every_batch=True)``, which
  compares every batch's signature across hosts (reported, no target).

Target: shard / device_put <= 1.2 on every host, for a large and a tiny batch.
`make bench` runs it with the others; alone::

    python -m benchmarks.global_batch
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from benchmarks import _cluster
from benchmarks._timing import interleaved, medians, paired_ratio
from datarax.sharding import JaxProcessSharder

TARGET = 1.2


def _per_host_batches() -> dict[str, dict[str, np.ndarray]]:
    rng = np.random.default_rng(jax.process_index())
    return {
        "large (128 x 224x224x3 uint8 per host)": {
            "image": rng.integers(0, 256, (128, 224, 224, 3), dtype=np.uint8),
            "label": rng.integers(0, 1000, (128,), dtype=np.int32),
        },
        "tiny (8 x 4 float32 per host)": {
            "image": np.ones((8, 4), np.float32),
            "label": np.arange(8, dtype=np.int32),
        },
    }


def measure_on_each_host(rounds: int = 200) -> dict[str, Any]:
    """Runs on every process of the cluster: median times and the paired ratio."""
    sharder, strict = JaxProcessSharder(), JaxProcessSharder(check_every_batch=True)
    global_sharding = NamedSharding(jax.make_mesh((jax.device_count(),), ("data",)), P("data"))
    local_sharding = NamedSharding(Mesh(np.array(jax.local_devices()), ("data",)), P("data"))
    results = {}
    for name, batch in _per_host_batches().items():
        times = interleaved(
            {
                "shard": lambda batch=batch: sharder.shard(batch, global_sharding),
                "device_put": lambda batch=batch: jax.device_put(batch, local_sharding),
                "shard, check_every_batch": lambda batch=batch: strict.shard(
                    batch, global_sharding
                ),
            },
            rounds,
            calls_per_sample=1 if batch["image"].nbytes > 1e6 else 20,
            before_sample=_cluster.barrier,
        )
        results[name] = {
            "megabytes": sum(leaf.nbytes for leaf in batch.values()) / 1e6,
            "ms": {key: seconds * 1e3 for key, seconds in medians(times).items()},
            "ratio": paired_ratio(times, "shard", "device_put"),
            "strict_ratio": paired_ratio(times, "shard, check_every_batch", "device_put"),
        }
    return results


def summarize(per_host: list[dict[str, Any]]) -> dict[str, Any]:
    """Each host's times and ratios, and the worst host's ratios per batch."""

    def worst(key: str) -> dict[str, float]:
        return {name: max(host[name][key] for host in per_host) for name in per_host[0]}

    return {
        "hosts": per_host,
        "worst_ratio": worst("ratio"),
        "worst_strict_ratio": worst("strict_ratio"),
    }


def main() -> None:
    results = summarize(_cluster.run(["global_batch"])["global_batch"])
    for index, host in enumerate(results["hosts"]):
        for name, row in host.items():
            ms = ", ".join(f"{key} {value:.3f} ms" for key, value in row["ms"].items())
            print(
                f"host {index}, {name} ({row['megabytes']:.1f} MB): {ms}; shard / device_put "
                f"{row['ratio']:.3f}, with check_every_batch {row['strict_ratio']:.3f}"
            )
    for name, ratio in results["worst_ratio"].items():
        verdict = "PASS" if ratio <= TARGET else "MISS"
        print(f"worst host, {name}: shard / device_put {ratio:.3f} (target <= {TARGET}) {verdict}")


if __name__ == "__main__":
    main()
