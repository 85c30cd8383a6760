"""Pipeline throughput over an epoch, and how well prefetch overlaps input with a step.

Throughput: batches per second over one epoch of an in-memory source, for a plain
loop of slicing and ``jax.device_put``, for `Pipeline` with the seed's shard stage,
and for `Pipeline` wrapped in `prefetch_to_device`.

Overlap: a training step that takes t_step ms (the host waits for the accelerator, here
a sleep after the batch is ready) on batches that take t_input ms to produce (a numpy
augmentation) and place. Without prefetch a step costs t_step + t_input; with it,
max(t_step, t_input).

Alone, it measures the throughput of tiny batches (32 batches of 128 32x32x3 images, an
epoch in tens of milliseconds) and prints `Pipeline` with a shard stage over the plain
loop, the ratio that must be at least ``TINY_BATCH_TARGET`` (``make bench`` runs both).
Beside it, three controls over the same plain loop (`tiny_batch_controls`):
`ArraySharder` alone in the loop, the loop with `SPIN_US` microseconds of Python before
each copy (what any layer above `device_put` costs at the least), and `Pipeline` with no
stage, its batches placed by the loop with `device_put` (the pipeline's share alone):

    python -m benchmarks.throughput [--rounds 60] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding

from benchmarks._timing import interleaved, medians, paired_ratio
from benchmarks.placement import data_sharding, image_batch
from datarax import prefetch_to_device
from datarax.pipeline import Pipeline
from datarax.sharding import ArraySharder

TINY_BATCH_TARGET = 0.95  # Pipeline with a shard stage / plain loop, throughput
SPIN_US = 3.0  # the control's Python time before each copy
PLAIN = "plain loop (slice + device_put)"
PIPELINE_PUT = "Pipeline (no stage), then device_put"


class _Shard(nnx.Module):
    """The seed documentation's shard stage."""

    def __init__(self, sharder: ArraySharder, sharding: NamedSharding):
        self.sharder, self.sharding = sharder, sharding

    def __call__(self, batch: Any) -> Any:
        return self.sharder.shard(batch, self.sharding)


def _consume(batches: Iterable[Any]) -> int:
    count = 0
    for batch in batches:
        jax.block_until_ready(batch)
        count += 1
    return count


def _plain_loop(
    source: dict[str, np.ndarray],
    sharding: NamedSharding,
    batch_size: int,
    place: Callable[[Any, NamedSharding], Any],
    before: Callable[[], None] | None = None,
) -> Callable[[], int]:
    """An epoch of the plain loop: slice each batch, `place` it (after `before`, if any)
    and wait for it, one batch at a time; returns the batches it placed."""

    rows = len(next(iter(source.values())))

    def batches() -> Iterator[Any]:
        for start in range(0, rows - batch_size + 1, batch_size):
            if before is not None:
                before()
            yield place({k: v[start : start + batch_size] for k, v in source.items()}, sharding)

    return lambda: _consume(batches())


def pipeline_throughput(rows: int = 4096, batch_size: int = 128, rounds: int = 60) -> dict:
    """Batches per second over one epoch for the three ways of feeding devices."""
    source, sharding = image_batch(rows, side=32), data_sharding()
    sharder = ArraySharder()
    shard_stage = Pipeline(source=source, stages=[_Shard(sharder, sharding)], batch_size=batch_size)
    host_only = Pipeline(source=source, batch_size=batch_size)
    num_batches = rows // batch_size

    times = interleaved(
        {
            PLAIN: _plain_loop(source, sharding, batch_size, jax.device_put),
            "Pipeline with shard stage": lambda: _consume(shard_stage),
            "Pipeline + prefetch_to_device": lambda: _consume(
                prefetch_to_device(host_only, size=2, sharding=sharding)
            ),
        },
        rounds,
    )
    seconds = medians(times)
    return {
        "rows": rows,
        "batch_size": batch_size,
        "batches_per_epoch": num_batches,
        "batches_per_s": {name: num_batches / s for name, s in seconds.items()},
        # plain time / other time, round by round: the other's throughput relative to plain.
        "shard_stage_throughput_ratio": paired_ratio(times, PLAIN, "Pipeline with shard stage"),
        "prefetch_throughput_ratio": paired_ratio(times, PLAIN, "Pipeline + prefetch_to_device"),
    }


def tiny_batch_controls(rows: int = 4096, batch_size: int = 128, rounds: int = 60) -> dict:
    """Throughput over the plain loop of the same loop through `ArraySharder.shard`, of
    the loop that first spins `SPIN_US` µs a batch, and of `Pipeline` with no stage
    whose batches the loop places with `device_put` (medians of per-round ratios)."""
    source, sharding = image_batch(rows, side=32), data_sharding()
    sharder = ArraySharder()
    unplaced = Pipeline(source=source, batch_size=batch_size)

    def spin() -> None:
        until = time.perf_counter() + SPIN_US / 1e6
        while time.perf_counter() < until:
            pass

    def loop(place: Any, before: Callable[[], None] | None = None) -> Callable[[], int]:
        return _plain_loop(source, sharding, batch_size, place, before)

    spun = f"{SPIN_US:g} us of Python, then device_put"
    times = interleaved(
        {
            PLAIN: loop(jax.device_put),
            "ArraySharder.shard": loop(sharder.shard),
            spun: loop(jax.device_put, spin),
            PIPELINE_PUT: lambda: _consume(jax.device_put(b, sharding) for b in unplaced),
        },
        rounds,
    )
    batches = rows // batch_size
    return {
        "spin_us": SPIN_US,
        "per_batch_us": {n: s / batches * 1e6 for n, s in medians(times).items()},
        "sharder_throughput_ratio": paired_ratio(times, PLAIN, "ArraySharder.shard"),
        "spin_throughput_ratio": paired_ratio(times, PLAIN, spun),
        "pipeline_throughput_ratio": paired_ratio(times, PLAIN, PIPELINE_PUT),
    }


def _augment(batch: dict[str, np.ndarray], passes: int) -> dict[str, np.ndarray]:
    image = batch["image"].astype(np.float32)
    for _ in range(passes):
        image = (image[:, ::-1] * np.float32(1 / 255) - np.float32(0.5)) * np.float32(255)
    return {"image": image, "label": batch["label"]}


def _per_step(batches: Iterable[Any], step_s: float, steps: int) -> float:
    """Mean seconds per step of a loop that waits `step_s` after each batch is ready."""
    iterator = iter(batches)
    jax.block_until_ready(next(iterator))  # the first batch: start-up, not steady state
    start = time.perf_counter()
    for _ in range(steps):
        jax.block_until_ready(next(iterator))
        time.sleep(step_s)
    elapsed = (time.perf_counter() - start) / steps
    close = getattr(iterator, "close", None)
    if callable(close):
        close()
    return elapsed


def _timed(run: Any) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def prefetch_overlap(
    produce_ms: float = 30.0, steps: int = 20, rounds: int = 7, size: int = 2
) -> dict[str, Any]:
    """Time per step with and without prefetch, for T = D/2, D and 2D.

    D is calibrated once; each case then measures D again in every round, next to
    that round's runs, and reports the median over rounds of the prefetch time per
    step over max(T, that round's D): on a shared machine D drifts by tens of
    percent within a minute, and a ratio taken within one round cancels the drift.
    """
    sharding = data_sharding()
    source = image_batch(64 * (steps + 2), side=64)
    passes = 1

    def batches() -> Iterable[dict[str, np.ndarray]]:
        return Pipeline(source=source, stages=[lambda b: _augment(b, passes)], batch_size=64)

    sharder = ArraySharder()

    def serial() -> Iterable[Any]:
        return (sharder.shard(batch, sharding) for batch in batches())

    # Calibrate the augmentation so one batch costs about produce_ms to make and place:
    # a batch with one pass, after a warm-up run, plus the cost of a pass, from the
    # median of 5 timings of 1 and of 21 passes (a difference of 4 passes, or a single
    # timing, was off by a factor of two on a loaded machine).
    _per_step(serial(), 0.0, steps)
    one_pass = statistics.median(_per_step(serial(), 0.0, steps) for _ in range(3))
    sample = next(iter(batches()))
    seconds = {
        count: statistics.median(_timed(lambda n=count: _augment(sample, n)) for _ in range(5))
        for count in (1, 21)
    }
    per_pass = max((seconds[21] - seconds[1]) / 20, 1e-5)
    passes = max(1, 1 + round((produce_ms / 1e3 - one_pass) / per_pass))
    produce_s = statistics.median(_per_step(serial(), 0.0, steps) for _ in range(5))
    cases = []
    for factor in (0.5, 1.0, 2.0):
        step_s = factor * produce_s
        samples: dict[str, list[float]] = {"produce": [], "serial": [], "prefetch": []}
        for _ in range(rounds):
            samples["produce"].append(_per_step(serial(), 0.0, steps))
            samples["serial"].append(_per_step(serial(), step_s, steps))
            samples["prefetch"].append(
                _per_step(
                    prefetch_to_device(batches(), size=size, sharding=sharding), step_s, steps
                )
            )
        pairs = zip(samples["prefetch"], samples["produce"], strict=True)
        median_produce_s = statistics.median(samples["produce"])
        cases.append(
            {
                "T_ms": step_s * 1e3,
                "D_ms": median_produce_s * 1e3,
                "serial_ms": statistics.median(samples["serial"]) * 1e3,
                "prefetch_ms": statistics.median(samples["prefetch"]) * 1e3,
                "bound_ms": max(step_s, median_produce_s) * 1e3,
                "prefetch_over_bound": statistics.median(
                    prefetch_s / max(step_s, produce_s) for prefetch_s, produce_s in pairs
                ),
            }
        )
    return {
        "augment_passes": passes,
        "calibrated_D_ms": produce_s * 1e3,
        "steps": steps,
        "buffer_size": size,
        "cases": cases,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--out", type=Path, help="FILE.json: this run's results")
    args = parser.parse_args()
    jax.config.update("jax_num_cpu_devices", 8)  # the mesh of make bench
    before = os.getloadavg()
    results = pipeline_throughput(rounds=args.rounds)
    results["controls"] = tiny_batch_controls(rounds=args.rounds)
    results |= {"load_average_before": before, "load_average_after": os.getloadavg()}
    print("batches/s:", {name: round(rate) for name, rate in results["batches_per_s"].items()})
    ratio = results["shard_stage_throughput_ratio"]
    verdict = "PASS" if ratio >= TINY_BATCH_TARGET else "MISS"
    print(
        f"tiny batches: Pipeline with shard stage / plain loop (throughput) {ratio:.3f}, "
        f"target >= {TINY_BATCH_TARGET}: {verdict}; load average {before} before, "
        f"{results['load_average_after']} after"
    )
    controls = results["controls"]
    sharder, spin = controls["sharder_throughput_ratio"], controls["spin_throughput_ratio"]
    print(
        f"controls over the plain loop: ArraySharder.shard {sharder:.3f}; "
        f"{SPIN_US:g} us of Python a batch {spin:.3f}; "
        f"{PIPELINE_PUT} {controls['pipeline_throughput_ratio']:.3f}; us a batch:",
        {name: round(us, 1) for name, us in controls["per_batch_us"].items()},
    )
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=1) + "\n")
        print("wrote", args.out)


if __name__ == "__main__":
    main()
