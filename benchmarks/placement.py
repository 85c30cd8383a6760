"""One large batch and one tiny batch, placed on 8 devices five ways, side by side.

Candidates on the large batch ``{"image": uint8 (256, 224, 224, 3), "label": int32
(256,)}`` (38.5 MB):

- ``ArraySharder.shard``: this library;
- ``jax.device_put(batch, sharding)``: what a JAX user writes by hand;
- ``jax.make_array_from_process_local_data`` per leaf: the multi-host entry point;
- staging through one device (``jnp.asarray`` then ``device_put``), which copies the
  whole batch to device 0 and then out again;
- ``np.copyto`` into a preallocated host buffer: one memory copy of the batch, the
  bandwidth limit of this machine.

Also ``shard`` against ``device_put`` on a tiny batch (per-call latency) and on a
pytree of 1,000 small leaves (per-leaf cost).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from benchmarks._timing import interleaved, medians, paired_ratio
from datarax.sharding import ArraySharder


def image_batch(rows: int, side: int = 224, seed: int = 0) -> dict[str, np.ndarray]:
    """An ImageNet-shaped host batch of `rows` uint8 images and int32 labels."""
    rng = np.random.default_rng(seed)
    return {
        "image": rng.integers(0, 256, (rows, side, side, 3), dtype=np.uint8),
        "label": rng.integers(0, 1000, (rows,), dtype=np.int32),
    }


def data_sharding() -> NamedSharding:
    """Rows split over every device of a 1-d ('data',) mesh."""
    return NamedSharding(jax.make_mesh((len(jax.devices()),), ("data",)), P("data"))


def _staged(batch: dict[str, np.ndarray], sharding: NamedSharding) -> Any:
    return jax.device_put({key: jnp.asarray(value) for key, value in batch.items()}, sharding)


def _process_local(batch: dict[str, np.ndarray], sharding: NamedSharding) -> Any:
    return {
        key: jax.make_array_from_process_local_data(sharding, value) for key, value in batch.items()
    }


def _copy_into(batch: dict[str, np.ndarray], buffers: dict[str, np.ndarray]) -> None:
    for key, value in batch.items():
        np.copyto(buffers[key], value)


def large_batch(rounds: int = 150, staging_rounds: int = 15) -> dict[str, Any]:
    """Median seconds per candidate and the ratios between them, on the large batch."""
    batch, sharding, sharder = image_batch(256), data_sharding(), ArraySharder()
    buffers = {key: np.empty_like(value) for key, value in batch.items()}
    fast = interleaved(
        {
            "ArraySharder.shard": lambda: sharder.shard(batch, sharding),
            "jax.device_put": lambda: jax.device_put(batch, sharding),
            "make_array_from_process_local_data": lambda: _process_local(batch, sharding),
            "numpy copy (bandwidth limit)": lambda: _copy_into(batch, buffers),
        },
        rounds,
    )
    slow = interleaved(
        {
            "ArraySharder.shard": lambda: sharder.shard(batch, sharding),
            "staged through one device": lambda: _staged(batch, sharding),
        },
        staging_rounds,
    )
    seconds = medians(fast)
    seconds["staged through one device"] = medians(slow)["staged through one device"]
    megabytes = sum(value.nbytes for value in batch.values()) / 1e6
    return {
        "megabytes": megabytes,
        "rounds": rounds,
        "seconds": seconds,
        "shard_over_device_put": paired_ratio(fast, "ArraySharder.shard", "jax.device_put"),
        "shard_over_process_local": paired_ratio(
            fast, "ArraySharder.shard", "make_array_from_process_local_data"
        ),
        "shard_over_numpy_copy": paired_ratio(
            fast, "ArraySharder.shard", "numpy copy (bandwidth limit)"
        ),
        "staged_over_shard": paired_ratio(slow, "staged through one device", "ArraySharder.shard"),
        "shard_gb_per_s": megabytes / 1e3 / seconds["ArraySharder.shard"],
    }


def tiny_batch(rounds: int = 400, calls_per_sample: int = 10) -> dict[str, Any]:
    """Per-call latency of shard and device_put on an 8-row batch."""
    sharding, sharder = data_sharding(), ArraySharder()
    rows = len(jax.devices())
    batch = {"image": np.ones((rows, 4), np.float32), "label": np.arange(rows, dtype=np.int32)}
    times = interleaved(
        {
            "ArraySharder.shard": lambda: sharder.shard(batch, sharding),
            "jax.device_put": lambda: jax.device_put(batch, sharding),
        },
        rounds,
        calls_per_sample,
    )
    return {
        "rounds": rounds,
        "seconds": medians(times),
        "shard_over_device_put": paired_ratio(times, "ArraySharder.shard", "jax.device_put"),
    }


def many_leaves(leaves: int = 1000, rounds: int = 40) -> dict[str, Any]:
    """Shard and device_put of a pytree of `leaves` small arrays (8 rows x 16 float32)."""
    sharding, sharder = data_sharding(), ArraySharder()
    rows = len(jax.devices())
    batch = {f"leaf_{i:04d}": np.full((rows, 16), i, np.float32) for i in range(leaves)}
    times = interleaved(
        {
            "ArraySharder.shard": lambda: sharder.shard(batch, sharding),
            "jax.device_put": lambda: jax.device_put(batch, sharding),
        },
        rounds,
    )
    return {
        "leaves": leaves,
        "rounds": rounds,
        "seconds": medians(times),
        "shard_over_device_put": paired_ratio(times, "ArraySharder.shard", "jax.device_put"),
    }
