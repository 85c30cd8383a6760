"""`Packed`: fixed-length rows of tokens packed from documents of every length.

The plan (`datarax.pipeline.documents._plan`) is computed from the documents' lengths
alone, the same on every host, so a packed row is a random-access record: a `Pipeline`
over it has one global order, each host reads only the documents of its rows, workers
make rows ahead, and its state resumes on any number of processes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any, Literal

import numpy as np
from flax import nnx

from datarax._validate import check_int, check_str
from datarax.errors import DocumentError, SourceChangedError
from datarax.pipeline._order import shuffle_seed
from datarax.pipeline.documents._contract import (
    DocumentSource,
    many_indices,
    one_index,
    pieces_of,
    source_lengths,
)
from datarax.pipeline.documents._plan import ConcatPlan, PackingPlan, make_plan
from datarax.pipeline.documents._saved_plans import saved_plan

Method = Literal["first_fit", "concat"]
_METHODS = ("first_fit", "concat")
_INT32 = np.iinfo(np.int32)
_WHAT = "packed rows"
_MAX_LENGTH = 1 << 24  # tokens a row: planning keeps one counter per free length


class Packed:
    """Rows of `length` tokens packed from `documents`, each a dict of three int32 arrays.

    ``tokens`` holds the pieces back to back, then zeros; ``segment_ids`` numbers the
    pieces of the row 1, 2, ... and is 0 on padding; ``positions`` counts from 0 within
    each piece (and is 0 on padding). Two tokens may attend to each other only where
    their segment ids are equal and non-zero.

    ``method="first_fit"`` keeps every document no longer than `length` whole in one
    row and cuts longer ones into rows of `length` plus a shorter last piece; each block
    of 1,048,576 documents is packed on its own, its pieces placed longest first into the
    fullest row with room (first-fit decreasing), so rows are numbered longest documents
    first: shuffle them in the `Pipeline` (``shuffle=True``) or pass `rngs`.
    ``method="concat"`` lays the documents back to back and cuts where rows end: every
    row is full but the last. With `rngs`, the documents are put in a random order
    before packing (drawn from `rngs` as a pipeline's shuffle is), and ``first_fit`` rows
    are read in a random order after it.

    The plan is computed from ``documents.lengths`` alone (no document is read) and is
    the same wherever the same documents and arguments are given. Where it lives, by one
    rule: over a `Documents` of files whose lengths it read (token stores, Megatron
    pairs, flat token files, Parquet, JSON Lines) it is computed once, on every core, kept
    in files (in the store's ``plans`` folder when the documents are one store and it can
    be written, else in the documents' ``cache_dir``) and memory-mapped by every process
    that packs the same files the same way, workers included; over anything else it is
    computed here in memory, and a pickled copy (a worker's) carries it. Empty documents
    have no tokens to place and are left out (`empty_documents` counts them); documents
    that are all empty, or none, give 0 rows. Reading a row checks each document it reads
    against its planned length.

    Args:
        documents: a `Documents` or `Mixture` (anything with ``lengths``, ``__len__``,
            ``__getitem__`` and ``read(indices)``).
        length: tokens a row, 1 to 16,777,216.
        method: ``"first_fit"`` or ``"concat"``.
        rngs: seeds the random order ('shuffle' stream, else 'default'); None keeps the
            documents' order.

    Raises:
        TypeError: `documents` is no documents source, `length` is not an int, `rngs` is
            not an ``nnx.Rngs``.
        ValueError: `length` outside [1, 2**24], an unknown `method`, lengths that are
            not one non-negative integer a document.

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
        self._lengths = source_lengths("documents", documents)
        self._length = check_int("length", length, maximum=_MAX_LENGTH, meaning="tokens a row")
        self._method: Method = check_str("method", method, choices=_METHODS)  # type: ignore[assignment]
        self._seed = shuffle_seed(rngs, rngs is not None)
        self._plan = self._make_plan()
        self._fingerprint = self._fingerprinted()

    def _fingerprinted(self) -> str:
        """A digest of what the rows depend on: the arguments, and the documents' files
        (their paths and stamps) or, in memory, their lengths."""
        home: Any = getattr(self._documents, "_plan_home", None)
        where = home() if home is not None else None
        lengths = where[0].encode() if where else np.asarray(self._lengths, np.int64).tobytes()
        digest = hashlib.sha256(f"{self._method}|{self._length}|{self._seed}|".encode())
        digest.update(lengths)
        return f"packed-{digest.hexdigest()[:16]}"

    def _make_plan(self) -> PackingPlan | ConcatPlan:
        arguments = (self._length, self._method, self._seed)
        home: Any = getattr(self._documents, "_plan_home", None)
        where = home() if home is not None else None
        self._in_files = where is not None
        if where is None:
            return make_plan(self._lengths, *arguments)
        identity, roots = where
        return saved_plan(self._documents, self._lengths, identity, roots, arguments)

    def __getstate__(self) -> dict[str, Any]:
        return {
            "documents": self._documents,
            "length": self._length,
            "method": self._method,
            "seed": self._seed,
            "plan": None if self._in_files else self._plan,  # kept in files: found again
            "fingerprint": self._fingerprint,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._documents, self._length = state["documents"], state["length"]
        self._method, self._seed = state["method"], state["seed"]
        self._lengths = source_lengths("documents", self._documents)
        self._in_files = state["plan"] is None
        self._plan = self._make_plan() if state["plan"] is None else state["plan"]
        self._fingerprint = state["fingerprint"]

    documents = property(lambda self: self._documents, doc="The documents packed.")
    length = property(lambda self: self._length, doc="Tokens a row.")
    method = property(lambda self: self._method, doc='"first_fit" or "concat".')
    plan = property(lambda self: self._plan, doc="Which pieces fill each row.")
    fingerprint = property(
        lambda self: self._fingerprint,
        doc="A digest of what the rows depend on (the arguments, the documents' files or "
        "lengths), kept in a `Pipeline`'s state: a state saved over other rows is refused.",
    )

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

    def pieces(self, row: int) -> dict[str, np.ndarray]:
        """Row `row`'s pieces: ``document``, ``start`` (in the document), ``offset`` (in
        the row) and ``size``, each one entry a piece.

        Example:
            >>> Packed(Documents([np.arange(3), np.arange(2)]), 4).pieces(1)["document"]
            array([1], dtype=int32)
        """
        doc, start, offset, size = self._plan.pieces_of(one_index(row, len(self), _WHAT))
        return {"document": doc, "start": start, "offset": offset, "size": size}

    def documents_of(self, rows: Iterable[int] | np.ndarray) -> np.ndarray:
        """The documents with at least one token in `rows`, sorted, each once.

        Example:
            >>> Packed(Documents([np.arange(3), np.arange(3)]), 4).documents_of([0])
            array([0])
        """
        asked = many_indices(rows, len(self), _WHAT)
        docs = [self._plan.pieces_of(int(row))[0] for row in asked]
        return np.unique(np.concatenate([np.empty(0, np.int64), *docs])).astype(np.int64)

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        """Row `index` (negative counts from the end)."""
        return self._rows([one_index(index, len(self), _WHAT)])[0]

    def __getitems__(self, rows: Iterable[int]) -> list[dict[str, np.ndarray]]:
        """Rows `rows`, reading each document they need once."""
        return self._rows(many_indices(rows, len(self), _WHAT).tolist())

    def _rows(self, rows: list[int]) -> list[dict[str, np.ndarray]]:
        plans = [self._plan.pieces_of(row) for row in rows]
        if not hasattr(self._documents, "read_pieces"):
            wanted = np.unique(np.concatenate([np.empty(0, np.int64), *(p[0] for p in plans)]))
            documents = [np.asarray(tokens) for tokens in self._documents.read(wanted)]
            self._check(wanted, documents)
            read = dict(zip(wanted.tolist(), documents, strict=True))
            return [self._row(_cut(read, plan), plan) for plan in plans]
        # Only the pieces (each token is in one row: no piece twice), so a long document
        # cut over rows is fetched a piece a row.
        docs, starts, sizes = (
            np.concatenate([np.zeros(0, np.int64), *(plan[k] for plan in plans)]).astype(np.int64)
            for k in (0, 1, 3)
        )
        pieces = [np.asarray(t) for t in pieces_of(self._documents, docs, starts, sizes)]
        self._check(docs, pieces, sizes)
        ends = np.cumsum([len(plan[0]) for plan in plans]).tolist()
        return [
            self._row(pieces[end - len(plan[0]) : end], plan)
            for plan, end in zip(plans, ends, strict=True)
        ]

    def _check(
        self, wanted: np.ndarray, documents: list[np.ndarray], sizes: np.ndarray | None = None
    ) -> None:
        """Raises where a document (or, with `sizes`, a piece of it) read is not what the
        plan was made for, or holds a token that int32 (the rows' dtype) does not."""
        shapes = [tokens.shape for tokens in documents]
        planned = (self._lengths[wanted] if sizes is None else sizes).tolist()
        for doc, shape, length in zip(wanted.tolist(), shapes, planned, strict=True):
            if shape != (length,):
                raise SourceChangedError(
                    f"Document {doc} has shape {shape}, but the plan was made for length "
                    f"{length}: the documents changed after this Packed was built. Build a "
                    "new Packed over them.",
                    built=int(length),
                    now=int(np.prod(shape)),
                )
        for doc, tokens in zip(wanted.tolist(), documents, strict=True):
            if tokens.dtype.kind not in "iu":
                raise DocumentError(
                    f"Document {doc} is an array of {tokens.dtype}, not integer token ids: "
                    "the documents must hold token ids (wrap them in Documents to check "
                    "them where they enter).",
                    index=doc,
                )
            if len(tokens) and not np.can_cast(tokens.dtype, np.int32):
                low, high = int(tokens.min()), int(tokens.max())
                if low < _INT32.min or high > _INT32.max:
                    raise ValueError(
                        f"Document {doc} holds token {high if high > _INT32.max else low}, "
                        "which int32 does not hold: packed rows are int32."
                    )

    def _row(self, pieces: list[np.ndarray], plan: tuple[np.ndarray, ...]) -> dict[str, np.ndarray]:
        """The row of `pieces` (those of `plan`: documents, starts, offsets, sizes) laid
        back to back from its start."""
        offsets, sizes = plan[2], plan[3]
        tokens, segments, positions = (np.zeros(self._length, np.int32) for _ in range(3))
        filled = int(sizes.sum())
        if filled:
            tokens[:filled] = np.concatenate(pieces)
            segments[:filled] = np.repeat(np.arange(1, len(sizes) + 1, dtype=np.int32), sizes)
            positions[:filled] = np.arange(filled) - np.repeat(offsets, sizes)
        return {"tokens": tokens, "segment_ids": segments, "positions": positions}


def _cut(read: dict[int, np.ndarray], plan: tuple[np.ndarray, ...]) -> list[np.ndarray]:
    """The pieces of a row's `plan` (documents, starts, offsets, sizes) cut from whole
    documents `read` (by index)."""
    docs, starts, _, sizes = plan
    return [
        read[doc][start : start + size]
        for doc, start, size in zip(docs.tolist(), starts.tolist(), sizes.tolist(), strict=True)
    ]
