"""`Packed`: fixed-length rows of tokens packed from documents of every length.

The plan (`datarax.pipeline.documents._plan`) is computed from the documents' lengths
alone, the same on every host, so a packed row is a random-access record: a `Pipeline`
over it has one global order, each host reads only the documents of its rows, workers
make rows ahead, and its state resumes on any number of processes.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any, Literal, cast

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
from datarax.pipeline.documents._plan import (
    ConcatPlan,
    PackingPlan,
    PlanOptions,
    keyed_name,
    make_plan,
)
from datarax.pipeline.documents._saved_plans import saved_plan

Method = Literal["best_fit", "first_fit", "concat"]
LongDocuments = Literal["cut", "truncate"]
FIELDS = ("tokens", "segment_ids", "positions", "targets", "loss_mask", "source_ids")
_METHODS = ("best_fit", "first_fit", "concat")
_INT32 = np.iinfo(np.int32)
_WHAT = "packed rows"
_MAX_LENGTH = 1 << 24  # tokens a row: planning keeps one counter per free length
_NO_IDS = np.zeros(0, np.int32)


class Packed:
    """Rows of `length` tokens packed from `documents`, each a dict of int32 arrays of
    shape ``(length,)``, the `fields` asked for, in their order:

    - ``tokens``: the pieces back to back, then zeros;
    - ``segment_ids``: the pieces of the row numbered 1, 2, ...; 0 on padding;
    - ``positions``: counting from 0 within each piece; 0 on padding;
    - ``targets``: ``tokens[i + 1]`` where token i + 1 is in the same piece, else 0;
    - ``loss_mask``: 1 where a target exists, 0 on each piece's last token and on padding;
    - ``source_ids``: the index in ``documents.names`` of the source token i's document
      comes from, -1 on padding (only over documents with ``names`` and
      ``source_indices(indices)``, as a `Mixture` has).

    Two tokens may attend to each other only where their segment ids are equal and
    non-zero. With `bos_id` and `eos_id`, each non-empty document is packed with that id
    before and after its tokens, and counts them in its length.

    ``method="best_fit"`` keeps every document no longer than `length` whole in one row
    and cuts longer ones into rows of `length` plus a shorter last piece; each block of
    1,048,576 documents is packed on its own, its pieces placed longest first into the
    fullest row with room (best-fit decreasing), so rows are numbered longest documents
    first: shuffle them in the `Pipeline` (``shuffle=True``) or pass `rngs`.
    ``"first_fit"``, its earlier name, means exactly the same (``method`` then says
    ``"best_fit"``). ``method="concat"`` lays the documents back to back and cuts where
    rows end: every row is full but the last. With `rngs`, the documents are put in a
    random order before packing (drawn from `rngs` as a pipeline's shuffle is), and
    ``best_fit`` rows are read in a random order after it.

    The plan is computed from ``documents.lengths`` alone (no document is read) and is
    the same wherever the same documents and arguments are given. Where it lives, by one
    rule: over a `Documents` of files whose lengths it read (token stores, Megatron
    pairs, flat token files, Parquet, JSON Lines) it is computed once, on every core, kept
    in files (in the store's ``plans`` folder when the documents are one store and it can
    be written, else in the documents' ``cache_dir``) and memory-mapped by every process
    that packs the same files the same way, workers included; over anything else it is
    computed here in memory, and a pickled copy (a worker's) carries it. Empty documents
    have no tokens to place and are left out (`empty_documents` counts them); documents
    that are all empty, or none, give 0 rows. A row reads only the tokens it holds, and
    checks each piece it reads against its planned length.

    Args:
        documents: a `Documents` or `Mixture` (anything with ``lengths``, ``__len__``,
            ``__getitem__`` and ``read(indices)``).
        length: tokens a row, 1 to 16,777,216.
        method: ``"best_fit"`` (or ``"first_fit"``, the same) or ``"concat"``.
        rngs: seeds the random order ('shuffle' stream, else 'default'); None keeps the
            documents' order.
        bos_id: a token id put before each non-empty document; None: none.
        eos_id: a token id put after each non-empty document; None: none.
        long_documents: ``"cut"`` cuts a document longer than a row into pieces over
            rows; ``"truncate"`` keeps its first `length` tokens (its bos id counted; its
            eos id lost where it is cut) and drops the rest.
        max_segments: pieces a row holds at most (``best_fit`` only); None: no limit.
        fields: the arrays of a row, from ``tokens``, ``segment_ids``, ``positions``,
            ``targets``, ``loss_mask`` and ``source_ids``, in the order given.

    Raises:
        TypeError: `documents` is no documents source; `length`, `max_segments`, an id
            is not an int; `rngs` is not an ``nnx.Rngs``; `fields` not a list of names.
        ValueError: `length` outside [1, 2**24], an unknown `method` or
            `long_documents`, an id outside int32, `max_segments` below 1 or with
            ``"concat"``, unknown or repeated `fields` or none, ``source_ids`` over
            documents without sources, lengths that are not one non-negative integer a
            document.

    Example:
        >>> docs = [np.array([5, 6, 7]), np.array([8]), np.array([9, 9])]
        >>> packed = Packed(Documents(docs), 4)
        >>> len(packed), packed.fill
        (2, 0.75)
        >>> row = packed[0]
        >>> {key: value.tolist() for key, value in row.items()}
        {'tokens': [5, 6, 7, 8], 'segment_ids': [1, 1, 1, 2], 'positions': [0, 1, 2, 0]}
        >>> fields = ("tokens", "targets", "loss_mask")
        >>> training = Packed(Documents(docs), 4, eos_id=1, fields=fields)
        >>> {key: value.tolist() for key, value in training[0].items()}
        {'tokens': [5, 6, 7, 1], 'targets': [6, 7, 1, 0], 'loss_mask': [1, 1, 1, 0]}
    """

    _views: dict[str, Packed]  # for_epoch's, made when first asked

    def __init__(
        self,
        documents: DocumentSource,
        length: int,
        *,
        method: Method = "best_fit",
        rngs: nnx.Rngs | None = None,
        bos_id: int | None = None,
        eos_id: int | None = None,
        long_documents: LongDocuments = "cut",
        max_segments: int | None = None,
        fields: Sequence[str] = FIELDS[:3],
    ):
        self._documents = documents
        self._lengths = source_lengths("documents", documents)
        self._length = check_int("length", length, maximum=_MAX_LENGTH, meaning="tokens a row")
        chosen = cast(Method, check_str("method", method, choices=_METHODS))
        self._method: Literal["best_fit", "concat"] = (
            "best_fit" if chosen == "first_fit" else chosen
        )
        self._bos, self._eos = _token_id("bos_id", bos_id), _token_id("eos_id", eos_id)
        long = check_str("long_documents", long_documents, choices=("cut", "truncate"))
        self._long = cast(LongDocuments, long)
        self._max_segments = _checked_max_segments(max_segments, self._method)
        self._fields = _checked_fields(fields, documents)
        self._seed = shuffle_seed(rngs, rngs is not None)
        self._plan = self._make_plan()
        self._fingerprint = self._fingerprinted()

    @property
    def _options(self) -> PlanOptions:
        added = (self._bos is not None) + (self._eos is not None)
        return PlanOptions(added, self._long == "truncate", self._max_segments)

    def _fingerprinted(self) -> str:
        """A digest of what the rows depend on: the arguments, and the documents' files
        (their paths and stamps) or, in memory, their lengths. Without the options that
        came after ``method``, the digest is the one made before them."""
        home: Any = getattr(self._documents, "_plan_home", None)
        where = home() if home is not None else None
        lengths = where[0].encode() if where else np.asarray(self._lengths, np.int64).tobytes()
        if self.changes_by_epoch:  # a Mixture's, which every epoch shares
            lengths = str(self._documents.fingerprint).encode()  # type: ignore[attr-defined]
        said = f"{keyed_name(self._method)}|{self._length}|{self._seed}|"
        options = (self._bos, self._eos, self._long, self._max_segments)
        if options != (None, None, "cut", None):
            said += "bos={}|eos={}|long={}|max={}|".format(*options)
        digest = hashlib.sha256(said.encode())
        digest.update(lengths)
        return f"packed-{digest.hexdigest()[:16]}"

    def _make_plan(self) -> PackingPlan | ConcatPlan:
        arguments = (self._length, self._method, self._seed, self._options)
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
            "options": (self._bos, self._eos, self._long, self._max_segments, self._fields),
            "plan": None if self._in_files else self._plan,  # kept in files: found again
            "fingerprint": self._fingerprint,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._documents, self._length = state["documents"], state["length"]
        self._method, self._seed = state["method"], state["seed"]
        self._bos, self._eos, self._long, self._max_segments, self._fields = state["options"]
        self._lengths = source_lengths("documents", self._documents)
        self._in_files = state["plan"] is None
        self._plan = self._make_plan() if state["plan"] is None else state["plan"]
        self._fingerprint = state["fingerprint"]

    documents = property(lambda self: self._documents, doc="The documents packed.")

    @property
    def changes_by_epoch(self) -> bool:
        """Whether the documents change by epoch (a `Mixture`): then so do the rows, and a
        `Pipeline` asks for each epoch's (`epoch_basis`, `for_epoch`)."""
        return bool(getattr(self._documents, "changes_by_epoch", False))

    def epoch_basis(self, previous: Any = None) -> dict[str, Any]:
        """The documents' basis of an epoch (see `Mixture.epoch_basis`).

        Raises:
            TypeError: the documents are the same every epoch.
        """
        return self._epochal().epoch_basis(previous)

    def for_epoch(self, basis: Any) -> Packed:
        """The rows packed from the documents of the epoch `basis` describes, with this
        Packed's options; the last two asked are kept.

        Example:
            >>> docs = Documents([np.arange(1, n) for n in (4, 3, 5, 2)])
            >>> packed = Packed(Mixture({"a": docs}, [1], rngs=nnx.Rngs(0)), 4)
            >>> later = packed.for_epoch(packed.epoch_basis(packed.epoch_basis()))
            >>> later.num_tokens == packed.num_tokens, later.fingerprint == packed.fingerprint
            (True, True)
        """
        key = json.dumps(basis, sort_keys=True, default=str)
        views = self.__dict__.setdefault("_views", {})
        if key not in views:
            documents = self._epochal().for_epoch(basis)
            if len(views) >= 2:
                del views[next(iter(views))]
            view = copy.copy(self)
            view._documents, view._views = documents, {}
            view._lengths = source_lengths("documents", documents)
            view._plan = view._make_plan()
            views[key] = view
        return views[key]

    def _epochal(self) -> Any:
        if not self.changes_by_epoch:
            raise TypeError(
                f"These rows are packed from documents that are the same every epoch "
                f"({type(self._documents).__name__}); only rows of a Mixture change by epoch."
            )
        return self._documents

    length = property(lambda self: self._length, doc="Tokens a row.")
    method = property(lambda self: self._method, doc='"best_fit" or "concat".')
    bos_id = property(lambda self: self._bos, doc="The id before each document, or None.")
    eos_id = property(lambda self: self._eos, doc="The id after each document, or None.")
    long_documents = property(lambda self: self._long, doc='"cut" or "truncate".')
    max_segments = property(lambda self: self._max_segments, doc="Pieces a row at most.")
    fields = property(lambda self: self._fields, doc="The arrays of a row, in order.")
    plan = property(lambda self: self._plan, doc="Which pieces fill each row.")
    fingerprint = property(
        lambda self: self._fingerprint,
        doc="A digest of what the rows' values depend on (the arguments but `fields`, the "
        "documents' files or lengths), kept in a `Pipeline`'s state: a state saved over "
        "other rows is refused.",
    )

    @property
    def num_tokens(self) -> int:
        """Tokens the rows hold, each in exactly one row: every document's, with its
        added ids, and under ``"truncate"`` at most a row's length of each."""
        return self._options.tokens(self._lengths, self._length)

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
        """Row `row`'s pieces: ``document``, ``start`` (in the document, its bos id
        counted), ``offset`` (in the row) and ``size``, each one entry a piece.

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
        docs, starts, sizes = (
            np.concatenate([np.zeros(0, np.int64), *(plan[k] for plan in plans)]).astype(np.int64)
            for k in (0, 1, 3)
        )
        # A piece of a document as planned (its ids added) is a piece of the document read
        # (perhaps none: a piece of ids alone), with the bos id where it begins at 0 and the
        # eos id where it runs past the document's tokens.
        bos, lengths = int(self._bos is not None), self._lengths[docs].astype(np.int64)
        first = np.maximum(starts - bos, 0)
        count = np.maximum(np.minimum(starts + sizes - bos, lengths) - first, 0)
        bodies = self._bodies(docs, first, count)
        pieces = self._with_ids(bodies, starts == 0, starts + sizes > lengths + bos)
        sources = self._sources(docs)
        ends = np.cumsum([len(plan[0]) for plan in plans]).tolist()
        return [
            self._row(pieces[end - len(plan[0]) : end], plan, sources[end - len(plan[0]) : end])
            for plan, end in zip(plans, ends, strict=True)
        ]

    def _bodies(self, docs: np.ndarray, first: np.ndarray, count: np.ndarray) -> list[np.ndarray]:
        """Tokens ``[first, first + count)`` of each document `docs`, checked."""
        if not hasattr(self._documents, "read_pieces"):
            wanted = np.unique(docs)
            documents = [np.asarray(tokens) for tokens in self._documents.read(wanted)]
            self._check(wanted, documents)
            read = dict(zip(wanted.tolist(), documents, strict=True))
            cuts = zip(docs.tolist(), first.tolist(), count.tolist(), strict=True)
            return [read[doc][at : at + size] for doc, at, size in cuts]
        # Only the pieces (each token is in one row: no piece twice), so a long document
        # cut over rows is fetched a piece a row.
        asked = np.flatnonzero(count)
        got = pieces_of(self._documents, docs[asked], first[asked], count[asked])
        got = [np.asarray(tokens) for tokens in got]
        self._check(docs[asked], got, count[asked])
        bodies = [_NO_IDS] * len(docs)
        for k, tokens in zip(asked.tolist(), got, strict=True):
            bodies[k] = tokens
        return bodies

    def _with_ids(
        self, bodies: list[np.ndarray], begins: np.ndarray, ends: np.ndarray
    ) -> list[np.ndarray]:
        """Each piece's tokens: its `bodies` (checked), with the bos id where it `begins` its
        document and the eos id where it `ends` it."""
        if self._bos is None and self._eos is None:
            return bodies
        bos = _NO_IDS if self._bos is None else np.array([self._bos], np.int32)
        eos = _NO_IDS if self._eos is None else np.array([self._eos], np.int32)
        return [
            np.concatenate([bos[: int(head)], body.astype(np.int32), eos[: int(tail)]])
            for body, head, tail in zip(bodies, begins.tolist(), ends.tolist(), strict=True)
        ]

    def _sources(self, docs: np.ndarray) -> np.ndarray:
        """The source of each document `docs`, where ``source_ids`` are asked for."""
        if "source_ids" not in self._fields:
            return np.zeros(len(docs), np.int32)
        sources = np.asarray(self._documents.source_indices(docs))  # type: ignore[attr-defined]
        if sources.shape != docs.shape or (sources.size and sources.dtype.kind not in "iu"):
            raise TypeError(
                f"documents.source_indices gave dtype {sources.dtype} and shape "
                f"{sources.shape} for {len(docs)} documents: it must give one int a document."
            )
        return sources

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

    def _row(
        self, pieces: list[np.ndarray], plan: tuple[np.ndarray, ...], sources: np.ndarray
    ) -> dict[str, np.ndarray]:
        """The row of `pieces` (those of `plan`: documents, starts, offsets, sizes; from
        `sources`) laid back to back from its start: the arrays of `fields`."""
        offsets, sizes = plan[2], plan[3]
        tokens, segments, positions = (np.zeros(self._length, np.int32) for _ in range(3))
        filled = int(sizes.sum())
        if filled:
            tokens[:filled] = np.concatenate(pieces)
            segments[:filled] = np.repeat(np.arange(1, len(sizes) + 1, dtype=np.int32), sizes)
            positions[:filled] = np.arange(filled) - np.repeat(offsets, sizes)
        made = {"tokens": tokens, "segment_ids": segments, "positions": positions}
        if "targets" in self._fields or "loss_mask" in self._fields:
            # Token i has a target where token i + 1 is in the same piece.
            follows = (segments[1:] == segments[:-1]) & (segments[:-1] > 0)
            made["targets"] = np.append(np.where(follows, tokens[1:], 0), 0).astype(np.int32)
            made["loss_mask"] = np.append(follows, False).astype(np.int32)
        if "source_ids" in self._fields:
            made["source_ids"] = np.full(self._length, -1, np.int32)
            made["source_ids"][:filled] = np.repeat(sources, sizes)
        return {name: made[name] for name in self._fields}


def _token_id(name: str, value: Any) -> int | None:
    """`value`, a token id added to each document, as an int; None stays None."""
    if value is None:
        return None
    return check_int(
        name, value, minimum=int(_INT32.min), maximum=int(_INT32.max), meaning="a token id"
    )


def _checked_max_segments(value: Any, method: str) -> int | None:
    if value is None:
        return None
    checked = check_int("max_segments", value, meaning="pieces a row at most")
    if method == "concat":
        raise ValueError(
            f"max_segments={checked} limits the pieces best_fit places in a row, but "
            "method='concat' lays documents back to back and cuts where rows end. Use "
            "method='best_fit' with max_segments, or leave max_segments=None."
        )
    return checked


def _checked_fields(fields: Any, documents: Any) -> tuple[str, ...]:
    """`fields` as a tuple, once they name fields of a row, each once, at least one."""
    if isinstance(fields, str) or not isinstance(fields, Sequence):
        raise TypeError(
            f"fields must be a list or tuple of field names, got {type(fields).__name__}: "
            f"{fields!r:.100}; e.g. fields=('tokens', 'targets', 'loss_mask')."
        )
    for number, name in enumerate(fields):
        check_str(f"fields[{number}]", name)
    unknown = [name for name in fields if name not in FIELDS]
    twice = sorted({name for name in fields if list(fields).count(name) > 1})
    if not fields or unknown or twice:
        wrong = (
            "names no field"
            if not fields
            else f"names {unknown}, not fields of a row"
            if unknown
            else f"names {twice} more than once"
        )
        raise ValueError(f"fields {wrong}: choose each at most once from {list(FIELDS)}.")
    if "source_ids" in fields and not all(
        hasattr(documents, member) for member in ("source_indices", "names")
    ):
        raise ValueError(
            f"fields asks for 'source_ids', but the documents ({type(documents).__name__}) "
            "have no sources: they need names and source_indices(indices), as a Mixture "
            "has. Pack a Mixture, or leave 'source_ids' out of fields."
        )
    return tuple(fields)
