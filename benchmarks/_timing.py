"""Interleaved timing: every candidate runs once per round, so drift hits all alike.

The order within a round is shuffled (with a fixed seed), so no candidate always
follows the same one: a candidate that leaves caches cold or memory to free would
otherwise tax its fixed successor.

Absolute times on a shared machine are noise; ratios of medians taken side by side
in one process are not. Results are freed outside the timed region.
"""

from __future__ import annotations

import gc
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax

Timings = dict[str, list[float]]


def interleaved(
    candidates: dict[str, Callable[[], Any]],
    rounds: int,
    calls_per_sample: int = 1,
    before_sample: Callable[[], Any] | None = None,
) -> Timings:
    """Seconds per call of each candidate, one sample per round, in shuffled order.

    Each sample runs the candidate `calls_per_sample` times, waiting for every
    result with ``jax.block_until_ready``, and records the mean time per call.
    `before_sample`, when given, runs before each sample's clock starts: on a cluster,
    a barrier, so that a candidate that waits for the other hosts does not also pay
    for the lead one host took during the previous sample.
    """
    names = list(candidates)
    orders = random.Random(0)
    for run in candidates.values():  # warm-up: compile, fill caches, touch memory
        jax.block_until_ready(run())
        jax.block_until_ready(run())
    gc.collect()
    times: Timings = {name: [] for name in names}
    for _ in range(rounds):
        for name in orders.sample(names, len(names)):
            run, result = candidates[name], None
            if before_sample is not None:
                before_sample()
            start = time.perf_counter()
            for _ in range(calls_per_sample):
                result = jax.block_until_ready(run())
            elapsed = time.perf_counter() - start
            del result
            times[name].append(elapsed / calls_per_sample)
    return times


def medians(times: Timings) -> dict[str, float]:
    """The median of each candidate's samples, in seconds."""
    return {name: statistics.median(samples) for name, samples in times.items()}


def paired_ratio(times: Timings, numerator: str, denominator: str) -> float:
    """The median over rounds of numerator/denominator, taken in the same round."""
    pairs = zip(times[numerator], times[denominator], strict=True)
    return statistics.median(a / b for a, b in pairs)


def power_law_exponent(sizes: list[float], seconds: list[float]) -> float:
    """The slope of log(seconds) against log(size): 1 is linear, 0 is constant."""
    import numpy as np

    slope, _ = np.polyfit(np.log(sizes), np.log(seconds), 1)
    return float(slope)
