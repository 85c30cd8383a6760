"""How the cost of `ArraySharder.shard` grows with bytes and with the device count.

Each measurement runs in a child process of its own (the device count needs a fresh
JAX; a fresh heap keeps one size's memory from helping the next)::

    python -m benchmarks.growth --devices 16            # one JSON line: 32 MiB batch
    python -m benchmarks.growth --devices 8 --sweep-bytes

The byte sweep runs twice: with glibc's default malloc, which hands freed blocks of
many MiB back to the OS so every placement faults in fresh zeroed pages, and with
``MALLOC_MMAP_THRESHOLD_``/``MALLOC_TRIM_THRESHOLD_`` set so freed memory is reused.
The second shows the cost of the copy itself.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from benchmarks._child import run_module
from benchmarks._timing import interleaved, medians, paired_ratio, power_law_exponent

SWEEP_MEGABYTES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
SWEEP_DEVICES = (1, 2, 4, 8, 16, 32, 64)
DEVICE_SWEEP_MEGABYTES = 32
_ROWS = 256  # divisible by every device count of the sweep


def off_alignment(array: Any) -> Any:
    """A copy of `array` that starts 16 bytes past a 64-byte boundary.

    CPU devices alias a host buffer aligned to 64 bytes instead of copying it (16 MiB:
    0.12 ms aliased, 2.3 ms copied, measured here). Heap memory is aligned that way
    by chance, so a size could be timed as a copy in one run and as a free alias in
    the next. Large numpy arrays come from mmap, 16 bytes past a page boundary: the
    copy path, which is the one measured here.
    """
    import numpy as np

    raw = np.empty(array.nbytes + 80, np.uint8)
    start = (-raw.ctypes.data) % 64 + 16
    placed = raw[start : start + array.nbytes].view(array.dtype).reshape(array.shape)
    placed[...] = array
    return placed


def _batch(megabytes: int) -> dict[str, Any]:
    import numpy as np

    row_bytes = megabytes * 2**20 // _ROWS
    rng = np.random.default_rng(0)
    return {
        "image": off_alignment(rng.integers(0, 256, (_ROWS, row_bytes), dtype=np.uint8)),
        "label": off_alignment(np.arange(_ROWS, dtype=np.int32)),
    }


def _time_shard(megabytes: int, rounds: int) -> dict[str, float]:
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from datarax.sharding import ArraySharder

    batch, sharder = _batch(megabytes), ArraySharder()
    sharding = NamedSharding(jax.make_mesh((len(jax.devices()),), ("data",)), P("data"))
    times = interleaved(
        {
            "shard": lambda: sharder.shard(batch, sharding),
            "device_put": lambda: jax.device_put(batch, sharding),
        },
        rounds,
    )
    seconds = medians(times)
    return {
        "shard_s": seconds["shard"],
        "device_put_s": seconds["device_put"],
        "shard_over_device_put": paired_ratio(times, "shard", "device_put"),
    }


def _rounds_for(megabytes: int) -> int:
    return max(15, min(60, 512 // megabytes))


def bytes_sweep(sizes: tuple[int, ...] = SWEEP_MEGABYTES) -> dict[str, Any]:
    """Shard and device_put time at each size (MiB) on this process's devices."""
    rows = [_time_shard(size, _rounds_for(size)) for size in sizes]
    shard_s = [row["shard_s"] for row in rows]
    return {
        "megabytes": list(sizes),
        "shard_s": shard_s,
        "device_put_s": [row["device_put_s"] for row in rows],
        "shard_over_device_put": [row["shard_over_device_put"] for row in rows],
        "exponent": power_law_exponent(list(map(float, sizes)), shard_s),
        "exponent_from_8mb": power_law_exponent(
            [float(size) for size in sizes if size >= 8],
            [s for size, s in zip(sizes, shard_s, strict=True) if size >= 8],
        ),
    }


REUSE_FREED_MEMORY = {"MALLOC_MMAP_THRESHOLD_": str(2**25), "MALLOC_TRIM_THRESHOLD_": str(2**33)}


def _child(
    devices: int,
    timeout_s: float,
    sweep_bytes: bool = False,
    env_extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    env = dict(os.environ)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env["JAX_PLATFORMS"] = "cpu"
    env.update(env_extra or {})
    extra = ["--sweep-bytes"] if sweep_bytes else []
    args = ["--devices", str(devices), *extra]
    return run_module("benchmarks.growth", args, env, timeout_s, f"{devices}-device run")


def bytes_sweeps(timeout_s: float = 120.0) -> dict[str, Any]:
    """The byte sweep on 8 devices, with the default allocator and with memory reuse."""
    return {
        "default_malloc": _child(8, timeout_s, sweep_bytes=True),
        "reused_memory": _child(8, timeout_s, sweep_bytes=True, env_extra=REUSE_FREED_MEMORY),
    }


def device_sweep(
    counts: tuple[int, ...] = SWEEP_DEVICES, timeout_s: float = 120.0
) -> dict[str, Any]:
    """Shard time of a fixed-size batch for each device count, one process per count."""
    rows = [_child(count, timeout_s) for count in counts]
    shard_s = [row["shard_s"] for row in rows]
    return {
        "devices": list(counts),
        "megabytes": DEVICE_SWEEP_MEGABYTES,
        "shard_s": shard_s,
        "device_put_s": [row["device_put_s"] for row in rows],
        "shard_over_device_put": [row["shard_over_device_put"] for row in rows],
        "exponent": power_law_exponent(list(map(float, counts)), shard_s),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--devices", type=int, required=True)
    parser.add_argument("--sweep-bytes", action="store_true")
    args = parser.parse_args()
    import jax

    jax.config.update("jax_num_cpu_devices", args.devices)
    if jax.device_count() != args.devices:
        raise SystemExit(f"asked for {args.devices} devices, JAX has {jax.device_count()}")
    sweep = bytes_sweep if args.sweep_bytes else lambda: _time_shard(DEVICE_SWEEP_MEGABYTES, 25)
    result = sweep()
    result["devices"] = args.devices
    print(json.dumps(result))


if __name__ == "__main__":
    main()
