"""`Mixture`: documents drawn from several named sources in proportion to weights.

Each epoch's schedule (`datarax.pipeline.documents._schedule`) is a pure function of the
sources' lengths, the seed, the options and the epoch's basis (the weights and where each
source stands), so every host computes the same one, a `Packed` over a mixture is a
random-access source like any other, and a pipeline's state carries the basis.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
from flax import nnx

from datarax._validate import check_int, check_number, check_str
from datarax.pipeline._order import shuffle_seed
from datarax.pipeline.documents._contract import (
    CheckedLengths,
    DocumentSource,
    many_indices,
    one_index,
    pieces_of,
    source_lengths,
)
from datarax.pipeline.documents._schedule import Stream, epoch_of

Weights = Mapping[str, float] | Sequence[float]
Shares = Literal["tokens", "documents"]
_SHARES = ("tokens", "documents")
_VIEWS = 2  # epochs of a mixture kept built: the one read and the next


def _by_name(mapping: Mapping[Any, Any], what: str) -> dict[str, Any]:
    """`mapping` keyed by each key's ``str``, the one name a source has.

    Raises:
        ValueError: two keys have the same name (``1`` and ``"1"``).
    """
    named = {str(key): value for key, value in mapping.items()}
    if len(named) != len(mapping):
        seen = [str(key) for key in mapping]
        twice = sorted({name for name in seen if seen.count(name) > 1})
        raise ValueError(
            f"{what} has keys that name the same source once made strings ({twice}): give "
            "each source one name."
        )
    return named


def _checked_weights(names: list[str], weights: Any, *, normalise: bool = True) -> np.ndarray:
    if isinstance(weights, Mapping):
        weights = _by_name(weights, "weights")
        unknown = sorted(set(weights) - set(names))
        missing = [name for name in names if name not in weights]
        if unknown or missing:
            raise ValueError(
                f"weights must name exactly the sources {names}; "
                + (f"{unknown} are not sources" if unknown else "")
                + ("; " if unknown and missing else "")
                + (f"{missing} have no weight" if missing else "")
                + "."
            )
        values = [weights[name] for name in names]
    elif isinstance(weights, Sequence) and not isinstance(weights, str):
        if len(weights) != len(names):
            raise ValueError(
                f"weights has {len(weights)} entries for {len(names)} sources {names}: give "
                "one weight a source, or a dict {name: weight}."
            )
        values = list(weights)
    else:
        raise TypeError(
            f"weights must be a dict {{name: weight}} or a list in the sources' order, got "
            f"{type(weights).__name__}."
        )
    checked = np.array(
        [
            check_number(f"weights[{name!r}]", v, minimum=0, maximum=math.inf)
            for name, v in zip(names, values, strict=True)
        ]
    )
    if not np.isfinite(checked).all():
        bad = names[int(np.flatnonzero(~np.isfinite(checked))[0])]
        raise ValueError(f"weights[{bad!r}] must be finite, got {checked[names.index(bad)]}.")
    if checked.max() <= 0:
        raise ValueError(
            f"weights must not all be zero, got {dict(zip(names, values, strict=True))}."
        )
    if not normalise:  # a basis's weights, kept bit for bit
        return checked
    checked = checked / checked.max()  # first: a sum of weights near the largest float overflows
    return checked / checked.sum()


def _skipped(name: str, given: Any) -> np.ndarray:
    """`skip[name]` as int64 document indices, once it is a 1-D sequence of ints.

    Raises:
        TypeError: a boolean mask, floats, or something that is no sequence of ints.
    """
    try:
        indices = np.asarray(given if isinstance(given, np.ndarray) else list(given))
    except (TypeError, ValueError):  # not iterable, or ragged
        indices = np.asarray(None)
    if indices.dtype == np.bool_:
        raise TypeError(
            f"skip[{name!r}] is a boolean mask; pass the indices of the documents read "
            "instead (np.flatnonzero(mask))."
        )
    if indices.ndim != 1 or (indices.size and indices.dtype.kind not in "iu"):
        raise TypeError(
            f"skip[{name!r}] must be a 1-D sequence of document indices (ints), got dtype "
            f"{indices.dtype} and shape {indices.shape}."
        )
    return indices.astype(np.int64)


def _checked_skip(skip: Any, names: list[str], counts: list[int]) -> list[np.ndarray]:
    if skip is None:
        return [np.empty(0, np.int64) for _ in names]
    if not isinstance(skip, Mapping):
        raise TypeError(
            f"skip must be a dict {{name: document indices}}, got {type(skip).__name__}."
        )
    skip = _by_name(skip, "skip")
    unknown = sorted(set(skip) - set(names))
    if unknown:
        raise ValueError(f"skip names {unknown}, which are not sources; the sources are {names}.")
    result = []
    for name, count in zip(names, counts, strict=True):
        indices = _skipped(name, skip.get(name, []))
        if len(indices) and (indices.min() < 0 or indices.max() >= count):
            raise ValueError(
                f"skip[{name!r}] holds document indices outside [0, {count}): source {name!r} "
                f"has {count} documents."
            )
        result.append(np.unique(indices))
    return result


def _checked_restart(restart: Any, names: list[str]) -> list[bool]:
    """`restart` (a bool, or the names of the sources that restart) as one flag a source."""
    if isinstance(restart, (bool, np.bool_)):
        return [bool(restart)] * len(names)
    if isinstance(restart, str) or not isinstance(restart, Iterable):
        raise TypeError(
            f"restart must be True, False or a list of source names, got "
            f"{type(restart).__name__}: {restart!r:.100}."
        )
    given = [str(name) for name in restart]
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise ValueError(
            f"restart names {unknown}, which are not sources; the sources are {names}."
        )
    return [name in given for name in names]


class Mixture(CheckedLengths):
    """Documents of several sources in proportion to `weights`, epoch after epoch.

    Each source is read in a random order of its own (drawn from `rngs` and the source's
    name, so adding a source leaves the others' orders unchanged), pass after pass, each
    pass in a new order. An epoch interleaves the sources so that every prefix of it holds
    each source at its weight, give or take one document: weights are shares of tokens
    (``shares="documents"``: of documents). The rules, in one sentence each:

    - An epoch holds as many tokens as the sources of positive weight together (or
      `epoch_size`), and ends sooner where a source that does not restart reaches the end
      of its pass, so no document of it repeats within the pass.
    - A source in `restart` starts a new pass in a new order when it runs out
      (upsampling); the others end the epoch.
    - Every epoch continues each source where the last one left it, so over the epochs
      every document is read in turn, none starved.

    ``len``, indexing, `lengths` and `read` give this mixture's epoch (epoch 0 of a mixture
    you build); a `Pipeline` asks for each epoch's by its basis: `epoch_basis` says what
    fixes an epoch (the weights and where each source stands: a small dict that the
    pipeline's state keeps) and `for_epoch` makes it. So a state saved under some weights
    resumes over a `Mixture` of the same sources with new weights: the epoch under way
    is read as it was planned, and the new weights take effect from the next epoch, with
    no document repeated or skipped (`epoch_size` sets how long an epoch is, and so how
    soon). A pipeline that drops its last partial batch leaves that batch's documents for
    their source's next pass (``drop_remainder=False`` reads them all). ``skip=`` leaves
    documents out of each source's first pass.

    Args:
        sources: a dict from names to `Documents` (or another `Mixture`, read as its
            first epoch).
        weights: a dict from the same names to non-negative numbers, or a list in the
            sources' order; they need not sum to 1. A source of weight 0 is left out.
        rngs: seeds the orders ('shuffle' stream, else 'default').
        shares: ``"tokens"`` (default: an empty document counts as one token) or
            ``"documents"``: what the weights share out.
        restart: the names of the sources that restart when they run out, or True (all)
            or False (none).
        epoch_size: tokens (documents, with ``shares="documents"``) an epoch holds at
            most; None: the sources' total.
        skip: a dict from source names to document indices to leave out of the first pass
            (already read).

    Raises:
        TypeError: `sources` is not a dict of documents, `weights` not a dict or list,
            `restart` not a bool or names, `rngs` not an ``nnx.Rngs``.
        ValueError: `weights` name other sources, are negative, not finite or sum to 0;
            `restart` or `skip` name other sources; `skip` holds indices out of range; a
            source of positive weight has no document to read; an epoch would be empty.

    Example:
        >>> web = Documents([np.full(n, 1) for n in (2, 3, 4, 5, 6, 7)])
        >>> code = Documents([np.full(n, 2) for n in (1, 2, 3)])
        >>> mixture = Mixture({"web": web, "code": code}, {"web": 2, "code": 1},
        ...                   rngs=nnx.Rngs(0), restart=["code"])
        >>> tokens = {name: 0 for name in mixture.names}
        >>> for i in range(len(mixture)):
        ...     tokens[mixture.source_of(i)] += len(mixture[i])
        >>> tokens  # 2:1 within a document; code's 6 tokens read almost twice
        {'web': 18, 'code': 11}
    """

    def __init__(
        self,
        sources: Mapping[str, DocumentSource],
        weights: Weights,
        *,
        rngs: nnx.Rngs,
        shares: Shares = "tokens",
        restart: bool | Iterable[str] = False,
        epoch_size: int | None = None,
        skip: Mapping[str, Iterable[int]] | None = None,
    ):
        if not isinstance(sources, Mapping) or not sources:
            raise TypeError(
                "sources must be a non-empty dict from names to Documents, e.g. "
                f"{{'web': Documents(...), 'code': Documents(...)}}; got {type(sources).__name__}."
            )
        named = _by_name(sources, "sources")
        self._names, self._sources = list(named), list(named.values())
        self._source_lengths = [
            source_lengths(f"sources[{name!r}]", source)
            for name, source in zip(self._names, self._sources, strict=True)
        ]
        normalised = _checked_weights(self._names, weights)
        self._shares: Shares = check_str("shares", shares, choices=_SHARES)  # type: ignore[assignment]
        self._restart = _checked_restart(restart, self._names)
        self._epoch_size = (
            None if epoch_size is None else check_int("epoch_size", epoch_size, maximum=2**62)
        )
        counts = [len(lengths) for lengths in self._source_lengths]
        self._skip = _checked_skip(skip, self._names, counts)
        if rngs is None:
            raise ValueError("Mixture needs rngs=nnx.Rngs(seed) to fix its order.")
        self._seed: list[int] = shuffle_seed(rngs, True) or []
        self._streams()
        self._check_readable(normalised)
        self._basis: dict[str, Any] = {
            "weights": dict(zip(self._names, normalised.tolist(), strict=True)),
            "starts": dict.fromkeys(self._names, 0),
        }
        self._schedule()

    def _streams(self) -> None:
        self._passes_of = []
        for name, lengths, skip in zip(self._names, self._source_lengths, self._skip, strict=True):
            sizes = np.ones(len(lengths), np.int64)
            if self._shares == "tokens":
                sizes = np.maximum(lengths, 1).astype(np.int64)
            self._passes_of.append(Stream([*self._seed, zlib.crc32(name.encode())], sizes, skip))
        self._views: dict[str, Mixture] = {}

    def _check_readable(self, weights: np.ndarray) -> None:
        """Raises where a source of positive weight has nothing to read."""
        empty = [
            name
            for name, stream, weight, again in zip(
                self._names, self._passes_of, weights, self._restart, strict=True
            )
            if weight and (not len(stream.sizes) or (not stream.first and not again))
        ]
        if empty:
            raise ValueError(
                f"Source(s) {empty} have no documents left (all skipped, or none): a mixture "
                "with a positive weight on them would be empty. Give them weight 0 (or, "
                "when some exist, let them restart)."
            )

    def _schedule(self) -> None:
        weights = np.array([self._basis["weights"][name] for name in self._names])
        starts = [self._basis["starts"][name] for name in self._names]
        size = self._epoch_size
        if size is None:
            size = sum(
                int(s.sizes.sum()) for s, w in zip(self._passes_of, weights, strict=True) if w
            )
        epoch = epoch_of(self._passes_of, weights, starts, size, self._restart)
        if not len(epoch.doc):
            raise ValueError(
                f"This epoch of the mixture holds no document: epoch_size={size} is smaller "
                "than the sources' next documents. Give a larger epoch_size."
            )
        self._source, self._doc, self._taken = epoch.source, epoch.doc, epoch.taken
        lengths = np.empty(len(self._doc), np.int64)
        for s, of_source in enumerate(self._source_lengths):
            mine = self._source == s
            lengths[mine] = of_source[self._doc[mine]]
        lengths.flags.writeable = False
        self._lengths = lengths

    def __getstate__(self) -> dict[str, Any]:
        state = {k: v for k, v in self.__dict__.items() if k not in ("_passes_of", "_views")}
        for name in ("_source", "_doc", "_lengths", "_source_lengths", "_fingerprint"):
            state.pop(name, None)  # made again from the rest
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._source_lengths = [
            source_lengths(f"sources[{name!r}]", source)
            for name, source in zip(self._names, self._sources, strict=True)
        ]
        self._streams()
        self._schedule()

    changes_by_epoch = True  # a Pipeline asks for each epoch's documents (`epoch_basis`)
    names = property(lambda self: tuple(self._names), doc="The sources' names, in order.")
    shares = property(lambda self: self._shares, doc='"tokens" or "documents".')
    weights = property(
        lambda self: dict(self._basis["weights"]),
        doc="Each source's weight in this epoch, normalised to sum to 1.",
    )

    @property
    def fingerprint(self) -> str:
        """A digest of what every epoch depends on but the weights: the sources' names
        and lengths, the seed and the options. A pipeline's state keeps it, so a state is
        refused over other sources, and resumes over new weights."""
        if not hasattr(self, "_fingerprint"):
            options = [self._names, self._seed, self._shares, self._restart, self._epoch_size]
            digest = hashlib.sha256(json.dumps(options).encode())
            for lengths, skip in zip(self._source_lengths, self._skip, strict=True):
                digest.update(np.asarray(lengths, np.int64).tobytes() + b"|")
                digest.update(skip.tobytes() + b"|")
            self._fingerprint = f"mixture-{digest.hexdigest()[:16]}"
        return self._fingerprint

    def epoch_basis(self, previous: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """What fixes an epoch: its weights and where each source starts, as a dict that
        JSON holds. None: this mixture's own epoch; a basis: the epoch after that one,
        under this mixture's weights.

        Example:
            >>> docs = Documents([np.arange(2)] * 4)
            >>> mixture = Mixture({"a": docs, "b": docs}, [1, 1], rngs=nnx.Rngs(0))
            >>> mixture.epoch_basis(mixture.epoch_basis())["starts"]
            {'a': 4, 'b': 4}
        """
        if previous is None:
            return json.loads(json.dumps(self._basis))
        before = self.for_epoch(previous)
        starts = [
            before._basis["starts"][name] + taken
            for name, taken in zip(self._names, before._taken, strict=True)
        ]
        weights = dict(self._basis["weights"])
        return {"weights": weights, "starts": dict(zip(self._names, starts, strict=True))}

    def for_epoch(self, basis: Mapping[str, Any]) -> Mixture:
        """The mixture of the epoch `basis` describes (see `epoch_basis`).

        Raises:
            ValueError: `basis` is not one of this mixture's: it names other sources, or
                holds weights or starts that are not valid.
        """
        key = json.dumps(basis, sort_keys=True, default=str)
        if key not in self._views:
            checked = self._checked_basis(basis)
            if len(self._views) >= _VIEWS:
                del self._views[next(iter(self._views))]
            view = copy.copy(self)
            view._basis = checked
            view._schedule()
            self._views[key] = view
        return self._views[key]

    def _checked_basis(self, basis: Any) -> dict[str, Any]:
        if not isinstance(basis, Mapping) or set(basis) != {"weights", "starts"}:
            raise ValueError(
                "An epoch's basis is the dict epoch_basis() returns, with 'weights' and "
                f"'starts'; got {basis!r:.200}."
            )
        for key in ("weights", "starts"):
            given = basis[key]
            names = sorted(map(str, given)) if isinstance(given, Mapping) else None
            if names != sorted(self._names):
                raise ValueError(
                    f"The epoch's basis names the sources {names} in {key!r}, but this "
                    f"mixture's sources are {sorted(self._names)}: build the Mixture over the "
                    "sources the state was saved with."
                )
        weights = _checked_weights(self._names, dict(basis["weights"]), normalise=False)
        starts = {
            name: check_int(f"starts[{name!r}]", basis["starts"][name], minimum=0)
            for name in self._names
        }
        return {"weights": dict(zip(self._names, weights.tolist(), strict=True)), "starts": starts}

    @property
    def lengths(self) -> np.ndarray:
        """Each document's length (read-only)."""
        return self._lengths

    def __len__(self) -> int:
        return len(self._doc)

    def _index(self, index: Any) -> int:
        return one_index(index, len(self), "documents of the mixture")

    def _picked(self, indices: Iterable[int] | np.ndarray) -> np.ndarray:
        return many_indices(indices, len(self), "documents of the mixture")

    def source_of(self, index: int) -> str:
        """The name of the source document `index` comes from."""
        return self._names[self._source[self._index(index)]]

    def source_indices(self, indices: Iterable[int] | np.ndarray) -> np.ndarray:
        """Where in `names` the source of each document `indices` is (int32).

        Example:
            >>> docs = Documents([np.arange(2)] * 2)
            >>> mixture = Mixture({"a": docs, "b": docs}, [1, 0], rngs=nnx.Rngs(0))
            >>> mixture.source_indices([0, 1]).tolist()
            [0, 0]
        """
        return self._source[self._picked(indices)].astype(np.int32)

    def documents_of(self, indices: Iterable[int] | np.ndarray) -> dict[str, np.ndarray]:
        """Which document of each source the mixture's documents `indices` are: a dict from
        every source's name to its document indices, sorted, each once.

        Example:
            >>> docs = Documents([np.arange(2)] * 4)
            >>> mixture = Mixture({"a": docs, "b": docs}, [1, 1], rngs=nnx.Rngs(0))
            >>> sorted(mixture.documents_of(range(len(mixture)))["a"].tolist())
            [0, 1, 2, 3]
        """
        picked = self._picked(indices)
        docs, sources = self._doc[picked], self._source[picked]
        return {name: np.unique(docs[sources == s]) for s, name in enumerate(self._names)}

    def __getitem__(self, index: int) -> np.ndarray:
        number = self._index(index)
        return self._sources[self._source[number]][int(self._doc[number])]

    def read_pieces(
        self,
        indices: Iterable[int] | np.ndarray,
        starts: Sequence[int] | np.ndarray,
        sizes: Sequence[int] | np.ndarray,
    ) -> list[np.ndarray]:
        """Tokens ``[start, start + size)`` of each document `indices`, each source asked
        once for its share (see `Documents.read_pieces`).

        Example:
            >>> docs = Documents([[1, 2, 3]] * 2)
            >>> mix = Mixture({"a": docs, "b": docs}, [1, 1], rngs=nnx.Rngs(0))
            >>> [piece.tolist() for piece in mix.read_pieces([0, 1], [1, 0], [2, 1])]
            [[2, 3], [1]]
        """
        picked = self._picked(indices)
        first, size = np.asarray(starts, np.int64), np.asarray(sizes, np.int64)
        sources = self._source[picked]
        out: list[Any] = [None] * len(picked)
        for s, source in enumerate(self._sources):
            where = np.flatnonzero(sources == s)
            if len(where):
                got = pieces_of(source, self._doc[picked[where]], first[where], size[where])
                for k, tokens in zip(where, got, strict=True):
                    out[k] = tokens
        return out

    def read(self, indices: Iterable[int] | np.ndarray) -> list[np.ndarray]:
        """Documents `indices`, in that order, each source read once for its share."""
        picked = self._picked(indices)
        sources = self._source[picked]
        out: list[Any] = [None] * len(picked)
        for s, source in enumerate(self._sources):
            where = np.flatnonzero(sources == s)
            if len(where):
                for k, tokens in zip(where, source.read(self._doc[picked[where]]), strict=True):
                    out[k] = tokens
        return out
