"""`Pipeline`: batches from a source through stages, per host or as one global batch.

Per host (no ``sharding=``): batches of the source's rows go through `stages` in
order; a stage such as ``lambda b: sharder.shard(b, sharding)`` places them on
devices, so data stays on the host until that stage places exactly one batch. When
several JAX processes each run such a pipeline into a `JaxProcessSharder`, they agree
on how many batches each epoch has, so none waits for a batch another host never
makes. The rule, from what the pipeline does: once one of its batches is about to
become global arrays (a `JaxProcessSharder`'s ``shard`` in a stage, however the
sharder is held, or in the placement of a `prefetch_to_device` over it), the hosts
agree on the epoch then and at the start of every later epoch; a pipeline whose
batches never cross hosts never waits for another host.

Global (``sharding=S``): every host builds the same pipeline over the same global
source. Batch k of an epoch is the rows ``epoch_order(epoch)[k*B:(k+1)*B]`` (plain
order without shuffle), for any number of processes and devices. Each host reads
from the source only the rows its devices hold under S (the `RowLedger`), runs
`stages` on them (host side, numpy), builds the global `jax.Array` batch, then runs
`device_stages` on it. The state (`get_state`) names no process or device, so a job
saved on 2 hosts resumes at exactly the next batch on 1 or 4. The hosts compare their
states when iteration starts and after every `set_state` (an error on every host if
they differ: another source, batch size, seed or position); every later epoch follows
from that state alike on every host.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal

import jax
import numpy as np
from flax import nnx
from jax.sharding import Sharding

from datarax._validate import check_bool, check_int
from datarax.pipeline._agreement import agree, agree_on_batches_left
from datarax.pipeline._global_batches import GlobalBatches
from datarax.pipeline._sources import ArraySource, RandomAccessSource, Rows, read_rows
from datarax.pipeline._state import check_pipeline_state
from datarax.pipeline._worker_checks import leave_if_importing_main
from datarax.pipeline._workers import HostWorkers, pickled_for_workers
from datarax.sharding._exchange import FEEDING
from datarax.sharding._sharding_checks import check_sharding

Batch = Any
Stage = Callable[[Batch], Batch]
_FIXED = frozenset(
    {
        "batch_size",
        "device_stages",
        "drop_remainder",
        "multihost",
        "num_batches",
        "sharding",
        "shuffle",
        "source",
        "source_length",
        "stages",
        "uneven_hosts",
        "workers",
    }
)


def _shuffle_seed(rngs: nnx.Rngs) -> list[int]:
    try:
        key = rngs.shuffle()  # the 'shuffle' stream when there is one, else 'default'
    except AttributeError:
        raise ValueError(
            "rngs has neither a 'shuffle' nor a 'default' stream to seed the shuffle; pass "
            "rngs=nnx.Rngs(0) or nnx.Rngs(shuffle=0)."
        ) from None
    return [int(word) for word in np.asarray(jax.random.key_data(key)).ravel()]


def _check_rngs(rngs: Any) -> nnx.Rngs | None:
    if rngs is not None and not isinstance(rngs, nnx.Rngs):
        raise TypeError(
            f"rngs must be an nnx.Rngs, e.g. rngs=nnx.Rngs(0), got {type(rngs).__name__} "
            f"{rngs!r:.40}."
        )
    return rngs


def _check_stages(name: str, stages: Sequence[Stage]) -> tuple[Stage, ...]:
    if callable(stages) or not isinstance(stages, Iterable) or isinstance(stages, (str, bytes)):
        raise TypeError(
            f"{name} must be a list of stages, got {type(stages).__name__} {stages!r:.60}; "
            f"for one stage write {name}=[stage]."
        )
    stages = list(stages)
    for position, stage in enumerate(stages):
        if not callable(stage):
            raise TypeError(
                f"{name}[{position}] is a {type(stage).__name__}, which is not callable. "
                "A stage is a function or an nnx.Module with __call__(batch) -> batch."
            )
    return tuple(stages)


def stop_iteration_error(where: str, error: StopIteration) -> RuntimeError:
    """The error a `StopIteration` from user code becomes (it would end an epoch in silence)."""
    return RuntimeError(
        f"{where} raised StopIteration ({error!r}). Inside a pipeline that would end the "
        "epoch early without a word, so it is an error: return a batch, or raise "
        "another exception to stop."
    )


def call_stage(stage: Stage, where: str, batch: Batch) -> Batch:
    """`stage` applied to `batch`; `where` (``stages[0]``) names it in the errors."""
    try:
        return stage(batch)
    except StopIteration as error:
        raise stop_iteration_error(where, error) from error
    except ValueError as error:
        if "read-only" not in str(error):
            raise
        raise ValueError(
            f"{where} wrote into its batch in place, but a pipeline's host "
            "batches are read-only (views of the source, which must not change). "
            "Return new arrays instead, e.g. {**batch, 'x': batch['x'] * 2}."
        ) from error


def _run_stage(stages: tuple[Stage, ...], name: str, batch: Batch) -> Batch:
    for position, stage in enumerate(stages):
        batch = call_stage(stage, f"{name}[{position}]", batch)
    return batch


class Pipeline:
    """Iterates over batches of `source`, per host or as one global batch.

    Every ``iter()`` begins a new epoch, unless `set_state` was called since, in which
    case it resumes exactly there. A pipeline has one position: an iterator made
    earlier raises once a newer one exists or `set_state` was called. A batch whose
    stage raised is not consumed: the next ``next()`` makes it again. Host batches are
    read-only (views of the source or copies), so a stage must return new arrays
    rather than write into its batch. With ``shuffle=True`` each
    epoch has its own permutation, derived from `rngs` and the epoch only, so every
    host built with the same `rngs` sees the same global order.

    Args:
        source: a dict (or other pytree) of equal-length arrays, an `ArraySource`, or
            anything with ``__len__`` and ``__getitem__`` returning records (a Grain
            data source, for example). With `sharding`, the same global source on
            every host.
        stages: callables (functions or ``nnx.Module`` instances) applied to each
            batch in order. With `sharding`, they run on this host's rows (numpy)
            before placement and must keep the rows.
        batch_size: rows per batch; with `sharding`, the global batch size.
        rngs: seeds the shuffle; required when ``shuffle=True``.
        shuffle: visit the rows in a new random order every epoch.
        drop_remainder: drop the last partial batch (default) or keep it.
        sharding: make global batches placed with this sharding (see above).
        device_stages: with `sharding`, callables applied to the global batch after
            placement (jax arrays; jit them for speed).
        multihost: whether the hosts' pipelines must agree on each epoch's number of
            batches. None (default): decided by what the pipeline does, from the first
            batch that is about to become global arrays (see above). True: agree at
            the start of every epoch, the first included (needed when a host may have
            no batch at all in its first epoch). False: never (a pipeline one host
            runs alone).
        uneven_hosts: when per-host pipelines have different numbers of batches in
            an epoch: ``"stop"`` (default) makes every host stop at the smallest,
            ``"raise"`` raises a ValueError on every host naming each host's count.
        workers: 0 (default): read and run `stages` in this process. N > 0: read the
            rows and run `stages` in N worker processes, a few batches ahead, with the
            same batches in the same order; the source and stages must then be
            picklable (top-level functions or classes of a module). Each worker runs
            its own copy of the source and stages, pickled when the pipeline is
            built: state a stage changes (a counter, a generator it keeps) stays in
            one worker's copy, so such a stage gives other batches than workers=0;
            draw randomness from the rows instead. The workers start at the first batch
            and serve every epoch, starting the next one's first batches before this
            one ends, until the pipeline is garbage-collected or the process exits.
            Numpy arrays come back through shared memory: a worker copies them once
            into a slot this process lent it and you get views of the slot, which is
            lent again only once you have dropped every array in it (a batch you keep
            is never overwritten). A worker imports the script that runs the pipeline
            again as it starts, so in a script the code that builds and iterates the
            pipeline must be under ``if __name__ == "__main__":``; without it every
            worker would start workers of its own, and iterating raises a
            RuntimeError that says so. Workers run JAX on CPU only (the devices
            belong to this process) and the stages must stay on the host (numpy):
            a stage that returns jax.Arrays or starts JAX on an accelerator there is
            an error naming it. A stage that places batches on devices belongs in
            `device_stages` (which, like the placement of global batches, stays in
            this process) or in a pipeline with workers=0.

            Memory-mapped files are shared with the workers, not copied: an
            ``np.memmap`` in mode ``"r"``, ``"r+"`` or ``"w+"`` (``np.load(path,
            mmap_mode="r")`` among them), or a slice or view of one, wherever the
            source or a stage holds it, reaches each worker as its file's path, and
            the worker maps the same file again (a ``"w+"`` one as ``"r+"``, so it is
            never emptied): a 400 MB ``.npy`` costs a worker a few hundred bytes of
            pickle, not two copies of 400 MB, and the file's pages sit once in the
            page cache for every process. Mode ``"c"`` (copy on write) is pickled
            whole, with the changes only this process has. A file whose size or inode
            (or, in mode ``"r"``, modification time) changed after the pipeline was
            built makes ``next()`` raise a RuntimeError naming it: build a new Pipeline.

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
        sharding: Sharding | None = None,
        device_stages: Sequence[Stage] = (),
        multihost: bool | None = None,
        uneven_hosts: Literal["stop", "raise"] = "stop",
        workers: int = 0,
    ):
        self.batch_size = check_int("batch_size", batch_size)
        self.shuffle = check_bool("shuffle", shuffle)
        self.drop_remainder = check_bool("drop_remainder", drop_remainder)
        self.stages = _check_stages("stages", stages)
        self.device_stages = _check_stages("device_stages", device_stages)
        if self.device_stages and sharding is None:
            raise ValueError("device_stages run on global batches: pass sharding= as well.")
        if uneven_hosts not in ("stop", "raise"):
            raise ValueError(f"uneven_hosts must be 'stop' or 'raise', got {uneven_hosts!r}.")
        self.uneven_hosts = uneven_hosts
        if multihost is not None:
            check_bool("multihost", multihost)
        rngs = _check_rngs(rngs)
        if self.shuffle and rngs is None:
            raise ValueError("shuffle=True needs a seed: pass rngs=nnx.Rngs(seed).")
        if isinstance(source, (Mapping, np.ndarray, jax.Array)):
            source = ArraySource(source)
        elif not (hasattr(source, "__len__") and hasattr(source, "__getitem__")):
            raise TypeError(
                f"source must be a dict of arrays or have __len__ and __getitem__, got "
                f"{type(source).__name__}."
            )
        self.source: ArraySource | RandomAccessSource = source
        self.source_length = len(source)
        self.workers = check_int("workers", workers, minimum=0)
        self._host_workers: HostWorkers | None = None
        self._next_order: tuple[int, np.ndarray | None] = (-1, None)  # the workers' look ahead
        if self.workers:
            payload = pickled_for_workers(source, self.stages)
            self._host_workers = HostWorkers(payload, self.workers)  # started when needed
            weakref.finalize(self, self._host_workers.close)  # none outlives the pipeline
        self._seed = _shuffle_seed(rngs) if self.shuffle and rngs is not None else None
        rows, batch = self.source_length, self.batch_size
        self.num_batches = rows // batch if self.drop_remainder else -(-rows // batch)
        if self.num_batches == 0 and rows:
            raise ValueError(
                f"batch_size={batch} is larger than the source ({rows} rows) and "
                "drop_remainder=True, so no batch would be produced. Use a smaller "
                "batch_size or drop_remainder=False."
            )
        self.sharding = None if sharding is None else check_sharding(sharding)
        self._global = None
        if self.sharding is not None:
            remainder = 0 if self.drop_remainder else rows % batch
            self._global = GlobalBatches(self.sharding, batch, remainder)
        self.multihost = multihost
        self._feeds_hosts = bool(multihost)  # its batches have crossed hosts (or True)
        self._epoch_start, self._end, self._end_agreed = 0, self.num_batches, False
        self._epoch, self._next_batch = 0, 0
        self._resume = True  # the next iter() continues at (_epoch, _next_batch)
        self._generation = 0
        self._agreed = False  # whether the hosts have compared their global states
        self._built = True

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _FIXED and getattr(self, "_built", False):
            raise AttributeError(
                f"Pipeline.{name} is fixed once the pipeline is built: the number of batches, "
                "the state and the agreement between hosts follow from it. Build a new "
                f"Pipeline with the {name} you want."
            )
        super().__setattr__(name, value)

    def __len__(self) -> int:
        return self.num_batches

    def epoch_order(self, epoch: int) -> np.ndarray | None:
        """The row order of `epoch` (None when not shuffling: rows in order)."""
        epoch = check_int("epoch", epoch, minimum=0)
        if self._seed is None:
            return None
        return np.random.default_rng([*self._seed, epoch]).permutation(self.source_length)

    def get_state(self) -> dict[str, Any]:
        """Where iteration stands, as a small JSON-serialisable dict.

        It holds the epoch and the next batch, plus what must match on resume (batch
        size, source length, shuffle seed), and nothing about processes or devices.
        """
        epoch, batch_index = self._epoch, self._next_batch
        if batch_index >= self.num_batches:
            epoch, batch_index = epoch + 1, 0
        return {
            "epoch": epoch,
            "batch_index": batch_index,
            "batch_size": self.batch_size,
            "source_length": self.source_length,
            "seed": self._seed,
        }

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Makes the next ``iter()`` resume at `state` (as returned by `get_state`).

        Works on a pipeline built with any number of processes. Costs the same
        wherever the state is in the epoch: no batch is replayed.

        Raises:
            TypeError: a count in `state` is not an int (bools and floats are not).
            ValueError: `state` is malformed, or was made by a pipeline with another
                batch size, source length or shuffle seed.
        """
        state = check_pipeline_state(state)  # the form; then, below, does it fit this one
        epoch, batch_index = state["epoch"], state["batch_index"]
        if batch_index > self.num_batches:
            raise ValueError(
                f"state['batch_index'] must be in [0, {self.num_batches}], got {batch_index}."
            )
        mine = self.get_state()
        for key in ("batch_size", "source_length", "seed"):
            if state[key] != mine[key]:
                raise ValueError(
                    f"This state was saved by a pipeline with {key}={state[key]!r}, but this "
                    f"one has {key}={mine[key]!r}: resuming would give other batches than "
                    "the saved run. Build the pipeline as it was (the same source, "
                    "batch_size and rngs seed) before set_state."
                )
        self._epoch, self._next_batch = epoch, batch_index
        self._resume = True
        self._generation += 1  # an iterator made before would go on from elsewhere
        self._agreed = False

    def __iter__(self) -> Iterator[Batch]:
        if self.workers:  # in a worker re-running a script with no main guard: leave
            leave_if_importing_main(self.workers)
        if self._resume:
            state = self.get_state()
            self._epoch, self._next_batch = state["epoch"], state["batch_index"]
        else:
            self._epoch, self._next_batch = self._epoch + 1, 0
        self._resume = False
        self._generation += 1
        return _Epoch(self, self._generation)

    def _rows(self, order: np.ndarray | None, batch_index: int) -> Rows:
        """The global rows of batch `batch_index` that this host reads, in batch order."""
        start = batch_index * self.batch_size
        stop = min(start + self.batch_size, self.source_length)
        if self._global is not None:
            return self._global.rows(order, start, stop)
        return slice(start, stop) if order is None else order[start:stop]

    def _start_epoch(self) -> np.ndarray | None:
        """Begins the epoch at (`_epoch`, `_next_batch`): its row order, and its end,
        agreed with the other hosts when this pipeline feeds them."""
        self._epoch_start, self._end, self._end_agreed = self._next_batch, self.num_batches, False
        if jax.process_count() > 1:
            if self.sharding is not None:
                # A global epoch's batches follow from the state; once the hosts have
                # found their states equal, at the start or after set_state, the epochs
                # after it stay equal without another exchange.
                if not self._agreed:
                    agree(json.dumps(self.get_state(), sort_keys=True), "the pipeline's state")
                    self._agreed = True
                self._end_agreed = True
            elif self._feeds_hosts:  # never set for multihost=False
                self._agree_on_end()
        return self.epoch_order(self._epoch)

    def _agree_on_end(self) -> None:
        left = self.num_batches - self._epoch_start
        agreed = agree_on_batches_left(left, self._epoch, self.uneven_hosts)
        self._end, self._end_agreed = self._epoch_start + agreed, True

    def _crossing_hosts(self) -> None:
        """One of this pipeline's batches is about to become global arrays: from now on
        the hosts agree on each epoch's end, this one included."""
        if self.sharding is not None or self.multihost is False:
            return
        self._feeds_hosts = True
        if not self._end_agreed:
            self._agree_on_end()

    def _produce(self, order: np.ndarray | None) -> Batch:
        """The next batch of the epoch whose row order is `order`, or StopIteration.

        The position moves on only once every stage has returned, so a batch whose
        stage raised is not consumed: the next call makes it again.
        """
        if self._next_batch >= self._end:
            raise StopIteration
        length = len(self.source)
        if length != self.source_length:
            raise ValueError(
                f"The source had {self.source_length} rows when the pipeline was built and "
                f"has {length} now. Batches and states follow from the source's length, so "
                "build a new Pipeline over the changed source."
            )
        if self._host_workers is not None:
            # Ahead into the next epoch too: its order follows from the epoch alone.
            def rows_of(epoch: int, index: int) -> Rows:
                if epoch == self._epoch:
                    return self._rows(order, index)
                if self._next_order[0] != epoch:
                    self._next_order = epoch, self.epoch_order(epoch)
                return self._rows(self._next_order[1], index)

            batch = self._host_workers.batch(
                self._epoch, self._next_batch, self._end, self.num_batches, rows_of
            )
        else:
            rows = self._rows(order, self._next_batch)
            try:
                batch = read_rows(self.source, rows)
            except StopIteration as error:
                raise stop_iteration_error("the source's __getitem__", error) from error
            token = FEEDING.set(self._crossing_hosts)
            try:
                batch = _run_stage(self.stages, "stages", batch)
            finally:
                FEEDING.reset(token)
        if self._global is not None:
            size = min(self.batch_size, self.source_length - self._next_batch * self.batch_size)
            placed = self._global.place(batch, size)
            batch = _run_stage(self.device_stages, "device_stages", placed)
        self._next_batch += 1
        return batch


class _Epoch(Iterator[Batch]):
    """An iterator over the rest of one epoch of a `Pipeline`.

    After an exception, ``next()`` tries the same batch again; once a newer
    ``iter(pipeline)`` or ``set_state`` exists, it raises instead of going on from
    somewhere else. Once finished, it stays finished.
    """

    def __init__(self, pipeline: Pipeline, generation: int):
        self._pipeline, self._generation = pipeline, generation
        self._order: np.ndarray | None = None
        self._started = False  # the epoch begins at the first next()
        self._finished = False

    def __iter__(self) -> _Epoch:
        return self

    def _crossing_hosts(self) -> None:
        """A batch this iterator gave is about to become global arrays (a prefetcher
        places it): the pipeline agrees on its epochs from now on."""
        self._pipeline._crossing_hosts()

    def __next__(self) -> Batch:
        pipeline = self._pipeline
        if self._finished:
            raise StopIteration
        if self._generation != pipeline._generation:
            raise RuntimeError(
                "This iterator over the pipeline was superseded by a newer "
                "iter(pipeline) or set_state (zip(p, p), a loop over p inside a loop over "
                "p, or two prefetchers over p). A pipeline has one position, so only its "
                "newest iterator can go on; build a second Pipeline for an independent pass."
            )
        if not self._started:
            self._order, self._started = pipeline._start_epoch(), True
        try:
            return pipeline._produce(self._order)
        except StopIteration:
            self._finished = True
            raise
