"""Where a pipeline's time goes, batch by batch, measured as it runs.

Every batch records the seconds spent reading its rows, in the host stages, moving it
between processes (into and out of its shared-memory slot), waiting for a worker, placing
it on devices (global batches), in the device stages, and the time the caller spent
between taking this batch and asking for the next (its step). With workers, reading,
the stages and the move into the slot happen in a worker, side by side with the other
workers and with this process; the rest happens here. A few clock reads per batch: the
cost is well under a microsecond, so it is always on, over the last `KEEP` batches. A
report can be asked for from any thread while another iterates: it reads a copy of the
times taken in one step (``deque.copy``, atomic as ``deque.append`` is).
"""

from __future__ import annotations

import collections
import dataclasses
import time

KEEP = 256  # batches a pipeline remembers the times of
PARTS: tuple[str, ...] = ("read", "stages", "move", "wait", "place", "device_stages", "step")
WHERE: dict[str, str] = {
    "read": "reading rows",
    "stages": "host stages",
    "move": "moving between processes",
    "wait": "waiting for a worker",
    "place": "copying to devices",
    "device_stages": "device stages",
    "step": "your step (between batches)",
}


@dataclasses.dataclass(init=False)  # every part starts at its default, set on the class
class BatchTimes:
    """The seconds one batch spent in each part (see the module's docstring); made once a
    batch, so making one sets nothing: a part not set reads its default.

    Example:
        >>> times = BatchTimes()
        >>> times.read = 0.25
        >>> times.read, times.wait
        (0.25, 0.0)
    """

    read: float = 0.0
    stages: float = 0.0
    move: float = 0.0
    wait: float = 0.0
    place: float = 0.0
    device_stages: float = 0.0
    step: float = 0.0
    start: float = 0.0  # waiting for worker processes to start (the first batch)
    copied: int = 0  # bytes copied to cross between processes (`output_array` saves them)


@dataclasses.dataclass(frozen=True)
class TimeReport:
    """Mean milliseconds per batch in each part, over the last `batches` batches.

    Attributes:
        batches: how many batches the means are over.
        workers: the pipeline's worker processes (0: everything in this process).
        ms: each part's mean milliseconds per batch, by name (`PARTS`).
        in_workers: the parts that run in the workers, side by side with this process
            (with ``workers="auto"``, once the workers chosen have taken over).
        start_s: seconds spent waiting for worker processes to start, once; left out of
            the means, where it would count as waiting.
        workers_choice: with ``workers="auto"``, what was chosen, why, and when the
            workers took over.
        copied_mb: mean megabytes a batch copied to cross between processes (into its
            shared-memory slot, or pickled); arrays a stage made with `output_array`
            in the slot are not copied. 0 without workers.
    """

    batches: int
    workers: int
    ms: dict[str, float]
    in_workers: tuple[str, ...]
    start_s: float = 0.0
    workers_choice: str = ""
    copied_mb: float = 0.0

    def table(self) -> str:
        """One line per part, its mean milliseconds per batch and where it ran."""
        lines = [f"mean ms per batch over the last {self.batches} batches"]
        for part in PARTS:
            where = "a worker" if part in self.in_workers else "this process"
            lines.append(f"  {WHERE[part]:<29} {self.ms[part]:9.2f}  ({where})")
        if self.workers:
            lines.append(f"copied between processes: {self.copied_mb:.2f} MB a batch")
        if self.start_s:
            lines.append(f"starting the workers took {self.start_s:.2f} s, once")
        if self.workers_choice:
            lines.append(self.workers_choice)
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


class Timings:
    """The times of a pipeline's last `KEEP` batches, and the clock of the caller's step."""

    def __init__(self) -> None:
        self._batches: collections.deque[BatchTimes] = collections.deque(maxlen=KEEP)
        self._returned: float | None = None  # when the last batch went to the caller

    def returned(self, times: BatchTimes, asked: float) -> None:
        """A batch with `times`, asked for at `asked` (``time.perf_counter``), goes to the
        caller now: the time from the last batch to `asked` was the caller's step."""
        last = self._returned
        times.step = 0.0 if last is None else asked - last
        self._batches.append(times)
        self._returned = time.perf_counter()

    def epoch_ended(self) -> None:
        """The time until the next epoch's first batch is not a step."""
        self._returned = None

    def report(self, workers: int, in_workers: bool, choice: str) -> TimeReport:
        """The means over the batches remembered (safe from any thread)."""
        batches = self._batches.copy()  # one step: no batch is added halfway through
        count = len(batches)
        ms = {
            part: 1e3 * sum(getattr(times, part) for times in batches) / max(count, 1)
            for part in PARTS
        }
        in_worker = ("read", "stages", "move") if in_workers else ()
        start = sum(times.start for times in batches)
        copied_mb = sum(times.copied for times in batches) / max(count, 1) / 1e6
        return TimeReport(count, workers, ms, in_worker, start, choice, copied_mb)
