"""Packing plans: which pieces of which documents fill each row, from lengths alone.

Every host that computes a plan from the same lengths gets the same arrays, and no
document is read to compute it. A plan answers one question, `pieces_of(row)`: which
documents fill the row, from where in each, where in the row and how many tokens.

The documents are taken in a planning order: as they are, or, with a seed, the order of
a `Permutation` of them (computed per position, no array of them all). Two methods:

- ``"first_fit"``: a document no longer than a row stays whole in one row; a longer one
  is cut into rows of its own and a last piece shorter than a row. Each block of
  `BLOCK` documents of the planning order is packed on its own (so blocks plan on
  several cores and no step holds more than a block): its pieces placed longest first,
  each into the fullest row that still has room for it (first-fit decreasing, the
  best-fitting row taken first), which fills over 99% of the tokens of rows on documents
  drawn log-normally around half a row (99.95% over a million at 2,048 tokens;
  tests/pipeline/test_packed.py holds it to 95%). Within a block the work is by size
  class (at most a row's length of them), not document by document. A block's rows are
  numbered after the rows of the blocks before it; with a seed the rows are then read
  in the order of a second `Permutation`.
- ``"concat"``: documents back to back in the planning order, cut where rows end; every
  row but the last is full. The plan is the order and where each document ends in the
  stream: 12 bytes a document.

`make_plan` computes a plan in memory; `PlanParts` is the same computation a part at a
time, for plans written to files and read by memory map (`datarax.pipeline.documents.
_saved_plans`).
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import itertools
import os
from collections.abc import Iterable, Iterator

import numpy as np

from datarax.pipeline._permutation import Permutation

BLOCK = 1 << 20  # documents packed together by first_fit
_BYTES_A_PIECE = 40  # what planning holds for a piece at its peak
_INT32_MAX = np.iinfo(np.int32).max


def index_dtype(limit: int) -> type[np.integer]:
    """The smaller of int32 and int64 that holds `limit`."""
    return np.int32 if limit <= _INT32_MAX else np.int64


@dataclasses.dataclass(frozen=True)
class ConcatPlan:
    """Documents back to back: `order` (the non-empty documents in stream order) and
    `ends` (where each ends in the stream); row r holds tokens [r*length, (r+1)*length).

    Example:
        >>> plan = make_plan(np.array([3, 4]), 4, "concat", None)
        >>> plan.pieces_of(0)  # 3 tokens of document 0, then the first of document 1
        (array([0, 1], dtype=int32), array([0, 0]), array([0, 3]), array([3, 1]))
    """

    order: np.ndarray
    ends: np.ndarray
    length: int

    def __len__(self) -> int:
        return -(-int(self.ends[-1]) // self.length) if len(self.ends) else 0

    @property
    def nbytes(self) -> int:
        """Bytes the plan holds."""
        return self.order.nbytes + self.ends.nbytes

    def pieces_of(self, row: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Row `row`'s pieces: (documents, starts in them, starts in the row, sizes)."""
        low, high = row * self.length, (row + 1) * self.length
        first = int(np.searchsorted(self.ends, low, side="right"))
        stop = int(np.searchsorted(self.ends, high, side="left")) + 1
        stop = min(stop, len(self.ends))
        ends = np.asarray(self.ends[first:stop])
        begins = np.concatenate([self.ends[first - 1 : first] if first else [0], ends[:-1]])
        lows, highs = np.maximum(begins, low), np.minimum(ends, high)
        return np.asarray(self.order[first:stop]), lows - begins, lows - low, highs - lows


@dataclasses.dataclass(frozen=True)
class PackingPlan:
    """Pieces placed in rows: for every piece, its document (`doc`) and where in it the
    piece starts (`start`); for every row, where its pieces begin in those arrays
    (`row_starts`, one more entry than rows). A piece runs from its start to the end of
    its document or of its row, whichever comes first, so its size is not stored. Row r
    is the plan's row ``row_order[r]`` (r itself without a `row_order`).

    Example:
        >>> plan = make_plan(np.array([1, 6]), 4, "first_fit", None)
        >>> plan.pieces_of(1)  # row 0 is document 1's first 4 tokens
        (array([1, 0], dtype=int32), array([4, 0], dtype=int32), array([0, 2]), array([2, 1]))
    """

    doc: np.ndarray
    start: np.ndarray
    row_starts: np.ndarray
    length: int
    lengths: np.ndarray
    row_order: Permutation | None = None

    def __len__(self) -> int:
        return len(self.row_starts) - 1

    @property
    def nbytes(self) -> int:
        """Bytes the plan holds (the documents' lengths, which it shares, not counted)."""
        return self.doc.nbytes + self.start.nbytes + self.row_starts.nbytes

    def pieces_of(self, row: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Row `row`'s pieces: (documents, starts in them, starts in the row, sizes).

        Sizes follow from the lengths: each piece is the rest of its document, or a row
        of it where that rest is longer than a row.
        """
        planned = row if self.row_order is None else self.row_order.one(row)
        first, stop = int(self.row_starts[planned]), int(self.row_starts[planned + 1])
        doc, start = np.asarray(self.doc[first:stop]), np.asarray(self.start[first:stop])
        # A row holds one piece cut a row long, or whole rests of documents that fit it.
        sizes = np.minimum(self.lengths[doc] - start, self.length).astype(np.int64)
        placed = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        return doc, start, placed, sizes


class _OpenRows:
    """Rows with room left, grouped by how much, the amounts kept sorted: the best-fitting
    row for a piece is found by one bisection, whatever the row's length."""

    def __init__(self) -> None:
        self.rows: dict[int, collections.deque[np.ndarray]] = {}  # free tokens -> row groups
        self.free: list[int] = []  # the amounts with rows, ascending

    def add(self, free: int, rows: np.ndarray) -> None:
        if free > 0 and len(rows):
            if free not in self.rows:
                self.rows[free] = collections.deque()
                bisect.insort(self.free, free)
            self.rows[free].append(rows)

    def fullest(self, size: int) -> int | None:
        """The fewest free tokens of a row that holds `size` more; None where none does."""
        at = bisect.bisect_left(self.free, size)
        return self.free[at] if at < len(self.free) else None

    def take(self, free: int, wanted: int) -> np.ndarray:
        """Up to `wanted` rows with `free` tokens free, the oldest first."""
        chunks, taken = self.rows[free], []
        while wanted and chunks:
            head = chunks[0]
            taken.append(head[:wanted])
            if len(head) > wanted:
                chunks[0] = head[wanted:]
            else:
                chunks.popleft()
            wanted -= len(taken[-1])
        if not chunks:
            del self.rows[free]
            del self.free[bisect.bisect_left(self.free, free)]
        return np.concatenate(taken) if taken else np.empty(0, np.int64)


def _place_pieces(sizes: np.ndarray, length: int, rows: int) -> tuple[np.ndarray, int]:
    """The row of every piece of `sizes` (sorted longest first), placed first-fit
    decreasing into rows numbered from `rows` on; and the rows in all after it."""
    row_of = np.empty(len(sizes), np.int64)
    open_rows = _OpenRows()
    bounds = np.concatenate([[0], np.flatnonzero(np.diff(sizes)) + 1, [len(sizes)]])
    for first, stop in itertools.pairwise(bounds.tolist()):  # one size class each
        if first == stop:  # no pieces at all
            continue
        size, at = int(sizes[first]), int(first)
        while at < stop:
            free = open_rows.fullest(size)
            if free is not None:  # the fullest rows that still hold a piece of this size
                chosen = open_rows.take(free, int(stop - at))
                row_of[at : at + len(chosen)] = chosen
                open_rows.add(free - size, chosen)
                at += len(chosen)
                continue
            # None: new rows, each holding as many pieces of this size as fit.
            per_row, left = length // size, int(stop - at)
            row_of[at:stop] = rows + np.arange(left) // per_row
            full, partial = divmod(left, per_row)
            open_rows.add(length - per_row * size, np.arange(rows, rows + full))
            if partial:
                open_rows.add(length - partial * size, np.array([rows + full]))
            rows += full + bool(partial)
            at = int(stop)
    return row_of, rows


def _check_fits(pieces: int, length: int) -> None:
    """Raises ValueError where a block's `pieces` (about 40 bytes each while it is planned)
    would not fit this machine's memory: lengths that large are most likely wrong."""
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    if pieces * _BYTES_A_PIECE > memory:
        raise ValueError(
            f"The documents' lengths make {pieces:,} pieces of rows of {length} tokens in one "
            f"block of the plan: {pieces * _BYTES_A_PIECE / 2**30:,.0f} GiB to plan, more than "
            f"this machine's {memory / 2**30:,.0f} GiB. Check the lengths (a length read "
            "wrong, or a separator missing), or pack into longer rows."
        )


def first_fit_block(
    lengths: np.ndarray, order: np.ndarray, length: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Documents `order` packed first-fit (see the module's docstring): every piece's
    document and start, by row, and how many pieces each row holds.

    Example:
        >>> doc, start, counts = first_fit_block(np.array([3, 1, 2, 2]), np.arange(4), 4)
        >>> doc.tolist(), counts.tolist()
        ([0, 1, 2, 3], [2, 2])
    """
    order = order[lengths[order] > 0]
    sizes = lengths[order].astype(np.int64)
    # Cut documents longer than a row: whole rows of their own, then the rest as a piece.
    whole_rows = sizes // length
    rest = sizes - whole_rows * length
    _check_fits(int(whole_rows.sum()) + int(np.count_nonzero(rest)), length)
    cut_doc = np.repeat(order, whole_rows)
    cut_start = (
        np.arange(len(cut_doc)) - np.repeat(np.cumsum(whole_rows) - whole_rows, whole_rows)
    ) * length
    keep = rest > 0
    by_size = np.argsort(-rest[keep], kind="stable")  # longest first; equal sizes in order
    piece_doc, piece_start = order[keep][by_size], (sizes - rest)[keep][by_size]
    row_of, rows = _place_pieces(rest[keep][by_size], length, len(cut_doc))
    doc = np.concatenate([cut_doc, piece_doc])
    start = np.concatenate([cut_start, piece_start])
    row_of = np.concatenate([np.arange(len(cut_doc)), row_of])
    by_row = np.argsort(row_of, kind="stable")  # within a row: the order they were placed
    return doc[by_row], start[by_row], np.bincount(row_of, minlength=rows)


class PlanParts:
    """The plan of documents of `lengths` in rows of `length`, one part at a time: for
    ``"first_fit"`` a block's pieces and row counts, for ``"concat"`` a block's documents
    and ends. `seed` (None: the documents' own order) draws the planning order."""

    def __init__(
        self,
        lengths: np.ndarray,
        length: int,
        method: str,
        seed: list[int] | None,
        block: int | None = None,
    ):
        self.lengths, self.length, self.method, self.seed = lengths, length, method, seed
        self.count, self.block = len(lengths), BLOCK if block is None else block
        self._order = None if seed is None else Permutation(self.count, [*seed, 0])

    @property
    def blocks(self) -> int:
        return -(-self.count // self.block)

    def order(self, block: int) -> np.ndarray:
        """The documents of `block`, in planning order."""
        positions = slice(block * self.block, min((block + 1) * self.block, self.count))
        if self._order is None:
            return np.arange(positions.start, positions.stop)
        return self._order[positions]

    def part(self, block: int) -> tuple[np.ndarray, ...]:
        """``first_fit``: (documents, starts, pieces a row); ``concat``: (non-empty
        documents in order, their lengths)."""
        order = self.order(block)
        if self.method == "first_fit":
            return first_fit_block(self.lengths, order, self.length)
        order = order[self.lengths[order] > 0]
        return order, self.lengths[order].astype(np.int64)

    def row_order(self, rows: int) -> Permutation | None:
        """The order in which the `rows` rows of a first-fit plan are read."""
        return None if self.seed is None else Permutation(rows, [*self.seed, 1])

    def dtypes(self) -> dict[str, type[np.integer]]:
        """The plan's arrays, by name, and the dtype of each."""
        doc = index_dtype(self.count)
        if self.method == "concat":
            return {"order": doc, "ends": np.int64}
        return {
            "doc": doc,
            "start": index_dtype(int(np.max(self.lengths, initial=0))),
            "row_starts": np.int64,
        }

    def arrays(self, made: Iterable[tuple[np.ndarray, ...]]) -> Iterator[tuple[str, np.ndarray]]:
        """The plan's arrays from every block's `part`, in order, a piece at a time: (name,
        values in its dtype), each array's pieces in order, to be joined end to end."""
        types = self.dtypes()
        if self.method == "first_fit":
            yield "row_starts", np.zeros(1, np.int64)
        carry = 0  # pieces placed (first_fit) or tokens laid (concat) before this part
        for *columns, counts in made:  # pieces a row (first_fit) or lengths (concat)
            ends = carry + np.cumsum(counts, dtype=np.int64)
            carry = int(ends[-1]) if len(ends) else carry
            for name, values in zip(types, [*columns, ends], strict=True):
                yield name, np.asarray(values, types[name])

    def plan(self, arrays: dict[str, np.ndarray]) -> PackingPlan | ConcatPlan:
        """The plan of the joined `arrays` (by the names of `dtypes`)."""
        if self.method == "concat":
            return ConcatPlan(arrays["order"], arrays["ends"], self.length)
        rows = len(arrays["row_starts"]) - 1
        return PackingPlan(
            arrays["doc"],
            arrays["start"],
            arrays["row_starts"],
            self.length,
            self.lengths,
            self.row_order(rows),
        )


def make_plan(
    lengths: np.ndarray, length: int, method: str, seed: list[int] | None
) -> PackingPlan | ConcatPlan:
    """The whole plan, in memory (see the module's docstring).

    Example:
        >>> plan = make_plan(np.array([3, 1, 2, 2]), 4, "first_fit", None)
        >>> [plan.pieces_of(r)[0].tolist() for r in range(len(plan))]
        [[0, 1], [2, 3]]
    """
    parts = PlanParts(lengths, length, method, seed)
    pieces: dict[str, list[np.ndarray]] = {n: [np.zeros(0, t)] for n, t in parts.dtypes().items()}
    for name, values in parts.arrays(map(parts.part, range(parts.blocks))):
        pieces[name].append(values)
    return parts.plan({name: np.concatenate(values) for name, values in pieces.items()})
