"""Packing plans: which pieces of which documents fill each row, from lengths alone.

Every host that computes a plan from the same lengths gets the same arrays, and no
document is read to compute it. A plan answers one question, `pieces_of(row)`: which
documents fill the row, from where in each, where in the row and how many tokens.

Two methods:

- ``"first_fit"``: a document no longer than a row stays whole in one row; a longer one
  is cut into rows of its own and a last piece shorter than a row. Pieces are placed
  longest first, each into the fullest row that still has room for it (first-fit
  decreasing, with the best-fitting row taken first), which fills over 99% of the tokens
  of rows on documents drawn log-normally around half a row (99.95% over a million at
  2,048 tokens; tests/pipeline/test_packed.py holds it to 95%). Computed by size class (at most
  `length` classes), not document by document, so ten million documents plan in seconds.
- ``"concat"``: documents back to back in the given order, cut where rows end; every
  row but the last is full. The plan is the order and where each document ends in the
  stream: 12 bytes a document.
"""

from __future__ import annotations

import dataclasses

import numpy as np

_INT32_MAX = np.iinfo(np.int32).max


@dataclasses.dataclass(frozen=True)
class ConcatPlan:
    """Documents back to back: `order` (the non-empty documents in stream order) and
    `ends` (where each ends in the stream); row r holds tokens [r*length, (r+1)*length).

    Example:
        >>> plan = plan_concat(np.array([3, 4]), np.array([0, 1]), length=4)
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
        ends = self.ends[first:stop]
        begins = np.concatenate([self.ends[first - 1 : first] if first else [0], ends[:-1]])
        lows, highs = np.maximum(begins, low), np.minimum(ends, high)
        return self.order[first:stop], lows - begins, lows - low, highs - lows


def plan_concat(lengths: np.ndarray, order: np.ndarray, length: int) -> ConcatPlan:
    """Documents `order` laid back to back and cut every `length` tokens.

    Example:
        >>> plan = plan_concat(np.array([5, 0, 2]), np.array([0, 1, 2]), length=4)
        >>> len(plan), plan.pieces_of(1)[0].tolist(), plan.pieces_of(1)[1].tolist()
        (2, [0, 2], [4, 0])
    """
    order = order[lengths[order] > 0]
    ends = np.cumsum(lengths[order], dtype=np.int64)
    return ConcatPlan(order.astype(_index_dtype(len(lengths))), ends, length)


@dataclasses.dataclass(frozen=True)
class PackingPlan:
    """Pieces placed in rows: for every piece, its document (`doc`) and where in it the
    piece starts (`start`); for every row, where its pieces begin in those arrays
    (`row_starts`, one more entry than rows). A piece runs from its start to the end of
    its document or of its row, whichever comes first, so its size is not stored.

    Example:
        >>> plan = plan_first_fit(np.array([1, 6]), np.array([0, 1]), length=4)
        >>> plan.pieces_of(1)  # row 0 is document 1's first 4 tokens
        (array([1, 0], dtype=int32), array([4, 0], dtype=int32), array([0, 2]), array([2, 1]))
    """

    doc: np.ndarray
    start: np.ndarray
    row_starts: np.ndarray
    length: int
    lengths: np.ndarray

    def __len__(self) -> int:
        return len(self.row_starts) - 1

    @property
    def nbytes(self) -> int:
        """Bytes the plan holds (the documents' lengths, which it shares, not counted)."""
        return self.doc.nbytes + self.start.nbytes + self.row_starts.nbytes

    def pieces_of(self, row: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Row `row`'s pieces: (documents, starts in them, starts in the row, sizes).

        Sizes follow from the lengths: each piece fills the rest of its document or of
        its row, whichever is shorter.
        """
        first, stop = int(self.row_starts[row]), int(self.row_starts[row + 1])
        doc, start = self.doc[first:stop], self.start[first:stop]
        remaining = self.lengths[doc] - start
        sizes = np.empty(len(doc), np.int64)
        at = 0
        for k, left in enumerate(remaining.tolist()):
            sizes[k] = min(left, self.length - at)
            at += sizes[k]
        placed = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        return doc, start, placed, sizes


def _index_dtype(limit: int) -> type[np.integer]:
    return np.int32 if limit <= _INT32_MAX else np.int64


def _make_plan(
    doc: np.ndarray,
    start: np.ndarray,
    row_of: np.ndarray,
    rows: int,
    length: int,
    lengths: np.ndarray,
) -> PackingPlan:
    """A plan from pieces listed in placement order with the row each went to."""
    by_row = np.argsort(row_of, kind="stable")  # within a row: the order they were placed
    counts = np.bincount(row_of, minlength=rows)
    row_starts = np.zeros(rows + 1, _index_dtype(len(doc)))
    np.cumsum(counts, out=row_starts[1:])
    doc_type = _index_dtype(len(lengths))
    start_type = _index_dtype(int(lengths.max(initial=0)))
    return PackingPlan(
        doc[by_row].astype(doc_type),
        start[by_row].astype(start_type),
        row_starts,
        length,
        lengths,
    )


class _OpenRows:
    """Rows with room left, grouped by how much: the best-fitting row found in O(1) numpy
    calls per size class."""

    def __init__(self, length: int):
        self.count = np.zeros(length, np.int64)  # rows with exactly f tokens free, f < length
        self.rows: list[list[np.ndarray]] = [[] for _ in range(length)]

    def add(self, free: int, rows: np.ndarray) -> None:
        if free > 0 and len(rows):
            self.rows[free].append(rows)
            self.count[free] += len(rows)

    def take(self, free: int, wanted: int) -> np.ndarray:
        """Up to `wanted` rows with `free` tokens free, the oldest first."""
        chunks, taken = self.rows[free], []
        while wanted and chunks:
            head = chunks[0]
            taken.append(head[:wanted])
            if len(head) > wanted:
                chunks[0] = head[wanted:]
            else:
                chunks.pop(0)
            wanted -= len(taken[-1])
        rows = np.concatenate(taken) if taken else np.empty(0, np.int64)
        self.count[free] -= len(rows)
        return rows


def plan_first_fit(lengths: np.ndarray, order: np.ndarray, length: int) -> PackingPlan:
    """Documents `order` packed whole where they fit (see the module's docstring).

    Pieces of equal size keep their order in `order`; rows are numbered as they open.

    Example:
        >>> plan = plan_first_fit(np.array([3, 1, 2, 2]), np.arange(4), length=4)
        >>> [plan.doc[plan.row_starts[r]:plan.row_starts[r + 1]].tolist() for r in range(2)]
        [[0, 1], [2, 3]]
    """
    order = order[lengths[order] > 0]
    sizes = lengths[order]
    # Cut documents longer than a row: whole rows of their own, then the rest as a piece.
    whole_rows = sizes // length
    rest = sizes - whole_rows * length
    cut_doc = np.repeat(order, whole_rows)
    cut_start = (
        np.arange(len(cut_doc)) - np.repeat(np.cumsum(whole_rows) - whole_rows, whole_rows)
    ) * length
    keep = rest > 0
    piece_doc, piece_start, piece_size = order[keep], (sizes - rest)[keep], rest[keep]
    # Longest first; equal sizes in their given order.
    by_size = np.argsort(-piece_size, kind="stable")
    piece_doc, piece_start, piece_size = (
        piece_doc[by_size],
        piece_start[by_size],
        piece_size[by_size],
    )
    row_of = np.empty(len(piece_doc), np.int64)
    open_rows, rows = _OpenRows(length), len(cut_doc)
    class_ends = np.flatnonzero(np.diff(piece_size)) + 1
    for first, stop in zip(
        np.concatenate([[0], class_ends]),
        np.concatenate([class_ends, [len(piece_size)]]),
        strict=True,
    ):
        size, at = int(piece_size[first]), int(first)
        while at < stop:
            fits = np.flatnonzero(open_rows.count[size:])
            if len(fits):  # the fullest rows that still hold a piece of this size
                free = size + int(fits[0])
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
    doc = np.concatenate([cut_doc, piece_doc])
    start = np.concatenate([cut_start, piece_start])
    row_of = np.concatenate([np.arange(len(cut_doc)), row_of])
    return _make_plan(doc, start, row_of, rows, length, lengths)
