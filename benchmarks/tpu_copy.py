"""The copy of one image batch to the first device: how its shape sets the speed.

Places 38.5 MB of uint8 (a 256 x 224 x 224 x 3 image batch) on ``jax.devices()[0]`` in
four shapes, and with ``ArraySharder.shard`` as it sends by default (``send_flat="auto"``:
flat, and in pieces joined on the chip), with ``send_flat=True`` and as it is
(``send_flat=False``), interleaved over rounds (medians). On a TPU the shape matters: the
chip's memory is tiled over the two minor dimensions, and an array whose last dimension
is 3 is rearranged byte by byte on the way in; and one array crosses in one stream. Also
places the same batch on 8 CPU devices by default and as it is, the ratio that must stay
within 5 %. Needs only jax, flax and numpy, so
it runs with a machine's own ``python3`` from the repository root::

    PYTHONPATH=. python3 -m benchmarks.tpu_copy [--out docs/benchmarks] [--rounds 20]

Writes ``tpu_copy.json`` and ``tpu_copy.md`` to ``--out`` (named by the platform of the
first device: ``tpu_copy.json`` on a TPU, ``cpu_copy.json`` elsewhere).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path
from typing import Any

import jax

jax.config.update("jax_num_cpu_devices", 8)

import numpy as np  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from benchmarks._timing import interleaved, medians, paired_ratio  # noqa: E402
from datarax._compat import single_device_sharding  # noqa: E402
from datarax.sharding import ArraySharder  # noqa: E402

SHAPED = "uint8 (256, 224, 224, 3)"
FLAT = "the same bytes, flat (256, 150528)"
CHANNELS_FIRST = "uint8 (256, 3, 224, 224)"
FLOAT = "float32 (64, 224, 224, 3), 38.5 MB"
SHARD = "ArraySharder.shard, uint8 (256, 224, 224, 3)"
SHARD_FLAT = "ArraySharder.shard(send_flat=True), uint8 (256, 224, 224, 3)"
SHARD_AS_IS = "ArraySharder.shard(send_flat=False), uint8 (256, 224, 224, 3)"


def measure(rounds: int) -> dict[str, Any]:
    """Milliseconds and GB/s per case on the first device, and the CPU ratio."""
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (256, 224, 224, 3), dtype=np.uint8)
    arrays = {
        SHAPED: image,
        FLAT: image.reshape(256, -1),
        CHANNELS_FIRST: np.ascontiguousarray(image.transpose(0, 3, 1, 2)),
        FLOAT: rng.random((64, 224, 224, 3), dtype=np.float32),
    }
    device = jax.devices()[0]
    one = single_device_sharding(device)
    sharder = ArraySharder()
    candidates = {name: (lambda a=array: jax.device_put(a, one)) for name, array in arrays.items()}
    candidates[SHARD] = lambda: sharder.shard(image, one)
    candidates[SHARD_FLAT] = lambda: sharder.shard(image, one, send_flat=True)
    candidates[SHARD_AS_IS] = lambda: sharder.shard(image, one, send_flat=False)
    for send_flat in ("auto", True):
        result = np.asarray(sharder.shard(image, one, send_flat=send_flat))
        assert np.array_equal(result, image), f"send_flat={send_flat!r} changed the batch"
    times = interleaved(candidates, rounds)
    copies = {
        name: {"ms": seconds * 1e3, "GB_per_s": image.nbytes / seconds / 1e9}
        for name, seconds in medians(times).items()
    }
    cpu = jax.devices("cpu")[:8]
    on_cpu = NamedSharding(jax.make_mesh((len(cpu),), ("data",), devices=cpu), P("data"))
    cpu_times = interleaved(
        {
            "as is": lambda: sharder.shard({"image": image}, on_cpu, send_flat=False),
            "auto": lambda: sharder.shard({"image": image}, on_cpu),
        },
        rounds,
    )
    return {
        "device": str(device),
        "platform": device.platform,
        "device_kind": device.device_kind,
        "jax": jax.__version__,
        "cpus": os.cpu_count(),
        "rounds": rounds,
        "copies": copies,
        "auto_speedup_on_device": paired_ratio(times, SHARD_AS_IS, SHARD),
        "auto_speedup_over_device_put": paired_ratio(times, SHAPED, SHARD),
        "cpu_auto_over_as_is": paired_ratio(cpu_times, "auto", "as is"),
        "machine": platform.platform(),
    }


def markdown(result: dict[str, Any]) -> str:
    """The copies as a table, and the ratios in a sentence each."""
    lines = [
        f"One 38.5 MB batch onto `{result['device']}` ({result['device_kind']}), jax "
        f"{result['jax']}, median of {result['rounds']} interleaved rounds:",
        "",
        "| what is copied (38.5 MB unless said) | ms | GB/s |",
        "| --- | --- | --- |",
    ]
    for name, copy in result["copies"].items():
        lines.append(f"| {name} | {copy['ms']:.1f} | {copy['GB_per_s']:.2f} |")
    lines += [
        "",
        f"- `shard` (by default) against `shard(send_flat=False)`: "
        f"{result['auto_speedup_on_device']:.2f}x as fast on this device, and "
        f"{result['auto_speedup_over_device_put']:.2f}x as fast as `jax.device_put`.",
        f"- On 8 CPU devices, `shard` (by default) / `shard(send_flat=False)`: "
        f"{result['cpu_auto_over_as_is']:.3f} (target: at most 1.05).",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks"))
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    result = measure(args.rounds)
    stem = "tpu_copy" if result["platform"] == "tpu" else f"{result['platform']}_copy"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / f"{stem}.md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
