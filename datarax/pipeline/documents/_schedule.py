"""A mixture's schedule: which document of which source comes next, epoch after epoch.

Each source is read as a stream: pass 0 is its documents in a random order (without any
left out), and every later pass all of them in a new order, each drawn from the seed,
the source's name and the pass. A position in the stream is one int, so where a source
stands between epochs is one int too.

An epoch is made from where each source stands (`starts`) and the weights: source s's
j-th document from its start is due at time ``(c_j + u_j * size_j) / weight_s``, where
``c_j`` is the size of the documents before it in this epoch (tokens, or 1 a document),
``size_j`` its own and ``u_j`` uniform in [0, 1) (drawn with the pass); the epoch lists
the documents due before its end, by time. So every prefix of an epoch holds each source
at its weight, give or take one document. The end is the epoch's size, or sooner the
time at which a source that does not restart would reach the end of its pass.
"""

from __future__ import annotations

import dataclasses

import numpy as np

_ORDER, _JITTER = 2, 3  # seed words of later passes (pass 0 keeps its own words)


@dataclasses.dataclass
class Stream:
    """One source's documents, pass after pass (see the module's docstring).

    `words` seed it, `sizes` are its documents' sizes in the weights' unit (at least 1
    each), `skip` the documents pass 0 leaves out.

    Example:
        >>> stream = Stream([0, 7], np.array([2, 1, 3]), np.array([1]))
        >>> stream.pass_of(2), sorted(stream.order(0).tolist()), sorted(stream.order(1).tolist())
        ((1, 0), [0, 2], [0, 1, 2])
    """

    words: list[int]
    sizes: np.ndarray
    skip: np.ndarray
    _passes: dict[int, tuple[np.ndarray, np.ndarray]] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        first = np.random.default_rng(self.words).permutation(len(self.sizes))
        first = first[~np.isin(first, self.skip)]
        jitter = np.random.default_rng([*self.words, 1]).random(len(first))
        self._passes[0] = (first, jitter)
        self.first = len(first)

    def pass_of(self, position: int) -> tuple[int, int]:
        """The pass `position` falls in, and where in that pass."""
        if position < self.first:
            return 0, position
        later, at = divmod(position - self.first, len(self.sizes))
        return 1 + later, at

    def _pass(self, number: int) -> tuple[np.ndarray, np.ndarray]:
        if number not in self._passes:
            if len(self._passes) > 8:  # a few passes back are enough: epochs move forward
                del self._passes[min(p for p in self._passes if p)]
            words = [*self.words, _ORDER, number]
            order = np.random.default_rng(words).permutation(len(self.sizes))
            jitter = np.random.default_rng([*self.words, _JITTER, number]).random(len(order))
            self._passes[number] = (order, jitter)
        return self._passes[number]

    def order(self, number: int) -> np.ndarray:
        """The documents of pass `number`, in their order."""
        return self._pass(number)[0]

    def left_in_pass(self, position: int) -> int:
        """The size of the documents from `position` to the end of its pass."""
        number, at = self.pass_of(position)
        return int(self.sizes[self.order(number)[at:]].sum())

    def due(self, start: int, weight: float, end: float) -> tuple[np.ndarray, np.ndarray]:
        """The documents from position `start` on that fall due before time `end` at
        `weight`, and their times, passes taken in turn (the source holds a document)."""
        docs, times, carry = [], [], 0
        position = start
        while True:
            number, at = self.pass_of(position)
            order, jitter = self._pass(number)
            order, jitter = order[at:], jitter[at:]
            sizes = self.sizes[order]
            before = carry + np.cumsum(sizes) - sizes
            due = (before + jitter * sizes) / weight
            kept = int(np.searchsorted(due, end, side="left"))  # due is non-decreasing
            docs.append(order[:kept])
            times.append(due[:kept])
            if kept < len(order):
                break
            carry += int(sizes.sum())
            position += kept
        return np.concatenate(docs), np.concatenate(times)


@dataclasses.dataclass(frozen=True)
class Epoch:
    """An epoch's documents by time: each one's source (an index) and document index,
    and how many each source read (so the next epoch starts after them)."""

    source: np.ndarray
    doc: np.ndarray
    taken: list[int]


def epoch_of(
    streams: list[Stream],
    weights: np.ndarray,
    starts: list[int],
    size: float,
    restart: list[bool],
) -> Epoch:
    """The epoch whose sources stand at `starts` (see the module's docstring).

    Example:
        >>> streams = [Stream([0, k], np.ones(n, np.int64), np.empty(0, np.int64))
        ...            for k, n in enumerate((4, 2))]
        >>> epoch = epoch_of(streams, np.array([0.5, 0.5]), [0, 0], 6.0, [False, False])
        >>> epoch.taken  # the smaller source ends the epoch: 2 documents each
        [2, 2]
    """
    end = float(size)
    for stream, weight, start, again in zip(streams, weights, starts, restart, strict=True):
        if weight > 0 and not again:
            end = min(end, stream.left_in_pass(start) / weight)
    sources, docs, times, taken = [], [], [], []
    kind = np.int16 if len(streams) <= np.iinfo(np.int16).max else np.int32
    for number, (stream, weight, start) in enumerate(zip(streams, weights, starts, strict=True)):
        if weight > 0:
            doc, due = stream.due(start, float(weight), end)
        else:
            doc, due = np.empty(0, np.int64), np.empty(0)
        sources.append(np.full(len(doc), number, kind))
        docs.append(doc)
        times.append(due)
        taken.append(len(doc))
    by_time = np.argsort(np.concatenate(times), kind="stable")
    return Epoch(np.concatenate(sources)[by_time], np.concatenate(docs)[by_time], taken)
