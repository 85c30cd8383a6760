"""Timing a loader by whole epochs, the same way whatever the loader is.

A loader is given as a function that opens an endless stream of batches (epoch after
epoch, with no pause between them). One run of a loader:

1. **First batch**: the seconds from opening the stream, which builds the loader, to its
   first batch. This is the start-up: processes started, the source and stages sent
   to them, the first batch made.
2. **The rest of the first epoch, untimed.** A loader with worker processes fills its
   buffers while it starts; the first epoch absorbs that, so the clock starts at the
   same point for every loader: the first batch of the second epoch.
3. **`epochs` epochs of host work**, each timed alone: milliseconds per batch.
4. **`epochs` epochs of host work and placement**, each timed alone: every batch is
   handed to ``place`` (``jax.device_put`` onto one device, waited for) before the
   next is asked for. Left out when there is no ``place``.

The placed epochs come last: while placement slows the consumer, the workers run
ahead and fill their buffers, and an unplaced epoch after that would be handed batches
made in advance. Going from unplaced to placed epochs hands none. Each batch is
dropped as soon as it is used, so a loader that lends its memory (shared-memory slots)
gets it back as in a training loop.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class EpochTimes:
    """One run of one loader: its start-up and its epochs, in milliseconds per batch."""

    first_batch_s: float
    first_batch: str = ""  # what ``check`` said of the first batch (a digest, say)
    host_ms: list[float] = field(default_factory=list)
    placed_ms: list[float] = field(default_factory=list)
    run_s: float = 0.0  # the whole run: opening, the first batch, every epoch


def _epoch(stream: Iterator[Any], batches: int, place: Callable[[Any], Any] | None) -> float:
    """Milliseconds per batch over the next `batches` batches of `stream`."""
    start = time.perf_counter()
    for _ in range(batches):
        batch = next(stream)
        if place is not None:
            place(batch)
        del batch
    return (time.perf_counter() - start) / batches * 1e3


def time_epochs(
    open_stream: Callable[[], Iterator[Any]],
    batches_per_epoch: int,
    epochs: int,
    place: Callable[[Any], Any] | None = None,
    check: Callable[[Any], str] | None = None,
) -> EpochTimes:
    """Times one run of the loader `open_stream` opens, by the rule in this module's
    docstring; `check` looks at the first batch, after its clock stopped."""
    start = time.perf_counter()
    stream = open_stream()
    batch = next(stream)
    times = EpochTimes(first_batch_s=time.perf_counter() - start)
    if check is not None:
        times.first_batch = check(batch)
    del batch
    for _ in range(batches_per_epoch - 1):
        next(stream)
    try:
        times.host_ms = [_epoch(stream, batches_per_epoch, None) for _ in range(epochs)]
        if place is not None:
            times.placed_ms = [_epoch(stream, batches_per_epoch, place) for _ in range(epochs)]
        times.run_s = time.perf_counter() - start
    finally:
        close_stream(stream)
        del stream
        gc.collect()
    return times


def close_stream(stream: Any) -> None:
    """Closes `stream` where it can be: a generator's frame (a pipeline's workers with
    it), a Grain iterator's processes."""
    close = getattr(stream, "close", None)
    if callable(close):
        close()
