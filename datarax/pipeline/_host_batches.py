"""Host batches: the rows read from the source and run through the host stages, in this
process (``workers=0``) or in worker processes (`datarax.pipeline.workers`).

Both give the same batches in the same order. In this process, the stages run with the
pipeline's `crossing_hosts` in `FEEDING`, so a stage that builds global arrays (a
`JaxProcessSharder`'s ``shard``) makes the pipeline agree with the other hosts first.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, Protocol

from datarax.pipeline._options import WorkerOptions
from datarax.pipeline._order import EpochOrder
from datarax.pipeline._sources import ArraySource, RandomAccessSource, read_rows
from datarax.pipeline._stages import Stages
from datarax.pipeline.workers import HostWorkers, pickled_for_workers
from datarax.sharding._exchange import FEEDING

Batch = Any


class HostBatches(Protocol):
    """Makes batch `index` of `epoch`, which ends before batch `end` (the next epoch
    before `next_end`: workers may start on it)."""

    def batch(self, epoch: int, index: int, end: int, next_end: int) -> Batch: ...


class InProcess:
    """Host batches made in this process, when asked for."""

    def __init__(
        self,
        source: ArraySource | RandomAccessSource,
        stages: Stages,
        order: EpochOrder,
        crossing_hosts: Callable[[], None],
    ):
        self._source, self._stages, self._order = source, stages, order
        self._crossing_hosts = crossing_hosts

    def batch(self, epoch: int, index: int, end: int, next_end: int) -> Batch:
        batch = read_rows(self._source, self._order.rows(epoch, index))
        token = FEEDING.set(self._crossing_hosts)
        try:
            return self._stages(batch)
        finally:
            FEEDING.reset(token)


class InWorkers:
    """Host batches made by worker processes, a few ahead (see `HostWorkers`)."""

    def __init__(
        self,
        source: ArraySource | RandomAccessSource,
        stages: Stages,
        order: EpochOrder,
        options: WorkerOptions,
    ):
        payload = pickled_for_workers(source, stages.stages)  # refused now, not at a batch
        self._workers = HostWorkers(payload, options.workers)  # started at the first batch
        self._order = order

    def batch(self, epoch: int, index: int, end: int, next_end: int) -> Batch:
        return self._workers.batch(epoch, index, end, next_end, self._order.rows)

    def close(self) -> None:
        """Stops the workers (see `HostWorkers.close`)."""
        self._workers.close()


def host_batches(
    owner: object,
    source: ArraySource | RandomAccessSource,
    stages: Stages,
    order: EpochOrder,
    options: WorkerOptions,
    crossing_hosts: Callable[[], None],
) -> HostBatches:
    """Host batches for `owner` (a pipeline): in workers when `options` asks for them,
    which then close when `owner` is collected, so none outlives it."""
    if not options.workers:
        return InProcess(source, stages, order, crossing_hosts)
    workers = InWorkers(source, stages, order, options)
    weakref.finalize(owner, workers.close)
    return workers
