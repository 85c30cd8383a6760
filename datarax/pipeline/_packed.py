"""`Packed`: fixed-length rows of tokens packed from documents of every length.

The plan (`datarax.pipeline._packing_plan`) is computed from the documents' lengths
alone, the same on every host, so a packed row is a random-access record: a `Pipeline`
over it has one global order, each host reads only the documents of its rows, workers
make rows ahead, and its state resumes on any number of processes.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any, Literal, Protocol

import numpy as np
from flax import nnx

from datarax._validate import check_int, check_str
from datarax.errors import SourceChangedError
from datarax.pipeline._order import shuffle_seed
from datarax.pipeline._packing_plan import ConcatPlan, PackingPlan, plan_concat, plan_first_fit

Method = Literal["first_fit", "concat"]
_PLANS = {"first_fit": plan_first_fit, "concat": plan_concat}
_INT32 = np.iinfo(np.int32)


class DocumentSource(Protocol):
    """What `Packed` and `Mixture` read: documents by index, and all their lengths."""

    @property
    def lengths(self) -> np.ndarray: ...

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> np.ndarray: ...


def check_documents(name: str, documents: Any) -> np.ndarray:
    """The lengths of `documents` (a `Documents`, a `Mixture` or alike) as int64, checked.

    Raises:
        TypeError: `documents` has no ``lengths``, ``__len__`` and ``__getitem__``.
        ValueError: its lengths are not one non-negative integer a document.
    """
    if not all(hasattr(documents, attr) for attr in ("lengths", "__len__", "__getitem__")):
        raise TypeError(
            f"{name} must be documents with lengths (datarax.pipeline.Documents or Mixture), "
            f"got {type(documents).__name__}; wrap a list of token arrays as "
            "Documents(the_list)."
        )
    lengths = np.asarray(documents.lengths)
    if lengths.ndim != 1 or not np.issubdtype(lengths.dtype, np.integer):
        raise ValueError(
            f"{name}.lengths must be a 1-D integer array, got {lengths.dtype} of shape "
            f"{lengths.shape}."
        )
    if len(lengths) != len(documents):
        raise ValueError(
            f"{name} has {len(documents)} documents but {len(lengths)} lengths; they must "
            "match, one length a document."
        )
    if len(lengths) and lengths.min() < 0:
        raise ValueError(f"{name}.lengths has a negative length at {int(lengths.argmin())}.")
    return lengths.astype(np.int64, copy=False)


def read_documents(documents: Any, indices: np.ndarray) -> list[np.ndarray]:
    """Documents `indices`, through ``documents.read`` when it has one (one pass over the
    files it needs), else one ``__getitem__`` each."""
    read = getattr(documents, "read", None)
    if callable(read):
        return list(read(indices))  # type: ignore[call-overload]
    return [documents[int(i)] for i in indices]


class Packed:
    """Rows of `length` tokens packed from `documents`, each a dict of three int32 arrays.

    ``tokens`` holds the pieces back to back, then zeros; ``segment_ids`` numbers the
    pieces of the row 1, 2, ... and is 0 on padding; ``positions`` counts from 0 within
    each piece (and is 0 on padding). Two tokens may attend to each other only where
    their segment ids are equal and non-zero.

    ``method="first_fit"`` keeps every document no longer than `length` whole in one
    row and cuts longer ones into rows of `length` plus a shorter last piece; pieces are
    placed longest first into the fullest row with room (first-fit decreasing), so rows
    are numbered longest documents first: shuffle them in the `Pipeline`
    (``shuffle=True``) or pass `rngs`. ``method="concat"`` lays the documents back to
    back and cuts where rows end: every row is full but the last. With `rngs`, the
    documents are put in a random order before packing (drawn from `rngs` as a
    pipeline's shuffle is), and ``first_fit`` rows in a random order after it.

    The plan is computed here from ``documents.lengths`` alone (no document is read)
    and is the same wherever the same documents and arguments are given: a pickled
    `Packed` carries the documents and arguments, and plans again where it is unpickled.
    Empty documents have no tokens to place and are left out (`empty_documents` counts
    them). Reading a row checks each document it reads against its planned length.

    Args:
        documents: a `Documents` or `Mixture` (anything with ``lengths``, ``__len__`` and
            ``__getitem__``; ``read(indices)`` is used when there).
        length: tokens a row.
        method: ``"first_fit"`` or ``"concat"``.
        rngs: seeds the random order ('shuffle' stream, else 'default'); None keeps the
            documents' order.

    Raises:
        TypeError: `documents` has no lengths, `length` is not an int, `rngs` is not an
            ``nnx.Rngs``.
        ValueError: `length` < 1, an unknown `method`, lengths that are not one
            non-negative integer a document.

    Example:
        >>> docs = [np.array([5, 6, 7]), np.array([8]), np.array([9, 9])]
        >>> packed = Packed(Documents(docs), 4)
        >>> len(packed), packed.fill
        (2, 0.75)
        >>> row = packed[0]
        >>> {key: value.tolist() for key, value in row.items()}
        {'tokens': [5, 6, 7, 8], 'segment_ids': [1, 1, 1, 2], 'positions': [0, 1, 2, 0]}
    """

    def __init__(
        self,
        documents: DocumentSource,
        length: int,
        *,
        method: Method = "first_fit",
        rngs: nnx.Rngs | None = None,
    ):
        self._documents = documents
        self._lengths = check_documents("documents", documents)
        self._length = check_int("length", length, meaning="tokens a row")
        self._method: Method = check_str("method", method, choices=tuple(_PLANS))  # type: ignore[assignment]
        self._seed = shuffle_seed(rngs, rngs is not None)
        self._plan = self._make_plan()

    def _make_plan(self) -> PackingPlan | ConcatPlan:
        count = len(self._lengths)
        if self._seed is None:
            order = np.arange(count)
        else:
            order = np.random.default_rng([*self._seed, 0]).permutation(count)
        plan = _PLANS[self._method](self._lengths, order, self._length)
        if self._seed is not None and isinstance(plan, PackingPlan):
            plan = _rows_shuffled(plan, np.random.default_rng([*self._seed, 1]))
        return plan

    def __getstate__(self) -> dict[str, Any]:
        return {
            "documents": self._documents,
            "length": self._length,
            "method": self._method,
            "seed": self._seed,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._documents, self._length = state["documents"], state["length"]
        self._method, self._seed = state["method"], state["seed"]
        self._lengths = check_documents("documents", self._documents)
        self._plan = self._make_plan()

    documents = property(lambda self: self._documents, doc="The documents packed.")
    length = property(lambda self: self._length, doc="Tokens a row.")
    method = property(lambda self: self._method, doc='"first_fit" or "concat".')
    plan = property(lambda self: self._plan, doc="Which pieces fill each row.")

    @property
    def num_tokens(self) -> int:
        """Tokens in all documents: each is in exactly one row."""
        return int(self._lengths.sum())

    @property
    def empty_documents(self) -> int:
        """Documents of length 0, left out."""
        return int(np.count_nonzero(self._lengths == 0))

    @property
    def fill(self) -> float:
        """The share of the rows' token slots that hold tokens (the rest is padding)."""
        return self.num_tokens / (len(self) * self._length) if len(self) else 0.0

    def __len__(self) -> int:
        return len(self._plan)

    def _row_index(self, row: Any) -> int:
        index = operator.index(row)
        if not -len(self) <= index < len(self):
            raise IndexError(f"row {index} is out of range for {len(self)} packed rows.")
        return index % len(self)

    def pieces(self, row: int) -> dict[str, np.ndarray]:
        """Row `row`'s pieces: ``document``, ``start`` (in the document), ``offset`` (in
        the row) and ``size``, each one entry a piece.

        Example:
            >>> Packed(Documents([np.arange(3), np.arange(2)]), 4).pieces(1)["document"]
            array([1], dtype=int32)
        """
        doc, start, offset, size = self._plan.pieces_of(self._row_index(row))
        return {"document": doc, "start": start, "offset": offset, "size": size}

    def documents_of(self, rows: Iterable[int] | np.ndarray) -> np.ndarray:
        """The documents with at least one token in `rows`, sorted, each once.

        Example:
            >>> Packed(Documents([np.arange(3), np.arange(3)]), 4).documents_of([0])
            array([0])
        """
        docs = [self._plan.pieces_of(self._row_index(r))[0] for r in np.asarray(rows).ravel()]
        return np.unique(np.concatenate(docs)).astype(np.int64) if docs else np.empty(0, np.int64)

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        """Row `index` (negative counts from the end)."""
        return self.__getitems__([index])[0]

    def __getitems__(self, rows: Iterable[int]) -> list[dict[str, np.ndarray]]:
        """Rows `rows`, reading each document they need once."""
        plans = [self._plan.pieces_of(self._row_index(r)) for r in rows]
        wanted = np.unique(np.concatenate([p[0] for p in plans] or [np.empty(0, np.int64)]))
        read = dict(zip(map(int, wanted), read_documents(self._documents, wanted), strict=True))
        for doc, tokens in read.items():
            read[doc] = self._checked(doc, tokens)
        return [self._row(read, *plan) for plan in plans]

    def _checked(self, doc: int, tokens: Any) -> np.ndarray:
        tokens = np.asarray(tokens)
        if tokens.shape != (self._lengths[doc],):
            raise SourceChangedError(
                f"Document {doc} has shape {tokens.shape}, but the plan was made for length "
                f"{self._lengths[doc]}: the documents changed after this Packed was built. "
                "Build a new Packed over them.",
                built=int(self._lengths[doc]),
                now=int(tokens.size),
            )
        if tokens.dtype.itemsize > 4 and len(tokens):
            low, high = int(tokens.min()), int(tokens.max())
            if low < _INT32.min or high > _INT32.max:
                raise ValueError(
                    f"Document {doc} holds token {high if high > _INT32.max else low}, which "
                    "int32 does not hold: packed rows are int32."
                )
        return tokens

    def _row(
        self,
        read: dict[int, np.ndarray],
        docs: np.ndarray,
        starts: np.ndarray,
        offsets: np.ndarray,
        sizes: np.ndarray,
    ) -> dict[str, np.ndarray]:
        tokens, segments, positions = (np.zeros(self._length, np.int32) for _ in range(3))
        for segment, (doc, start, offset, size) in enumerate(
            zip(docs.tolist(), starts.tolist(), offsets.tolist(), sizes.tolist(), strict=True),
            1,
        ):
            tokens[offset : offset + size] = read[doc][start : start + size]
            segments[offset : offset + size] = segment
            positions[offset : offset + size] = np.arange(size)
        return {"tokens": tokens, "segment_ids": segments, "positions": positions}


def _rows_shuffled(plan: PackingPlan, rng: np.random.Generator) -> PackingPlan:
    """`plan` with its rows in a random order (each row's pieces unchanged)."""
    rows = len(plan)
    new_order = rng.permutation(rows)
    counts = np.diff(plan.row_starts)[new_order]
    row_starts = np.zeros(rows + 1, plan.row_starts.dtype)
    np.cumsum(counts, out=row_starts[1:])
    take = np.repeat(plan.row_starts[:-1][new_order] - row_starts[:-1], counts)
    take = take + np.arange(len(take))
    return PackingPlan(plan.doc[take], plan.start[take], row_starts, plan.length, plan.lengths)
