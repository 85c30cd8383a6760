"""A global `Pipeline` on 2 hosts: throughput against a hand-written loop, and rows read.

On a local cluster of 2 processes x 4 CPU devices, with an 8-device ``('data',)``
mesh and ``P('data')``, an in-memory source of 64 global batches of 256 rows
(``{"image": uint8 (256, 32, 32, 3), "id": int32 (256,)}``) on every host:

- ``Pipeline(source=..., batch_size=256, sharding=S)`` for one epoch, each global
  batch consumed by a jitted per-row sum (no cross-host traffic) and waited for;
- a plain loop over the same batches: each host's rows, sliced from the source
  before timing, each leaf placed with ``jax.make_array_from_process_local_data``,
  then the same step.

Target: pipeline throughput / plain loop >= 0.9 on every host (the median of
per-round ratios of plain time over pipeline time).

Rows read: a source that counts the rows each read asks for; over one epoch each host
must read exactly B / P rows per batch for ``P('data')`` over all processes (and all
B when the 'model' axis spans the hosts, reported). Alone::

    python -m benchmarks.global_pipeline
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, Sharding
from jax.sharding import PartitionSpec as P

from benchmarks import _cluster
from benchmarks._timing import interleaved, medians, paired_ratio
from datarax.pipeline import ArraySource, Pipeline
from datarax.sharding import JaxProcessSharder

BATCH_SIZE = 256
NUM_BATCHES = 64
TARGET = 0.9
PIPELINE = "Pipeline(sharding=S)"
PLAIN = "plain loop (make_array_from_process_local_data)"


def _source(rows: int) -> dict[str, np.ndarray]:
    """The same global source on every host (seeded), 32x32x3 uint8 images and row ids."""
    rng = np.random.default_rng(0)
    return {
        "image": rng.integers(0, 256, (rows, 32, 32, 3), dtype=np.uint8),
        "id": np.arange(rows, dtype=np.int32),
    }


@jax.jit
def _step(batch: dict[str, jax.Array]) -> jax.Array:
    """A trivial step: one number per row, kept on the row's device."""
    return jnp.sum(batch["image"], axis=(1, 2, 3), dtype=jnp.int32) + batch["id"]


class _CountingSource(ArraySource):
    """An `ArraySource` that records how many rows each read asks for."""

    def __init__(self, data: Any):
        super().__init__(data)
        self.rows_per_read: list[int] = []

    def __getitem__(self, index: int | slice | np.ndarray) -> Any:
        if isinstance(index, slice):
            self.rows_per_read.append(len(range(*index.indices(len(self)))))
        else:
            self.rows_per_read.append(int(np.size(index)))
        return super().__getitem__(index)


def _consume(batches: Any) -> int:
    count = 0
    for batch in batches:
        jax.block_until_ready(_step(batch))
        count += 1
    return count


def _by_host() -> np.ndarray:
    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    return np.array(devices).reshape(jax.process_count(), -1)


def _same_ids(ours: dict[str, jax.Array], theirs: dict[str, jax.Array]) -> bool:
    """Whether this host's devices hold the same row ids in both batches."""
    pairs = zip(ours["id"].addressable_shards, theirs["id"].addressable_shards, strict=True)
    return all(np.array_equal(np.asarray(a.data), np.asarray(b.data)) for a, b in pairs)


def _rows_read(sharding: Sharding, source: dict[str, np.ndarray], batches: int) -> list[int]:
    counting = _CountingSource(
        {key: value[: batches * BATCH_SIZE] for key, value in source.items()}
    )
    _consume(Pipeline(source=counting, batch_size=BATCH_SIZE, sharding=sharding))
    return counting.rows_per_read


def measure_on_each_host(rounds: int = 40) -> dict[str, Any]:
    """Runs on every process: throughput of both loops, and the rows each read asked for."""
    sharding = NamedSharding(Mesh(_by_host().reshape(-1), ("data",)), P("data"))
    source = _source(NUM_BATCHES * BATCH_SIZE)
    pipeline = Pipeline(source=source, batch_size=BATCH_SIZE, sharding=sharding)
    sharder = JaxProcessSharder()
    host_parts = [
        sharder.shard_data(
            {key: value[k * BATCH_SIZE : (k + 1) * BATCH_SIZE] for key, value in source.items()},
            sharding,
        )
        for k in range(NUM_BATCHES)
    ]

    def placed(part: dict[str, np.ndarray]) -> dict[str, jax.Array]:
        return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in part.items()}

    def plain_loop() -> int:
        return _consume(placed(part) for part in host_parts)

    same = all(
        _same_ids(ours, theirs)
        for ours, theirs in zip(pipeline, map(placed, host_parts), strict=True)
    )
    times = interleaved(
        {PIPELINE: lambda: _consume(pipeline), PLAIN: plain_loop},
        rounds,
        before_sample=_cluster.barrier,
    )
    seconds = medians(times)
    model_across = NamedSharding(Mesh(_by_host().T, ("data", "model")), P("data"))
    return {
        "batches_per_epoch": NUM_BATCHES,
        "batch_size": BATCH_SIZE,
        "megabytes_per_batch": sum(v[:BATCH_SIZE].nbytes for v in source.values()) / 1e6,
        "same_batches": same,
        "batches_per_s": {name: NUM_BATCHES / s for name, s in seconds.items()},
        "ms_per_batch": {name: s / NUM_BATCHES * 1e3 for name, s in seconds.items()},
        "throughput_ratio": paired_ratio(times, PLAIN, PIPELINE),
        "rows_per_read": {
            "data parallel": sorted(set(_rows_read(sharding, source, 8))),
            "model axis across hosts": sorted(set(_rows_read(model_across, source, 8))),
        },
    }


def summarize(per_host: list[dict[str, Any]]) -> dict[str, Any]:
    """Each host's results, the worse host's throughput ratio, and the rows-read check."""
    processes = len(per_host)
    expected = BATCH_SIZE // processes
    reads = [host["rows_per_read"]["data parallel"] for host in per_host]
    counts = sorted({count for read in reads for count in read})
    return {
        "hosts": per_host,
        "worst_throughput_ratio": min(host["throughput_ratio"] for host in per_host),
        "same_batches": all(host["same_batches"] for host in per_host),
        "rows_per_host_per_batch": {
            "expected": expected,
            "read": reads,
            "farthest": max(counts, key=lambda count: abs(count - expected)),
            "exact": counts == [expected],
            "model axis across hosts": [
                host["rows_per_read"]["model axis across hosts"] for host in per_host
            ],
        },
    }


def main() -> None:
    results = summarize(_cluster.run(["global_pipeline"])["global_pipeline"])
    for index, host in enumerate(results["hosts"]):
        ms = ", ".join(f"{name} {value:.2f} ms" for name, value in host["ms_per_batch"].items())
        print(f"host {index} per batch: {ms}; plain / pipeline {host['throughput_ratio']:.3f}")
    verdict = "PASS" if results["worst_throughput_ratio"] >= TARGET else "MISS"
    print(
        f"worst host: pipeline / plain throughput {results['worst_throughput_ratio']:.3f} "
        f"(target >= {TARGET}) {verdict}; same batches: {results['same_batches']}"
    )
    rows = results["rows_per_host_per_batch"]
    mark = "\N{CHECK MARK}" if rows["exact"] else "\N{BALLOT X}"
    print(f"rows read per host per batch: {rows['read']} (= B/P = {rows['expected']}) {mark}")


if __name__ == "__main__":
    main()
