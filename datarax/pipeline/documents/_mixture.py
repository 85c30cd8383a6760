"""`Mixture`: documents drawn from several named sources in proportion to weights.

The schedule is a pure function of the sources' lengths, the weights, the seed and the
documents to leave out, so every host computes the same one and a `Packed` over a
mixture is a random-access source like any other.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from flax import nnx

from datarax._validate import check_number
from datarax.pipeline._order import shuffle_seed
from datarax.pipeline.documents._contract import (
    CheckedLengths,
    DocumentSource,
    many_indices,
    one_index,
    pieces_of,
    source_lengths,
)

Weights = Mapping[str, float] | Sequence[float]


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


def _checked_weights(names: list[str], weights: Any) -> np.ndarray:
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


class Mixture(CheckedLengths):
    """Documents of several sources in proportion to `weights`, in an order fixed by `rngs`.

    Each source's documents are visited in a random order of their own (drawn from `rngs`
    and the source's name, so adding a source leaves the others' orders unchanged). The
    sources are interleaved so that every prefix of the mixture holds each source in
    proportion to its weight, give or take one document: source s's k-th document comes at
    time ``(k + u) / weight_s`` (u uniform in [0, 1)), and the mixture lists documents by
    time. It ends when the first source runs out at its weight, so no document repeats.

    To change the weights part way through an epoch, build a new `Mixture` with the same
    sources and `rngs` and ``skip=`` the documents already read (`documents_of` tells them
    from mixture indices; `Packed.documents_of` from packed rows): each source continues
    its own order without the skipped documents, under the new weights, so no document of
    any source is repeated or missed (a document partly read counts as read).

    Args:
        sources: a dict from names to `Documents` (or other `Mixture`\\ s).
        weights: a dict from the same names to non-negative numbers, or a list in the
            sources' order; they need not sum to 1. A source of weight 0 is left out.
        rngs: seeds the orders ('shuffle' stream, else 'default').
        skip: a dict from source names to document indices to leave out (already read).

    Raises:
        TypeError: `sources` is not a dict of documents, `weights` not a dict or list,
            `rngs` not an ``nnx.Rngs``.
        ValueError: `weights` name other sources, are negative, not finite or sum to 0;
            `skip` names other sources or indices out of range; nothing is left to mix.

    Example:
        >>> web = Documents([np.full(n, 1) for n in (2, 3, 4, 5, 6, 7)])
        >>> code = Documents([np.full(n, 2) for n in (1, 2, 3)])
        >>> mixture = Mixture({"web": web, "code": code}, {"web": 2, "code": 1},
        ...                   rngs=nnx.Rngs(0))
        >>> len(mixture), [mixture.source_of(i) for i in range(len(mixture))].count("code")
        (9, 3)
    """

    def __init__(
        self,
        sources: Mapping[str, DocumentSource],
        weights: Weights,
        *,
        rngs: nnx.Rngs,
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
        self._weights = _checked_weights(self._names, weights)
        counts = [len(lengths) for lengths in self._source_lengths]
        self._skip = _checked_skip(skip, self._names, counts)
        if rngs is None:
            raise ValueError("Mixture needs rngs=nnx.Rngs(seed) to fix its order.")
        self._seed: list[int] = shuffle_seed(rngs, True) or []
        self._schedule()

    def _schedule(self) -> None:
        orders, times = [], []
        for name, lengths, weight, skip in zip(
            self._names, self._source_lengths, self._weights, self._skip, strict=True
        ):
            words = [*self._seed, zlib.crc32(name.encode())]
            order = np.random.default_rng(words).permutation(len(lengths))
            order = order[~np.isin(order, skip)]
            jitter = np.random.default_rng([*words, 1]).random(len(order))
            orders.append(order)
            times.append(
                (np.arange(len(order)) + jitter) / weight if weight else np.full(len(order), np.inf)
            )
        ends = [len(order) / w for order, w in zip(orders, self._weights, strict=True) if w]
        cutoff = min(ends)
        if cutoff == 0:
            empty = [
                n
                for n, o, w in zip(self._names, orders, self._weights, strict=True)
                if w and not len(o)
            ]
            raise ValueError(
                f"Source(s) {empty} have no documents left (all skipped, or none): a mixture "
                "with a positive weight on them would be empty. Give them weight 0."
            )
        kept = [t < cutoff for t in times]
        kind = np.int16 if len(kept) <= np.iinfo(np.int16).max else np.int32
        source = np.concatenate([np.full(k.sum(), s, kind) for s, k in enumerate(kept)])
        doc = np.concatenate([o[k] for o, k in zip(orders, kept, strict=True)])
        by_time = np.argsort(
            np.concatenate([t[k] for t, k in zip(times, kept, strict=True)]), kind="stable"
        )
        self._source, self._doc = source[by_time], doc[by_time]
        lengths = np.empty(len(self._doc), np.int64)
        for s, of_source in enumerate(self._source_lengths):
            mine = self._source == s
            lengths[mine] = of_source[self._doc[mine]]
        lengths.flags.writeable = False
        self._lengths = lengths

    def __getstate__(self) -> dict[str, Any]:
        return {
            "names": self._names,
            "sources": self._sources,
            "weights": self._weights,
            "skip": self._skip,
            "seed": self._seed,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._names, self._sources = state["names"], state["sources"]
        self._weights, self._skip, self._seed = state["weights"], state["skip"], state["seed"]
        self._source_lengths = [
            source_lengths(f"sources[{name!r}]", source)
            for name, source in zip(self._names, self._sources, strict=True)
        ]
        self._schedule()

    names = property(lambda self: tuple(self._names), doc="The sources' names, in order.")
    weights = property(
        lambda self: dict(zip(self._names, self._weights.tolist(), strict=True)),
        doc="Each source's weight, normalised to sum to 1.",
    )

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

    def documents_of(self, indices: Iterable[int] | np.ndarray) -> dict[str, np.ndarray]:
        """Which document of each source the mixture's documents `indices` are: a dict from
        every source's name to its document indices, sorted (what ``skip=`` takes).

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
