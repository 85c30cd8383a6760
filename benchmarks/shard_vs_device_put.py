"""ArraySharder.shard against jax.device_put, side by side in one process.

Prints the ratio of median times (shard / device_put) on a large image batch and on
a tiny batch. Absolute times depend on the machine; the ratios are what to read.

    python benchmarks/shard_vs_device_put.py
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import jax

jax.config.update("jax_num_cpu_devices", 8)

import numpy as np  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from datarax.sharding import ArraySharder  # noqa: E402


def interleaved_medians(candidates: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    """Median seconds per call of each candidate, run in turn so drift hits all alike."""
    for run in candidates.values():  # warm-up: compile, fill caches
        jax.block_until_ready(run())
    times: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(repeats):
        for name, run in candidates.items():
            start = time.perf_counter()
            jax.block_until_ready(run())
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def compare(
    label: str, batch: dict[str, np.ndarray], sharding: NamedSharding, repeats: int
) -> float:
    sharder = ArraySharder()
    medians = interleaved_medians(
        {
            "ArraySharder.shard": lambda: sharder.shard(batch, sharding),
            "jax.device_put": lambda: jax.device_put(batch, sharding),
        },
        repeats,
    )
    ratio = medians["ArraySharder.shard"] / medians["jax.device_put"]
    print(
        f"{label}: shard {medians['ArraySharder.shard'] * 1e3:.3f} ms, device_put "
        f"{medians['jax.device_put'] * 1e3:.3f} ms, ratio {ratio:.3f}"
    )
    return ratio


def main() -> None:
    sharding = NamedSharding(jax.make_mesh((8,), ("data",)), P("data"))
    rng = np.random.default_rng(0)
    large = {
        "image": rng.integers(0, 256, (256, 224, 224, 3), dtype=np.uint8),
        "label": rng.integers(0, 1000, (256,), dtype=np.int32),
    }
    tiny = {"image": np.ones((8, 4), np.float32), "label": np.arange(8, dtype=np.int32)}
    compare("large batch (256x224x224x3 uint8)", large, sharding, repeats=30)
    compare("tiny batch (8x4 float32)", tiny, sharding, repeats=2000)


if __name__ == "__main__":
    main()
