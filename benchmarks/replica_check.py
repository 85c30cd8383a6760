"""What the cross-host check of `JaxProcessSharder.shard` costs, with and without replicas.

On a local cluster of 2 processes x 4 CPU devices, two layouts of the global batch:

- **model axis across hosts**: a (4, 2) ``('data', 'model')`` mesh whose 'model'
  axis spans the hosts, with ``P('data')``: every row is held by a device on each
  host, so both hosts pass the whole batch and the check compares digests of every
  part;
- **data parallel**: an 8-device ``('data',)`` mesh, ``P('data')``: each host holds
  its own rows, so the check exchanges shapes and no digests.

For a large batch (128 x 224x224x3 uint8 per host, 19.3 MB) and a tiny one (8 rows
per host), in every process, interleaved:

- ``shard``, steady state: the batch signature was seen before, no check;
- ``shard`` of a new signature (a new leaf name each call): the first call, which
  plans the leaves, exchanges shapes through the coordinator and digests replicas;
- ``shard`` with ``JaxProcessSharder(check_every_batch=True)``, which checks every call.

Reported: each as a ratio to the steady state, on the worse host (no targets). Alone::

    python -m benchmarks.replica_check
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from benchmarks import _cluster
from benchmarks._timing import interleaved, medians, paired_ratio
from benchmarks.growth import off_alignment
from datarax.sharding import JaxProcessSharder

STEADY = "shard, signature seen"
FIRST = "shard, first call of a signature"
STRICT = "shard, check_every_batch"


def _layouts() -> dict[str, NamedSharding]:
    by_host = np.array(sorted(jax.devices(), key=lambda d: (d.process_index, d.id))).reshape(
        jax.process_count(), -1
    )
    return {
        "model axis across hosts": NamedSharding(Mesh(by_host.T, ("data", "model")), P("data")),
        "data parallel": NamedSharding(Mesh(by_host.reshape(-1), ("data",)), P("data")),
    }


def _batches(replicated: bool) -> dict[str, dict[str, np.ndarray]]:
    """Per-host batches; identical on every host when every row is a replica on each.

    The image starts off a 64-byte boundary, so every candidate copies it (a CPU
    device uses an aligned buffer in place: see `benchmarks.growth.off_alignment`).
    """
    rng = np.random.default_rng(0 if replicated else jax.process_index())
    return {
        "large": {
            "image": off_alignment(rng.integers(0, 256, (128, 224, 224, 3), dtype=np.uint8)),
            "label": rng.integers(0, 1000, (128,), dtype=np.int32),
        },
        "tiny": {
            "image": rng.standard_normal((8, 4)).astype(np.float32),
            "label": np.arange(8, dtype=np.int32),
        },
    }


def _ratios(
    batch: dict[str, np.ndarray], sharding: NamedSharding, names: Iterator[int], rounds: int
) -> dict[str, Any]:
    """The three candidates on one batch and layout, interleaved."""
    sharder, strict = JaxProcessSharder(), JaxProcessSharder(check_every_batch=True)

    def fresh() -> Any:  # a new leaf name: a batch signature never seen before
        number = next(names)
        return sharder.shard({f"{key}_{number}": v for key, v in batch.items()}, sharding)

    times = interleaved(
        {
            STEADY: lambda: sharder.shard(batch, sharding),
            FIRST: fresh,
            STRICT: lambda: strict.shard(batch, sharding),
        },
        rounds,
        before_sample=_cluster.barrier,
    )
    return {
        "megabytes": sum(leaf.nbytes for leaf in batch.values()) / 1e6,
        "ms": {key: seconds * 1e3 for key, seconds in medians(times).items()},
        "first_ratio": paired_ratio(times, FIRST, STEADY),
        "strict_ratio": paired_ratio(times, STRICT, STEADY),
    }


def measure_on_each_host(rounds: int = 30) -> dict[str, Any]:
    """Runs on every process: median times and ratios to the steady state."""
    names = itertools.count()  # the same sequence on every host: calls stay in step
    return {
        f"{layout}, {size}": _ratios(batch, sharding, names, rounds)
        for layout, sharding in _layouts().items()
        for size, batch in _batches(layout != "data parallel").items()
    }


def summarize(per_host: list[dict[str, Any]]) -> dict[str, Any]:
    """Each host's results, and the worse host's ratios per case."""

    def worst(key: str) -> dict[str, float]:
        return {case: max(host[case][key] for host in per_host) for case in per_host[0]}

    return {
        "hosts": per_host,
        "worst_first_ratio": worst("first_ratio"),
        "worst_strict_ratio": worst("strict_ratio"),
    }


def main() -> None:
    results = summarize(_cluster.run(["replica_check"])["replica_check"])
    for index, host in enumerate(results["hosts"]):
        for case, row in host.items():
            ms = ", ".join(f"{key} {value:.2f} ms" for key, value in row["ms"].items())
            print(f"host {index}, {case} ({row['megabytes']:.1f} MB): {ms}")
    for case in results["worst_first_ratio"]:
        print(
            f"worst host, {case}: first call / steady {results['worst_first_ratio'][case]:.2f}, "
            f"check_every_batch / steady {results['worst_strict_ratio'][case]:.2f}"
        )


if __name__ == "__main__":
    main()
