"""Device prefetch: place the next batches on devices while the current step runs.

A training step on an accelerator leaves the host idle until the step is done.
`prefetch_to_device` uses that time: a background thread pulls batches from any
iterable and places each one on its target sharding, so the step that asks for the next
batch finds it already on the devices. The thread starts the copy of batch k+1, takes
batch k+2 from the source while that copy runs (from a pipeline's workers, which made
it meanwhile), then waits for the copy and hands batch k+1 over: copying, making
batches and the caller's step on batch k all run at once. At most `size` placed batches
wait in the buffer, the one being copied included; the thread pauses when it is full.

Nothing here waits without a bound: the thread is a daemon that never holds up the
interpreter's exit (not even while the source blocks), `close` waits for it at most
`CLOSE_WAIT_S` seconds, and a second thread that calls ``next()`` while another is
inside it gets a `RuntimeError` instead of waiting for a batch the first will take.
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import jax
from jax.sharding import Sharding

from datarax._exchange import FEEDING
from datarax._validate import check_int
from datarax.pipeline._stages import stop_iteration_error
from datarax.sharding._base import SharderModule
from datarax.sharding._sharding_checks import check_sharding
from datarax.sharding.array_sharder import ArraySharder

Batch = Any
Place = Callable[[Batch], Batch]

_END = object()  # put by the producer after the last batch
_CLOSED = object()  # put by close(), to wake a consumer that waits for a batch
CLOSE_WAIT_S = 1.0  # the longest close() waits for the thread to finish its batch
_POLL_S = 0.5  # how often a waiting consumer checks that the thread still runs


class _Failure:
    """An exception raised in the producer, carried to the consumer unchanged."""

    def __init__(self, error: BaseException):
        self.error = error


class _Channel:
    """What the producer thread and the consumer share (never the prefetcher itself)."""

    def __init__(self, size: int):
        self.items: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.free_slots = threading.Semaphore(size)
        self.stop = threading.Event()


def _produce(
    channel: _Channel,
    batches: Iterator[Batch],
    place: Place | None,
    state_of: Callable[[], Any] | None,
) -> None:
    # A pipeline's iterator says so when a batch it made is about to cross hosts (it
    # then agrees with the other hosts on its epoch): placing here is such a moment.
    crossing_hosts = getattr(batches, "_crossing_hosts", None)
    placing: tuple[Batch, Any] | None = None  # placed, its copy maybe still running
    try:
        while True:
            if not channel.free_slots.acquire(blocking=False):
                if placing is not None:  # the buffer is full but for it: hand it over
                    channel.items.put((jax.block_until_ready(placing[0]), placing[1]))
                    placing = None
                channel.free_slots.acquire()
            if channel.stop.is_set():
                return
            try:
                batch = next(batches)  # made while the copy of `placing` runs
            except StopIteration:
                if placing is not None:
                    channel.items.put((jax.block_until_ready(placing[0]), placing[1]))
                    placing = None
                channel.items.put(_END)
                return
            state = state_of() if state_of is not None else None
            if place is not None:
                token = FEEDING.set(crossing_hosts)
                try:
                    batch = place(batch)  # starts the copy; waited for after the next batch
                except StopIteration as error:
                    raise stop_iteration_error("place", error) from error
                finally:
                    FEEDING.reset(token)
            if placing is not None:
                channel.items.put((jax.block_until_ready(placing[0]), placing[1]))
            placing = (batch, state)
            if place is None or channel.stop.is_set():  # nothing copying: hand it over now
                channel.items.put((jax.block_until_ready(batch), state))
                placing = None
    except BaseException as error:  # carried to the consumer, re-raised there
        failure = _Failure(error)
        if placing is not None:  # the batch placed before it goes first
            try:
                channel.items.put((jax.block_until_ready(placing[0]), placing[1]))
            except BaseException as late:  # its copy failed: that error comes first
                failure = _Failure(late)
        channel.items.put(failure)
    finally:
        close = getattr(batches, "close", None)
        if callable(close):
            close()


def _shutdown(channel: _Channel, thread: threading.Thread) -> None:
    channel.stop.set()
    channel.free_slots.release()  # wakes a producer that waits for a free slot
    channel.items.put(_CLOSED)  # wakes a consumer that waits for a batch
    if thread is not threading.current_thread():
        # A source that blocks keeps the thread; it is a daemon and closes the source
        # itself once the source returns, so closing never hangs on it.
        thread.join(timeout=CLOSE_WAIT_S)


def _placer(
    sharding: Sharding | None, sharder: SharderModule | None, place: Place | None
) -> Place | None:
    if place is not None:
        if sharding is not None or sharder is not None:
            raise ValueError(
                "Pass either place=<callable> or sharding= (with an optional sharder=), "
                "not both: place already decides where each batch goes."
            )
        if not callable(place):
            raise TypeError(f"place must be a callable batch -> batch, got {type(place).__name__}.")
        return place
    if sharding is None:
        if sharder is not None:
            raise ValueError(
                "sharder= needs sharding= to say where batches go, e.g. "
                "sharding=NamedSharding(mesh, P('data'))."
            )
        return None
    check_sharding(sharding)
    if sharder is None:
        sharder = ArraySharder()
    if not callable(getattr(sharder, "shard", None)):
        raise TypeError(
            f"sharder must have a shard(batch, sharding) method (an ArraySharder or a "
            f"JaxProcessSharder), got {type(sharder).__name__}."
        )
    target, chosen = sharding, sharder
    return lambda batch: chosen.shard(batch, target)


class DevicePrefetcher(Iterator[Batch]):
    """An iterator over placed batches, filled ahead by a background thread.

    Build it with `prefetch_to_device`. Batches come out in the order the source
    gave them. An exception raised by the source or by the placing callable is
    re-raised by ``next()`` with its original type, after the batches placed before
    it. `close` (or leaving a ``with`` block, or dropping the last reference) stops
    the thread, waits for it and closes the source iterator, so stopping early
    leaks nothing. One thread at a time may call ``next()``: another that calls it
    meanwhile gets a `RuntimeError`. The interpreter never waits for the thread at
    exit.
    """

    def __init__(self, batches: Iterable[Batch], size: int, place: Place | None):
        self._channel = _Channel(size)
        self._done = False
        state_of = getattr(batches, "get_state", None)
        self._state_of = state_of if callable(state_of) else None
        iterator = iter(batches)
        self._state = self._state_of() if self._state_of is not None else None
        self._thread = threading.Thread(
            target=_produce,
            args=(self._channel, iterator, place, self._state_of),
            name="datarax-prefetch",
            daemon=True,
        )
        self._thread.start()
        self._finalizer = weakref.finalize(self, _shutdown, self._channel, self._thread)
        self._finalizer.atexit = False  # exit never waits for a source that blocks
        self._consumer = threading.Lock()  # held by the thread inside next()

    def __iter__(self) -> DevicePrefetcher:
        return self

    def __next__(self) -> Batch:
        if not self._consumer.acquire(blocking=False):
            raise RuntimeError(
                "Another thread is inside next() of this prefetcher. Batches come out "
                "one at a time in order, so one thread consumes a prefetcher; give each "
                "thread its own pipeline and prefetcher."
            )
        try:
            if self._done:
                raise StopIteration
            item = self._take()
            if item is _END or item is _CLOSED or isinstance(item, _Failure):
                self.close()
                if isinstance(item, _Failure):
                    raise item.error
                raise StopIteration
            self._channel.free_slots.release()
            batch, self._state = item
            return batch
        finally:
            self._consumer.release()

    def _take(self) -> Any:
        """The next item from the thread; an error if the thread ended without one."""
        while True:
            try:
                return self._channel.items.get(timeout=_POLL_S)
            except queue.Empty:
                if self._thread.is_alive():
                    continue
            try:  # the thread puts its last item before it ends
                return self._channel.items.get_nowait()
            except queue.Empty:
                raise RuntimeError(
                    "The prefetch thread ended without a batch or an error (the "
                    "interpreter is shutting down?)."
                ) from None

    def get_state(self) -> Any:
        """The source's state just after the batch ``next()`` returned last.

        The thread reads ahead, so the source's own ``get_state()`` is up to `size`
        batches further on. Save this one with the step that consumed the batch: a
        job resumed from it continues at exactly the next batch the step would have
        taken.

        Raises:
            TypeError: the source (e.g. a generator) has no ``get_state``.
        """
        if self._state_of is None:
            raise TypeError(
                "The batches being prefetched have no get_state(); prefetch a Pipeline "
                "to save and resume its position."
            )
        return self._state

    def close(self) -> None:
        """Stops the background thread, waits for it and closes the source iterator.

        Safe to call more than once, and from another thread than the consumer's
        (whose ``next()`` then raises StopIteration). The thread finishes the batch it
        is producing (if any) before it stops; when that takes longer than
        `CLOSE_WAIT_S` seconds (a source that blocks), close returns without it and
        the thread closes the source when the source returns.
        """
        self._done = True
        self._finalizer()

    def __enter__(self) -> DevicePrefetcher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def prefetch_to_device(
    batches: Iterable[Batch],
    size: int = 2,
    *,
    sharding: Sharding | None = None,
    sharder: SharderModule | None = None,
    place: Place | None = None,
) -> DevicePrefetcher:
    """Places the next `size` batches on devices in the background while you use this one.

    Args:
        batches: any iterable of batches: a list, a generator, a `Pipeline`.
        size: how many placed batches may wait in the buffer, a positive int.
            Two is enough to hide placement behind a step that takes longer.
        sharding: where to put each batch, e.g. ``NamedSharding(mesh, P("data"))``;
            placed with ``sharder.shard(batch, sharding)``.
        sharder: the sharder that places batches (default: an `ArraySharder`). A
            `JaxProcessSharder` builds global arrays from each host's rows.
        place: instead of `sharding`, any callable ``batch -> placed batch``. With
            neither, batches are taken as they come (for a `Pipeline` whose stages
            already shard) and the thread still runs the source ahead.

    Returns:
        A `DevicePrefetcher`: iterate it, and close it (or use ``with``) when
        stopping early.

    Raises:
        ValueError: `size` is below 1, or both `place` and `sharding` are given.
        TypeError: `size` is not an int, `sharding` is not a Sharding or `place` is
            not callable.

    Example:
        >>> mesh = jax.make_mesh((len(jax.devices()),), ("data",))
        >>> batches = ({"x": np.full((8, 2), step)} for step in range(3))
        >>> with prefetch_to_device(batches, sharding=NamedSharding(mesh, P("data"))) as it:
        ...     [int(np.asarray(batch["x"])[0, 0]) for batch in it]
        [0, 1, 2]
    """
    size = check_int("size", size, meaning="how many batches to place ahead")
    return DevicePrefetcher(batches, size, _placer(sharding, sharder, place))
