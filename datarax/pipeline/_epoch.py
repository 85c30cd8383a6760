"""The iterator over one epoch of a `Pipeline`.

A pipeline has one position. Each ``iter(pipeline)`` makes a new `Epoch` with the
pipeline's newest generation; an older iterator then raises instead of going on from
somewhere else. The epoch begins (its order made, its end agreed with the other hosts)
at the first ``next()``, not at ``iter()``. A batch whose making raised is not consumed:
the next ``next()`` makes it again. Once finished, the iterator stays finished.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, Protocol

from datarax.errors import SupersededIteratorError

Batch = Any


class Generations(Protocol):
    """Whatever counts a pipeline's iterators: `generation` is the newest one's."""

    @property
    def generation(self) -> int: ...


class Feed(NamedTuple):
    """All an `Epoch` may do with its pipeline, which makes one and hands it to each."""

    position: Generations  # its generation is the newest; an older Epoch is superseded
    begin_epoch: Callable[[], None]
    next_batch: Callable[[], Batch]  # raises StopIteration at the epoch's end
    crossing_hosts: Callable[[], None]


class Epoch(Iterator[Batch]):
    """An iterator over the rest of one epoch of a pipeline."""

    def __init__(self, feed: Feed):
        self._feed, self._generation = feed, feed.position.generation
        self._started = False
        self._finished = False

    def __iter__(self) -> Epoch:
        return self

    def _crossing_hosts(self) -> None:
        """A batch this iterator gave is about to become global arrays (a prefetcher
        places it): the pipeline agrees on its epochs from now on."""
        self._feed.crossing_hosts()

    def __next__(self) -> Batch:
        if self._finished:
            raise StopIteration
        if self._generation != self._feed.position.generation:
            raise SupersededIteratorError(
                "This iterator over the pipeline was superseded by a newer "
                "iter(pipeline) or set_state (zip(p, p), a loop over p inside a loop over "
                "p, or two prefetchers over p). A pipeline has one position, so only its "
                "newest iterator can go on; build a second Pipeline for an independent pass."
            )
        if not self._started:
            self._feed.begin_epoch()
            self._started = True
        try:
            return self._feed.next_batch()
        except StopIteration:
            self._finished = True
            raise
