"""Host batches: the rows read from the source and run through the host stages, in this
process (``workers=0``), in worker processes (`datarax.pipeline.workers`), or, with
``workers="auto"``, in this process for the first batches and then as it decides.

All give the same batches in the same order. In this process, the stages run with the
pipeline's `crossing_hosts` in `FEEDING`, so a stage that builds global arrays (a
`JaxProcessSharder`'s ``shard``) makes the pipeline agree with the other hosts first.

The rule of ``"auto"``, in one sentence: when the median of the first `AUTO_BATCHES`
batches' times (so a one-off warm-up does not count) is at least `AUTO_WORTH` times what
moving a batch between processes costs, as many workers as that ratio, at most one per
usable core; else none, and none on one usable core, for stages that return jax.Arrays
(which cannot leave a worker) or for a source or stages that cannot be pickled. The
source and stages are pickled only once workers are chosen. Chosen workers start in the
background: this process goes on making batches until every worker is ready, and they
take over at the next batch, so no batch waits for their start.
"""

from __future__ import annotations

import math
import time
import weakref
from collections.abc import Callable
from functools import partial
from typing import Any, Protocol

import jax
import numpy as np

from datarax._exchange import FEEDING
from datarax.errors import NotPicklableError
from datarax.pipeline._options import Workers
from datarax.pipeline._order import EpochOrder
from datarax.pipeline._sources import ArraySource, RandomAccessSource, read_rows
from datarax.pipeline._stages import Stages
from datarax.pipeline._timing import BatchTimes
from datarax.pipeline.workers import HostWorkers, pickled_for_workers, usable_cores

Batch = Any
Source = ArraySource | RandomAccessSource
AUTO_BATCHES = 3  # batches "auto" makes here, timed, before it chooses
AUTO_WORTH = 4  # a batch must take this many times its move to be worth workers
MOVE_S = 0.5e-3  # what a batch costs to hand over between processes, before its bytes
MOVE_BYTES_PER_S = 4e9  # one copy into shared memory


class HostBatches(Protocol):
    """Makes batch `index` of `epoch`, which ends before batch `end` (the next epoch
    before `next_end`), recording its times in `times`; `workers` is how many worker
    processes make them, `in_workers` whether they make them now."""

    @property
    def workers(self) -> int: ...

    @property
    def in_workers(self) -> bool: ...

    def batch(
        self, epoch: int, index: int, end: int, next_end: int, times: BatchTimes
    ) -> Batch: ...


class InProcess:
    """Host batches made in this process, when asked for."""

    workers, in_workers = 0, False

    def __init__(
        self, source: Source, stages: Stages, order: EpochOrder, crossing: Callable[[], None]
    ):
        self._source, self._stages, self._order, self._crossing = source, stages, order, crossing
        # An ArraySource reads any rows itself, in one gather per leaf, read-only already.
        self._read: Callable[[Any], Batch] = (
            source.__getitem__ if isinstance(source, ArraySource) else partial(read_rows, source)
        )

    def batch(self, epoch: int, index: int, end: int, next_end: int, times: BatchTimes) -> Batch:
        start = time.perf_counter()
        batch = self._read(self._order.rows(epoch, index))
        read = time.perf_counter()
        token = FEEDING.set(self._crossing)
        try:
            batch = self._stages(batch)
        finally:
            FEEDING.reset(token)
        times.read, times.stages = read - start, time.perf_counter() - read
        return batch


class InWorkers:
    """Host batches made by worker processes, a few ahead (see `HostWorkers`); they stop
    when `owner` (the pipeline) is collected, so none outlives it."""

    in_workers = True

    def __init__(self, owner: object, payload: bytes, order: EpochOrder, options: Workers):
        self._workers = HostWorkers(payload, options)  # started at the first batch
        self._order = order
        self.workers = int(options.count)
        weakref.finalize(owner, self._workers.close)

    def start_in_background(self) -> None:
        """Starts the workers now, from a thread, rather than at the first batch."""
        self._workers.start_in_background()

    def ready(self) -> bool:
        """Whether the workers can take batches without a wait for their start."""
        return self._workers.ready()

    def batch(self, epoch: int, index: int, end: int, next_end: int, times: BatchTimes) -> Batch:
        return self._workers.batch(epoch, index, end, next_end, self._order.rows, times)


def choose_workers(seconds: float, nbytes: int, cores: int) -> tuple[int, str]:
    """How many workers batches that took `seconds` (the median) and hold `nbytes` are
    worth on `cores` cores, and why (see the module's docstring).

    Example:
        >>> choose_workers(0.165, 38_535_168, 13)[0], choose_workers(0.0001, 800, 13)[0]
        (13, 0)
        >>> choose_workers(0.165, 38_535_168, 1)[0]
        0
    """
    move = MOVE_S + nbytes / MOVE_BYTES_PER_S
    took = f"a batch took {seconds * 1e3:.1f} ms here (the median of the first ones)"
    moving = f"moving its {nbytes / 1e6:.1f} MB between processes takes about {move * 1e3:.1f} ms"
    if cores < 2:
        return 0, (
            f"workers='auto' chose 0: {took}, but this process may run on one core only "
            "(os.sched_getaffinity), which workers would only share with it."
        )
    if seconds < AUTO_WORTH * move:
        return 0, (
            f"workers='auto' chose 0: {took} and {moving}, so workers would spend as much "
            "handing batches over as they save."
        )
    count = max(1, min(cores, math.floor(seconds / move)))
    return count, (
        f"workers='auto' chose {count}: {took}, {moving}, and {cores} cores are usable: "
        f"{count} workers make batches up to {count} times as fast as this process alone."
    )


_STARTING = " They start in the background; this process makes the batches until they are ready."


def _nbytes(batch: Batch) -> int:
    return sum(
        leaf.nbytes for leaf in jax.tree_util.tree_leaves(batch) if isinstance(leaf, np.ndarray)
    )


def _jax_arrays(batch: Batch) -> str:
    """The path of the first jax.Array in `batch` (empty: none)."""
    for path, leaf in jax.tree_util.tree_flatten_with_path(batch)[0]:
        if isinstance(leaf, jax.Array):
            return f"batch{jax.tree_util.keystr(path)}"
    return ""


class Auto:
    """``workers="auto"``: the first batches made here, timed; then workers or not.
    `payload` pickles the source and stages, called only once workers are chosen; the
    workers chosen start in the background and take over at the first batch after they
    are ready, which `choice` then names."""

    def __init__(
        self,
        owner: object,
        here: InProcess,
        payload: Callable[[], bytes],
        order: EpochOrder,
        options: Workers,
    ):
        self._owner, self._here, self._payload = weakref.ref(owner), here, payload
        self._order, self._options = order, options
        self._chosen: HostBatches | None = None  # what makes the batches once chosen
        self._starting: InWorkers | None = None  # the workers chosen, until they take over
        self._timed: list[tuple[float, int]] = []  # (seconds, bytes) of the batches made here
        self.choice = f"workers='auto' chooses after the first {AUTO_BATCHES} batches."

    @property
    def workers(self) -> int:
        """The workers chosen (0 until then), whether or not they have taken over yet."""
        if self._starting is not None:
            return self._starting.workers
        return 0 if self._chosen is None else self._chosen.workers

    @property
    def in_workers(self) -> bool:
        return self._chosen is not None and self._chosen.in_workers

    @property
    def chosen(self) -> bool:
        return self._chosen is not None

    def batch(self, epoch: int, index: int, end: int, next_end: int, times: BatchTimes) -> Batch:
        if self._starting is not None and self._starting.ready():
            self._chosen, self._starting = self._starting, None
            self.choice = self.choice.replace(
                _STARTING,
                f" They started meanwhile and took over at batch {index} of epoch {epoch}.",
            )
        if self._chosen is not None:
            return self._chosen.batch(epoch, index, end, next_end, times)
        batch = self._here.batch(epoch, index, end, next_end, times)  # raises as a stage does
        self._timed.append((times.read + times.stages, _nbytes(batch)))
        on_device = _jax_arrays(batch)
        if on_device:
            self._choose(
                0,
                f"workers='auto' chose 0: the stages return jax.Arrays ({on_device}), which "
                "cannot leave a worker process (host stages there must return numpy).",
            )
        elif len(self._timed) >= min(AUTO_BATCHES, end):
            seconds = sorted(seconds for seconds, _ in self._timed)[len(self._timed) // 2]
            nbytes = max(nbytes for _, nbytes in self._timed)
            self._choose(*choose_workers(seconds, nbytes, usable_cores()))
        return batch

    def _choose(self, count: int, choice: str) -> None:
        """Makes the next batches with `count` workers (0: here), for the reason `choice`."""
        owner, self._chosen, self.choice = self._owner(), self._here, choice
        if not count or owner is None:
            return
        try:
            payload = self._payload()
        except NotPicklableError as error:
            self.choice = f"workers='auto' chose 0: {error}"
            return
        options = Workers(count, self._options.read_next_epoch, self._options.keep_freed_memory)
        self._starting = InWorkers(owner, payload, self._order, options)
        self._starting.start_in_background()
        self.choice += _STARTING


def host_batches(
    owner: object,
    source: Source,
    stages: Stages,
    order: EpochOrder,
    options: Workers,
    crossing: Callable[[], None],
) -> HostBatches:
    """Host batches for `owner` (a pipeline), as `options` says."""
    here = InProcess(source, stages, order, crossing)
    if options.count == 0:
        return here
    if options.count != "auto":
        return InWorkers(owner, pickled_for_workers(source, stages.stages), order, options)
    return Auto(owner, here, lambda: pickled_for_workers(source, stages.stages), order, options)
