"""Timing a loader from its first batch to its last, the same way whatever the loader is.

A loader is given as a function that opens an endless stream of batches (epoch after
epoch, with no pause between them). One run of a loader opens a fresh stream and takes
``epochs`` whole epochs from it, as a training run does:

1. **First batch**: the seconds from opening the stream, which builds the loader, to its
   first batch. This is the start-up: processes started, the source and stages sent
   to them, the first batch made.
2. **First batch to last**: the seconds from the first batch's arrival to the last's.
   Its milliseconds a batch (over the batches after the first) is the loader's figure:
   every batch of the run must be made within it, so a loader that reads far ahead
   cannot count batches it made earlier as speed, as a window timed after a warm-up
   would (its later epochs are served from memory while its earlier ones were made).
3. **Each epoch's time**, beside it: the first epoch from the first batch to its last
   batch, every later one from the previous epoch's last batch to its own. They add up
   to the first-to-last time, and show how the loader's pace changes over the run.

Every batch is handed to ``finish`` as it arrives and before the clock reads its
arrival: ``jax.block_until_ready`` for batches placed by the loader, or placing it and
waiting. Each batch is dropped as soon as it is used, so a loader that lends its memory
(shared-memory slots) gets it back as in a training loop.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RunTimes:
    """One run of one loader: its start-up, its first batch to its last, its epochs."""

    first_batch_s: float
    batches_per_epoch: int
    first_to_last_s: float = 0.0
    epoch_s: list[float] = field(default_factory=list)  # seconds each epoch took
    first_batch: str = ""  # what ``check`` said of the first batch (a digest, say)

    @property
    def batches(self) -> int:
        return self.batches_per_epoch * len(self.epoch_s)

    @property
    def ms_per_batch(self) -> float:
        """Milliseconds a batch from the first batch to the last, over the batches
        after the first: the loader's figure."""
        return self.first_to_last_s / max(self.batches - 1, 1) * 1e3

    @property
    def epoch_ms(self) -> list[float]:
        """Each epoch's milliseconds a batch (the first over its batches after the first)."""
        per = self.batches_per_epoch
        return [s / max(per - (at == 0), 1) * 1e3 for at, s in enumerate(self.epoch_s)]

    def as_json(self) -> dict[str, Any]:
        """Every field, with the milliseconds a batch worked out."""
        return {
            "first_batch_s": self.first_batch_s,
            "first_to_last_s": self.first_to_last_s,
            "ms_per_batch": self.ms_per_batch,
            "batches": self.batches,
            "batches_per_epoch": self.batches_per_epoch,
            "epoch_s": self.epoch_s,
            "epoch_ms": self.epoch_ms,
            "first_batch": self.first_batch,
        }


def time_run(
    open_stream: Callable[[], Iterator[Any]],
    batches_per_epoch: int,
    epochs: int,
    finish: Callable[[Any], Any] | None = None,
    check: Callable[[Any], str] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> RunTimes:
    """Times one run of `epochs` epochs of the loader `open_stream` opens, by the rule
    in this module's docstring; `check` looks at the first batch, its time left out of
    both clocks. `clock` reads the seconds (a test gives one that only its stream moves).

    Example:
        >>> times = time_run(lambda: iter(range(100)), batches_per_epoch=4, epochs=3)
        >>> times.batches, len(times.epoch_s), len(times.epoch_ms)
        (12, 3, 3)
        >>> abs(sum(times.epoch_s) - times.first_to_last_s) < 1e-9
        True
    """
    if batches_per_epoch < 1 or epochs < 1 or batches_per_epoch * epochs < 2:
        raise ValueError(
            f"A run needs at least 2 batches to time from the first to the last, got "
            f"{epochs} epoch(s) of {batches_per_epoch} batch(es): take more epochs."
        )
    start = clock()
    stream = open_stream()
    try:
        batch = next(stream)
        if finish is not None:
            finish(batch)
        first = clock()
        times = RunTimes(first_batch_s=first - start, batches_per_epoch=batches_per_epoch)
        if check is not None:
            times.first_batch = check(batch)
            first = clock()  # the check's own time is left out
        del batch
        last, taken = first, 1
        for _ in range(epochs):
            while taken < batches_per_epoch * (len(times.epoch_s) + 1):
                batch = next(stream)
                if finish is not None:
                    finish(batch)
                del batch
                taken += 1
            arrived = clock()
            times.epoch_s.append(arrived - last)
            last = arrived
        times.first_to_last_s = last - first
    finally:
        close_stream(stream)
        del stream
        gc.collect()
    return times


def close_stream(stream: Any) -> None:
    """Closes `stream` where it can be: a generator's frame (a pipeline's workers with
    it), a Grain iterator's processes, a prefetcher's thread."""
    close = getattr(stream, "close", None)
    if callable(close):
        close()
