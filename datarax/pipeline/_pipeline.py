"""`Pipeline`, assembled from parts with one job each: options (`_options`), the epoch
order (`_order`), the state (`_state`), stages (`_stages`), the epoch iterator
(`_epoch`), host batches in this process or in workers (`_host_batches`), global
batches (`_global_batches`), agreement across hosts (`_agreement`) and the source of each
epoch (`_epochs`)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from flax import nnx
from jax.sharding import Sharding

from datarax._validate import check_int
from datarax.errors import PipelineStateError
from datarax.pipeline._agreement import EpochEnds
from datarax.pipeline._epoch import Epoch, Feed
from datarax.pipeline._epochs import SourceEpochs
from datarax.pipeline._global_batches import GlobalBatches
from datarax.pipeline._host_batches import host_batches
from datarax.pipeline._options import BatchOptions, HostOptions, UnevenHosts, Workers
from datarax.pipeline._order import EpochOrder, shuffle_seed
from datarax.pipeline._padding import host_row_mask, padded_rows, with_row_mask
from datarax.pipeline._sources import ArraySource, RandomAccessSource, as_source, check_length
from datarax.pipeline._stages import Batch, Stage, Stages
from datarax.pipeline._state import PipelineState, Position
from datarax.pipeline._timing import BatchTimes, TimeReport, Timings
from datarax.pipeline.workers import leave_if_importing_main
from datarax.sharding._sharding_checks import check_sharding

_FIXED = frozenset(
    {
        *("batch_size", "device_stages", "drop_remainder", "multihost", "num_batches"),
        "pad_remainder",
        *("sharding", "shuffle", "source", "source_length", "stages", "uneven_hosts", "workers"),
    }
)


class Pipeline:
    """Iterates over batches of `source`, per host or as one global batch.

    Every ``iter()`` begins a new epoch, unless `set_state` was called since: then it
    resumes exactly there. A pipeline has one position: an iterator made earlier raises
    once a newer one exists. A batch whose stage raised is not consumed: the next
    ``next()`` makes it again. Host batches are read-only (views of the source), so a
    stage returns new arrays. With ``shuffle=True`` each epoch's order follows from
    `rngs` and the epoch alone, the same on every host.

    Per host (no `sharding`), a stage such as ``lambda b: sharder.shard(b, sharding)``
    places each batch (with `workers`, pass ``sharding=`` instead: workers cannot place);
    once such a batch is about to become global arrays (a `JaxProcessSharder`), the
    hosts agree on each epoch's number of batches. Global
    (``sharding=S``): batch k is the rows ``epoch_order(epoch)[k*B:(k+1)*B]`` on any
    number of hosts; each host reads only the rows its devices hold under S, runs
    `stages` on them and builds the global batch, then runs `device_stages`. The state
    names no process, so a job saved on 2 hosts resumes at the next batch on 1 or 4. A
    source with a ``fingerprint`` (a str saying what its records depend on beyond their
    count, as `Packed` has) has it kept in the state, and a state of another fingerprint
    is refused; a state without one (other sources, earlier releases) resumes as before.
    A source whose records change by epoch (a `Mixture`, or a `Packed` over one) gives
    every epoch rows of its own, so `num_batches` and `source_length` are the current
    epoch's, and the state keeps the epoch's basis: a pipeline over the same sources with
    other weights resumes it as planned and goes on under its own weights from the next.

    Args:
        source: a dict (or other pytree) of equal-length arrays, an `ArraySource`, or
            anything with ``__len__`` and ``__getitem__`` returning records (a Grain data
            source, say); with `sharding`, the same global source on every host.
        stages: callables (functions or ``nnx.Module``) applied to each host batch in
            order; with `sharding`, to this host's rows (numpy), keeping them.
        batch_size: rows per batch; with `sharding`, the global batch size.
        rngs: seeds the shuffle; required when ``shuffle=True``.
        shuffle: visit the rows in a new random order every epoch.
        drop_remainder: drop the last partial batch (default) or keep it.
        pad_remainder: with ``drop_remainder=False``, fill the last partial batch up to
            `batch_size` rows with repeats of its own rows (the same on any number of
            hosts), so every batch has one shape and every row of the source comes once an
            epoch; `num_batches` counts that batch. Every batch, which must be a dict after
            the stages, then gets a bool leaf ``"row_mask"`` of shape (rows,): True on the
            source's rows, False on the filling. Host stages and `device_stages` see whole
            batches, without the mask; with `sharding` it is a global array whose rows are
            placed as the batch's rows are, per host a numpy array.
        sharding: make global batches placed with this sharding. A batch is placed when
            it is asked for; to copy batch k+1 while the step of batch k runs, iterate
            ``prefetch_to_device(pipeline)``.
        device_stages: with `sharding`, callables applied to each placed global batch.
        multihost: None (default): the hosts agree on each epoch's number of batches from
            the first batch about to become global arrays. True: at every epoch, the
            first included. False: never (a pipeline one host runs alone).
        uneven_hosts: when per-host pipelines have different numbers of batches in an
            epoch, ``"stop"`` them all at the smallest, or ``"raise"`` on every host.
        workers: 0 (default) reads and runs `stages` here; N > 0 in N worker processes,
            ahead and in order, giving the batches of ``workers=0``; ``"auto"`` times the
            first 3 batches, made here, and picks as many workers as their median time is
            worth (at most one a core), which start in the background and take over at the
            first batch after they are ready, so no batch waits for them to start; a
            `Workers` sets more. The source and stages are pickled when the pipeline is
            built (with ``"auto"``, once it chooses workers), memory-mapped arrays as
            their files' paths; stages must return host data, and a script must keep its
            code under ``if __name__ == "__main__":`` (see `datarax.pipeline.workers`).

    Example:
        >>> pipeline = Pipeline(source={"x": np.arange(10)}, stages=[lambda b: b["x"] * 2],
        ...                     batch_size=4)
        >>> [batch.tolist() for batch in pipeline]
        [[0, 2, 4, 6], [8, 10, 12, 14]]
    """

    def __init__(
        self,
        *,
        source: Mapping[str, Any] | ArraySource | RandomAccessSource,
        stages: Sequence[Stage] = (),
        batch_size: int,
        rngs: nnx.Rngs | None = None,
        shuffle: bool = False,
        drop_remainder: bool = True,
        pad_remainder: bool = False,
        sharding: Sharding | None = None,
        device_stages: Sequence[Stage] = (),
        multihost: bool | None = None,
        uneven_hosts: UnevenHosts = "stop",
        workers: int | str | Workers = 0,
    ):
        self._batching = BatchOptions(batch_size, shuffle, drop_remainder, pad_remainder)
        self._stages = Stages("stages", stages)
        self._device_stages = Stages("device_stages", device_stages)
        if self._device_stages and sharding is None:
            raise ValueError("device_stages run on global batches: pass sharding= as well.")
        self._hosts, self._workers = HostOptions(multihost, uneven_hosts), Workers.of(workers)
        seed = shuffle_seed(rngs, self._batching.shuffle)
        self._source = as_source(source)
        self._length = len(self._source)
        self._epochs = SourceEpochs(self._source, self._length)
        self._batching.count(self._epochs.length(0))  # raises now: no batch at all
        self._sharding = None if sharding is None else check_sharding(sharding)
        self._global = None
        if self._sharding is not None:
            remainder = self._batching.remainder(self._epochs.length(0))
            self._global = GlobalBatches(self._sharding, self._batching.batch_size, remainder)
        pick = None if self._global is None else self._global.rows
        if self._batching.pad_remainder:
            pick = padded_rows(pick, self._batching.batch_size)
        self._order = EpochOrder(self._epochs, self._batching.batch_size, seed, pick)
        self._ends = EpochEnds(self._hosts, is_global=self._global is not None)
        self._host = host_batches(
            self, self._source, self._stages, self._order, self._workers, self._ends.crossing_hosts
        )
        self._position, self._timings = Position(), Timings()
        # An ArraySource's rows are its own, fixed; a source that changes by epoch has a
        # length of its own every epoch. Any other may change under the pipeline.
        fixed = isinstance(self._source, ArraySource) or self._epochs.changes
        self._check_length = not fixed
        self._finishing = self._global is not None or self._batching.pad_remainder
        self._feed = Feed(
            self._position,
            self._begin_epoch,
            self._next_batch,
            self._ends.crossing_hosts,
        )

    batch_size = property(lambda self: self._batching.batch_size, doc="Rows per batch.")
    shuffle = property(lambda self: self._batching.shuffle)
    drop_remainder = property(lambda self: self._batching.drop_remainder)
    pad_remainder = property(lambda self: self._batching.pad_remainder)
    source = property(lambda self: self._source, doc="The source, as the pipeline reads it.")

    @property
    def source_length(self) -> int:
        """The source's rows (in the epoch the pipeline stands at, where they change by
        epoch: a `Mixture`, or a `Packed` over one)."""
        return self._epochs.length(self._at()[0])

    @property
    def num_batches(self) -> int:
        """Batches in a whole epoch (the one the pipeline stands at)."""
        return self._count(self._at()[0])

    def _count(self, epoch: int) -> int:
        return self._batching.count(self._epochs.length(epoch))

    def _at(self) -> tuple[int, int]:
        """The epoch and batch the pipeline stands at (the next epoch's first batch at the
        end of one)."""
        return self._position.at(self._count(self._position.epoch))

    stages = property(lambda self: self._stages.stages, doc="The host stages, in order.")
    device_stages = property(lambda self: self._device_stages.stages)
    sharding = property(lambda self: self._sharding, doc="The global batches' sharding.")
    multihost = property(lambda self: self._hosts.multihost)
    uneven_hosts = property(lambda self: self._hosts.uneven_hosts)

    @property
    def workers(self) -> int | str:
        """Worker processes making host batches (0: none; ``"auto"`` until it has chosen,
        then the number chosen, from their start in the background on)."""
        if not getattr(self._host, "chosen", True):
            return "auto"
        return self._host.workers

    @property
    def workers_choice(self) -> str:
        """With ``workers="auto"``: what was chosen after the first batches, why, and the
        batch at which the workers chosen took over."""
        return getattr(self._host, "choice", "")

    def time_report(self) -> TimeReport:
        """Where the last batches' time went, part by part (`TimeReport`; drawn by
        ``datarax.viz.plot_time_report``).

        Example:
            >>> pipeline = Pipeline(source={"x": np.arange(8)}, batch_size=2)
            >>> report = (list(pipeline), pipeline.time_report())[1]
            >>> report.batches, report.workers
            (4, 0)
        """
        in_workers = self._host.in_workers
        return self._timings.report(self._host.workers, in_workers, self.workers_choice)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _FIXED:
            raise AttributeError(
                f"Pipeline.{name} is fixed once the pipeline is built: the number of batches, "
                "the state and the agreement between hosts follow from it. Build a new "
                f"Pipeline with the {name} you want."
            )
        super().__setattr__(name, value)

    def __len__(self) -> int:
        return self.num_batches

    def epoch_order(self, epoch: int) -> np.ndarray | None:
        """The row order of `epoch` (None when not shuffling: rows in order), as one array
        of that epoch's `source_length` entries; the pipeline itself computes it batch by
        batch."""
        order = self._order.order(check_int("epoch", epoch, minimum=0))
        return None if order is None else order[:]

    def _state(self, epoch: int | None = None, basis: Any = None) -> PipelineState:
        """The pipeline's state; with `epoch` (and, where the source changes by epoch, the
        `basis` a saved state gives it), what its state at that epoch's start would be."""
        seed = None if self._order.seed is None else tuple(self._order.seed)
        fingerprint = getattr(self._source, "fingerprint", None)  # what its records depend on
        fingerprint = fingerprint if isinstance(fingerprint, str) else None
        index = 0
        if epoch is None:
            epoch, index = self._at()
        if basis is None:  # the pipeline's own epoch: its records are at hand
            basis, length = self._epochs.basis(epoch), self._epochs.length(epoch)
        else:  # a saved state's: made here, and refused where the source does not take it
            try:
                length = len(self._source.for_epoch(basis))  # type: ignore[union-attr]
            except ValueError as error:
                raise PipelineStateError(
                    f"The state's epoch basis does not fit this source: {error}",
                    key="epoch_basis",
                ) from None
        state = (epoch, index, self.batch_size, length, seed, fingerprint, basis)
        return PipelineState(*state)

    def get_state(self) -> dict[str, Any]:
        """Where iteration stands, as a small JSON-serialisable dict (see `PipelineState`)."""
        return self._state().to_dict()

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Makes the next ``iter()`` resume at `state` (as returned by `get_state`).

        Works on a pipeline built with any number of processes, and costs the same
        wherever the state is in the epoch: no batch is replayed.

        Raises:
            TypeError: a count in `state` is not an int (bools and floats are not).
            PipelineStateError: `state` is malformed, or was made by a pipeline with
                another batch size, source length or shuffle seed.
        """
        resumed = PipelineState.from_dict(state)
        if resumed.epoch_basis is not None and not self._epochs.changes:
            raise PipelineStateError(
                "This state was saved by a pipeline over a source whose records change by "
                "epoch (a Mixture, or a Packed over one), but this pipeline's source does "
                "not. Build the pipeline over the source the state was saved with.",
                key="epoch_basis",
            )
        mine = self._state(resumed.epoch, resumed.epoch_basis)
        resumed.check_fits(mine, self._batching.count(mine.source_length))
        if self._epochs.changes:
            self._epochs.resume(resumed.epoch, mine.epoch_basis)
        self._position.move_to(resumed)
        self._ends.forget_state()

    def __iter__(self) -> Iterator[Batch]:
        if self._workers.count:  # in a worker re-running a script with no main guard: leave
            leave_if_importing_main(
                f"iterates a Pipeline with workers={self._workers.count!r}, which would start "
                "workers in every worker, without end"
            )
        self._position.begin_iteration(self._at())
        return Epoch(self._feed)

    def _begin_epoch(self) -> None:
        at = self._position
        count = self._count(at.epoch)
        remainder = self._batching.remainder(self._epochs.length(at.epoch))
        if self._global is not None and remainder:
            self._global.check_last_batch(remainder)  # raises where it does not split
        self._ends.begin(at.epoch, at.next, count, self._state_json)

    def _state_json(self) -> str:
        return json.dumps(self.get_state(), sort_keys=True)

    def _next_batch(self) -> Batch:
        """The next batch of the epoch; the position moves on once every stage returned."""
        asked, at, end = time.perf_counter(), self._position, self._ends.end
        if at.next >= end:
            self._timings.epoch_ended()
            raise StopIteration
        if self._check_length and len(self._source) != self._length:
            check_length(self._source, self._length)  # raises, naming both lengths
        next_end = self._count(at.epoch + 1) if self._workers.read_next_epoch else 0
        times = BatchTimes()
        batch = self._host.batch(at.epoch, at.next, end, next_end, times)
        if self._finishing:
            batch = self._finish(batch, at.epoch, at.next, times)
        at.next += 1
        self._timings.returned(times, asked)
        return batch

    def _finish(self, batch: Batch, epoch: int, index: int, times: BatchTimes) -> Batch:
        """Host batch `index` of `epoch` placed as a global batch through the device
        stages (with `sharding`), with its row mask (with `pad_remainder`)."""
        length = self._epochs.length(epoch)
        if self._global is not None:
            placing = time.perf_counter()
            batch = self._global.place(batch, self._batching.size(index, length))
            staging = time.perf_counter()
            batch = self._device_stages(batch)
            times.place, times.device_stages = staging - placing, time.perf_counter() - staging
        if self._batching.pad_remainder:
            real, places = self._batching.real_rows(index, length), self._global
            mask = host_row_mask(self.batch_size, real) if places is None else places.row_mask(real)
            batch = with_row_mask(batch, mask)
        return batch
