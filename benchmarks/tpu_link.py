"""Where the time of a host-to-chip copy goes: the link, the host, the chip's memory.

On one accelerator (the first device), measures, medians of interleaved rounds:

- the chip's own memory: a jitted ``x.sum(axis=0)`` over 2 GiB of float32 reads every
  byte once, ``x * 2`` reads and writes every byte once (bytes per second);
- copies of the flat uint8 image batch, ``(rows, 150528)``, of 16 to 1024 rows, from
  ordinary (pageable) host memory, ``jax.device_put(array, chip)``;
- the same copies from host memory the runtime has pinned for the device
  (``memory_kind="pinned_host"``), which the chip's DMA engines read directly;
- a plain host memory copy of the same bytes (``np.copyto``), one thread;
- the layout the chip picks for the image batch in four shapes (``Array.format``).

Needs only jax and numpy::

    python3 benchmarks/tpu_link.py --out docs/benchmarks [--rounds 10]

Writes ``tpu_link.json`` and ``tpu_link.md`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np

from datarax._compat import single_device_sharding

ROW_BYTES = 224 * 224 * 3


def _seconds(run: Any, rounds: int) -> float:
    jax.block_until_ready(run())  # warm-up
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        jax.block_until_ready(run())
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def _chip_memory(on_chip: Any, rounds: int) -> dict[str, float]:
    big = jax.device_put(np.ones((512 << 10, 1024), np.float32), on_chip)  # 2 GiB
    read = jax.jit(lambda x: x.sum(axis=0))
    read_write = jax.jit(lambda x: x * 2)
    return {
        "chip memory, read, GB/s": big.nbytes / _seconds(lambda: read(big), rounds) / 1e9,
        "chip memory, read + write, GB/s": 2
        * big.nbytes
        / _seconds(lambda: read_write(big), rounds)
        / 1e9,
    }


def measure(rounds: int) -> dict[str, Any]:
    """Every figure of the module's docstring, on the first device."""
    chip = jax.devices()[0]
    on_chip = single_device_sharding(chip)
    pinned = single_device_sharding(chip, memory_kind="pinned_host")
    rng = np.random.default_rng(0)
    results: dict[str, Any] = {
        "device": f"{chip.platform} {chip.device_kind}",
        "jax": jax.__version__,
        **_chip_memory(on_chip, rounds),
        "copies": [],
        "layouts": {},
    }
    for rows in (16, 64, 256, 1024):
        flat = rng.integers(0, 256, (rows, ROW_BYTES), dtype=np.uint8)
        held = jax.device_put(flat, pinned)
        target = np.empty_like(flat)
        pageable_s = _seconds(lambda a=flat: jax.device_put(a, on_chip), rounds)
        pinned_s = _seconds(lambda a=held: jax.device_put(a, on_chip), rounds)
        host_s = _seconds(lambda a=flat, t=target: np.copyto(t, a), rounds)
        results["copies"].append(
            {
                "MB": flat.nbytes / 1e6,
                "pageable GB/s": flat.nbytes / pageable_s / 1e9,
                "pinned GB/s": flat.nbytes / pinned_s / 1e9,
                "host memcpy GB/s": flat.nbytes / host_s / 1e9,
            }
        )
    image = rng.integers(0, 256, (256, 224, 224, 3), dtype=np.uint8)
    shapes = {
        "uint8 (256, 224, 224, 3)": image,
        "uint8 (256, 150528)": image.reshape(256, -1),
        "uint8 (256, 3, 224, 224)": np.ascontiguousarray(image.transpose(0, 3, 1, 2)),
        "float32 (64, 224, 224, 3)": rng.random((64, 224, 224, 3), dtype=np.float32),
    }
    for name, array in shapes.items():
        placed = jax.device_put(array, on_chip)
        held = jax.device_put(array, pinned)
        results["layouts"][name] = {
            "layout": str(getattr(placed, "format", "(not shown by this jax)")),
            "pageable GB/s": array.nbytes
            / _seconds(lambda a=array: jax.device_put(a, on_chip), rounds)
            / 1e9,
            "pinned GB/s": array.nbytes
            / _seconds(lambda a=held: jax.device_put(a, on_chip), rounds)
            / 1e9,
        }
    return results


def report(results: dict[str, Any]) -> str:
    """The results as a markdown page."""
    lines = [
        f"Copies onto {results['device']} (jax {results['jax']}), medians:",
        "",
        f"- the chip's own memory: {results['chip memory, read, GB/s']:.0f} GB/s read, "
        f"{results['chip memory, read + write, GB/s']:.0f} GB/s read and written (2 GiB)",
        "",
        "| MB | from pageable host memory, GB/s | from pinned host memory, GB/s "
        "| host memcpy, GB/s |",
        "| --- | --- | --- | --- |",
    ]
    for copy in results["copies"]:
        lines.append(
            f"| {copy['MB']:.1f} | {copy['pageable GB/s']:.2f} | {copy['pinned GB/s']:.2f} "
            f"| {copy['host memcpy GB/s']:.2f} |"
        )
    lines += ["", "| 38.5 MB as | layout the chip picks | pageable GB/s | pinned GB/s |"]
    lines += ["| --- | --- | --- | --- |"]
    for name, found in results["layouts"].items():
        layout = found["layout"].split(", sharding=")[0]
        lines.append(
            f"| {name} | `{layout}` | {found['pageable GB/s']:.2f} | {found['pinned GB/s']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    """Measures and writes the two files."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks"))
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    results = measure(args.rounds)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tpu_link.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    (args.out / "tpu_link.md").write_text(report(results), encoding="utf-8")
    print(report(results))


if __name__ == "__main__":
    main()
