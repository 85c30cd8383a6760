"""Packing plans: which pieces of which documents fill each row, from lengths alone.

Every host that computes a plan from the same lengths gets the same arrays, and no
document is read to compute it. A plan answers one question, `pieces_of(row)`: which
documents fill the row, from where in each, where in the row and how many tokens.

The documents are taken in a planning order: as they are, or, with a seed, the order of
a `Permutation` of them (computed per position, no array of them all). Two methods:

- ``"best_fit"`` (``"first_fit"`` is the same method under its earlier name): a document
  no longer than a row stays whole in one row; a longer one is cut into rows of its own
  and a last piece shorter than a row. Each block of `BLOCK` documents of the planning
  order is packed on its own (so blocks plan on several cores and no step holds more
  than a block): its pieces placed longest first, each into the fullest row that still
  has room for it (best-fit decreasing), which fills over 99% of the tokens of rows on
  documents drawn log-normally around half a row (99.95% over a million at 2,048 tokens;
  tests/pipeline/test_packed.py holds it to 95%). Within a block the work is by size
  class (at most a row's length of them), not document by document. A block's rows are
  numbered after the rows of the blocks before it; with a seed the rows are then read
  in the order of a second `Permutation`.
- ``"concat"``: documents back to back in the planning order, cut where rows end; every
  row but the last is full. The plan is the order and where each document ends in the
  stream: 12 bytes a document.

`PlanOptions` says what else shapes a plan: ids added to each non-empty document (it is
planned as that much longer), documents truncated to a row, and at most `max_segments`
pieces a row (``"best_fit"``: a row of that many pieces is full whatever room it has
left, and a new row takes at most that many pieces of a size class).

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

BLOCK = 1 << 20  # documents packed together by best_fit
_BYTES_A_PIECE = 40  # what planning holds for a piece at its peak
_INT32_MAX = np.iinfo(np.int32).max


def index_dtype(limit: int) -> type[np.integer]:
    """The smaller of int32 and int64 that holds `limit`."""
    return np.int32 if limit <= _INT32_MAX else np.int64


def keyed_name(method: str) -> str:
    """`method`'s name in saved plans' keys and in fingerprints: ``"best_fit"`` keeps its
    earlier name there, so plans and states saved under it still match.

    Example:
        >>> keyed_name("best_fit"), keyed_name("concat")
        ('first_fit', 'concat')
    """
    return "first_fit" if method in ("best_fit", "first_fit") else method


@dataclasses.dataclass(frozen=True)
class PlanOptions:
    """What shapes a plan besides the lengths, the row's length, the method and the seed:
    `added` ids on each non-empty document (a bos and an eos id: 2), `truncate` (keep a
    row's length of each document, drop the rest) and `max_segments` (pieces a row at
    most; ``"best_fit"`` only). The defaults plan as before these options existed.

    Example:
        >>> PlanOptions(added=1, truncate=True).sized(np.array([0, 3, 9]), 8).tolist()
        [0, 4, 8]
    """

    added: int = 0
    truncate: bool = False
    max_segments: int | None = None

    def key(self) -> tuple[str, ...]:
        """These options in a saved plan's key: nothing for the defaults, so plans saved
        before the options existed still match."""
        if self == PlanOptions():
            return ()
        return (f"added={self.added}", f"truncate={self.truncate}", f"max={self.max_segments}")

    def sized(self, lengths: np.ndarray, length: int) -> np.ndarray:
        """The planned lengths (int64) of documents of `lengths` in rows of `length`:
        with their added ids, cut to a row where `truncate`; an empty document stays 0."""
        sized = np.asarray(lengths).astype(np.int64)
        if self.added:
            sized = np.where(sized > 0, sized + self.added, 0)
        return np.minimum(sized, length) if self.truncate else sized

    def tokens(self, lengths: np.ndarray, length: int) -> int:
        """Tokens the rows of a plan of `lengths` hold (`sized` a block at a time)."""
        blocks = range(0, len(lengths), BLOCK)
        return sum(int(self.sized(lengths[at : at + BLOCK], length).sum()) for at in blocks)


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
        >>> plan = make_plan(np.array([1, 6]), 4, "best_fit", None)
        >>> plan.pieces_of(1)  # row 0 is document 1's first 4 tokens
        (array([1, 0], dtype=int32), array([4, 0], dtype=int32), array([0, 2]), array([2, 1]))
    """

    doc: np.ndarray
    start: np.ndarray
    row_starts: np.ndarray
    length: int
    lengths: np.ndarray
    row_order: Permutation | None = None
    options: PlanOptions = PlanOptions()

    def __len__(self) -> int:
        return len(self.row_starts) - 1

    @property
    def nbytes(self) -> int:
        """Bytes the plan holds (the documents' lengths, which it shares, not counted)."""
        return self.doc.nbytes + self.start.nbytes + self.row_starts.nbytes

    def pieces_of(self, row: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Row `row`'s pieces: (documents, starts in them, starts in the row, sizes).

        Sizes follow from the lengths (as `options` plan them): each piece is the rest of
        its document, or a row of it where that rest is longer than a row.
        """
        at = row if self.row_order is None else self.row_order.one(row)
        first, stop = int(self.row_starts[at]), int(self.row_starts[at + 1])
        doc, start = np.asarray(self.doc[first:stop]), np.asarray(self.start[first:stop])
        # A row holds one piece cut a row long, or whole rests of documents that fit it.
        planned = self.options.sized(self.lengths[doc], self.length)
        sizes = np.minimum(planned - start, self.length)
        placed = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        return doc, start, placed, sizes


class _OpenRows:
    """Rows with room left, grouped by how much, the amounts kept sorted: the best-fitting
    row for a piece is found by one bisection, whatever the row's length. Each row's
    pieces are counted beside it: a row of `max_segments` pieces is full."""

    def __init__(self, max_segments: int | None) -> None:
        # free tokens -> groups of rows and the pieces each holds
        self.rows: dict[int, collections.deque[tuple[np.ndarray, np.ndarray]]] = {}
        self.free: list[int] = []  # the amounts with rows, ascending
        self.max_segments = max_segments

    def add(self, free: int, rows: np.ndarray, pieces: np.ndarray) -> None:
        """Rows `rows` with `free` tokens free, holding `pieces` pieces each; those full
        (no token or no piece more) are left out."""
        if self.max_segments is not None:
            room = pieces < self.max_segments
            rows, pieces = rows[room], pieces[room]
        if free > 0 and len(rows):
            if free not in self.rows:
                self.rows[free] = collections.deque()
                bisect.insort(self.free, free)
            self.rows[free].append((rows, pieces))

    def fullest(self, size: int) -> int | None:
        """The fewest free tokens of a row that holds `size` more; None where none does."""
        at = bisect.bisect_left(self.free, size)
        return self.free[at] if at < len(self.free) else None

    def take(self, free: int, wanted: int) -> tuple[np.ndarray, np.ndarray]:
        """Up to `wanted` rows with `free` tokens free, the oldest first, and their pieces."""
        chunks, taken = self.rows[free], []
        while wanted and chunks:
            rows, pieces = chunks[0]
            taken.append((rows[:wanted], pieces[:wanted]))
            if len(rows) > wanted:
                chunks[0] = (rows[wanted:], pieces[wanted:])
            else:
                chunks.popleft()
            wanted -= len(taken[-1][0])
        if not chunks:
            del self.rows[free]
            del self.free[bisect.bisect_left(self.free, free)]
        rows, pieces = zip(*taken, strict=True)
        return np.concatenate(rows), np.concatenate(pieces)


def _place_pieces(
    sizes: np.ndarray, length: int, rows: int, max_segments: int | None = None
) -> tuple[np.ndarray, int]:
    """The row of every piece of `sizes` (sorted longest first), placed best-fit
    decreasing into rows numbered from `rows` on, at most `max_segments` a row (None: no
    limit); and the rows in all after it."""
    row_of = np.empty(len(sizes), np.int64)
    open_rows = _OpenRows(max_segments)
    bounds = np.concatenate([[0], np.flatnonzero(np.diff(sizes)) + 1, [len(sizes)]])
    for first, stop in itertools.pairwise(bounds.tolist()):  # one size class each
        if first == stop:  # no pieces at all
            continue
        size, at = int(sizes[first]), int(first)
        while at < stop:
            free = open_rows.fullest(size)
            if free is not None:  # the fullest rows that still hold a piece of this size
                chosen, pieces = open_rows.take(free, int(stop - at))
                row_of[at : at + len(chosen)] = chosen
                open_rows.add(free - size, chosen, pieces + 1)
                at += len(chosen)
                continue
            # None: new rows, each holding as many pieces of this size as fit (and may).
            per_row, left = min(length // size, max_segments or length), int(stop - at)
            row_of[at:stop] = rows + np.arange(left) // per_row
            full, partial = divmod(left, per_row)
            open_rows.add(
                length - per_row * size, np.arange(rows, rows + full), np.full(full, per_row)
            )
            if partial:
                open_rows.add(length - partial * size, np.array([rows + full]), np.array([partial]))
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


def best_fit_block(
    lengths: np.ndarray, order: np.ndarray, length: int, options: PlanOptions = PlanOptions()
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Documents `order` packed best-fit (see the module's docstring): every piece's
    document and start, by row, and how many pieces each row holds.

    Example:
        >>> doc, start, counts = best_fit_block(np.array([3, 1, 2, 2]), np.arange(4), 4)
        >>> doc.tolist(), counts.tolist()
        ([0, 1, 2, 3], [2, 2])
    """
    sizes = options.sized(lengths[order], length)
    order, sizes = order[sizes > 0], sizes[sizes > 0]
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
    row_of, rows = _place_pieces(rest[keep][by_size], length, len(cut_doc), options.max_segments)
    doc = np.concatenate([cut_doc, piece_doc])
    start = np.concatenate([cut_start, piece_start])
    row_of = np.concatenate([np.arange(len(cut_doc)), row_of])
    by_row = np.argsort(row_of, kind="stable")  # within a row: the order they were placed
    return doc[by_row], start[by_row], np.bincount(row_of, minlength=rows)


class PlanParts:
    """The plan of documents of `lengths` in rows of `length`, one part at a time: for
    ``"best_fit"`` (or its earlier name ``"first_fit"``) a block's pieces and row counts,
    for ``"concat"`` a block's documents and ends. `seed` (None: the documents' own order)
    draws the planning order; `options` (`PlanOptions`) shape the plan further."""

    def __init__(
        self,
        lengths: np.ndarray,
        length: int,
        method: str,
        seed: list[int] | None,
        options: PlanOptions = PlanOptions(),
        block: int | None = None,
    ):
        self.lengths, self.length, self.seed, self.options = lengths, length, seed, options
        self.method = "best_fit" if method == "first_fit" else method
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
        """``best_fit``: (documents, starts, pieces a row); ``concat``: (non-empty
        documents in order, their planned lengths)."""
        order = self.order(block)
        if self.method == "best_fit":
            return best_fit_block(self.lengths, order, self.length, self.options)
        sizes = self.options.sized(self.lengths[order], self.length)
        return order[sizes > 0], sizes[sizes > 0]

    def row_order(self, rows: int) -> Permutation | None:
        """The order in which the `rows` rows of a best-fit plan are read."""
        return None if self.seed is None else Permutation(rows, [*self.seed, 1])

    def dtypes(self) -> dict[str, type[np.integer]]:
        """The plan's arrays, by name, and the dtype of each."""
        doc = index_dtype(self.count)
        if self.method == "concat":
            return {"order": doc, "ends": np.int64}
        longest = self.options.sized(np.array([np.max(self.lengths, initial=0)]), self.length)
        return {"doc": doc, "start": index_dtype(int(longest[0])), "row_starts": np.int64}

    def arrays(self, made: Iterable[tuple[np.ndarray, ...]]) -> Iterator[tuple[str, np.ndarray]]:
        """The plan's arrays from every block's `part`, in order, a piece at a time: (name,
        values in its dtype), each array's pieces in order, to be joined end to end."""
        types = self.dtypes()
        if self.method == "best_fit":
            yield "row_starts", np.zeros(1, np.int64)
        carry = 0  # pieces placed (best_fit) or tokens laid (concat) before this part
        for *columns, counts in made:  # pieces a row (best_fit) or lengths (concat)
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
            self.options,
        )


def make_plan(
    lengths: np.ndarray,
    length: int,
    method: str,
    seed: list[int] | None,
    options: PlanOptions = PlanOptions(),
) -> PackingPlan | ConcatPlan:
    """The whole plan, in memory (see the module's docstring).

    Example:
        >>> plan = make_plan(np.array([3, 1, 2, 2]), 4, "best_fit", None)
        >>> [plan.pieces_of(r)[0].tolist() for r in range(len(plan))]
        [[0, 1], [2, 3]]
        >>> plan = make_plan(np.array([1, 1, 1]), 4, "best_fit", None, PlanOptions(max_segments=2))
        >>> [plan.pieces_of(r)[0].tolist() for r in range(len(plan))]
        [[0, 1], [2]]
    """
    parts = PlanParts(lengths, length, method, seed, options)
    pieces: dict[str, list[np.ndarray]] = {n: [np.zeros(0, t)] for n, t in parts.dtypes().items()}
    for name, values in parts.arrays(map(parts.part, range(parts.blocks))):
        pieces[name].append(values)
    return parts.plan({name: np.concatenate(values) for name, values in pieces.items()})
