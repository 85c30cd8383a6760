"""Packed rows as a training recipe asks for them: bos and eos ids, truncated documents,
a limit on pieces a row, and the fields targets, loss_mask and source_ids."""

from __future__ import annotations

import os
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flax import nnx

from datarax.errors import PipelineStateError, SourceChangedError
from datarax.pipeline import Documents, Packed, Pipeline, write_documents

BOS, EOS = -2, -3  # no document token is negative: an added id is told apart by its value
ALL_FIELDS = ("tokens", "segment_ids", "positions", "targets", "loss_mask", "source_ids")


def _corpus(count: int, high: int, seed: int) -> list[np.ndarray]:
    """Document i holds 100_000 * i + 0, 1, ...: every token names its document and place.
    About one document in ten is empty."""
    lengths = np.random.default_rng(seed).integers(0, high, count)
    lengths[:: count // 10 or 1] = 0
    return [(100_000 * i + np.arange(n)).astype(np.int64) for i, n in enumerate(lengths)]


def _planned(document: np.ndarray, bos: int | None, eos: int | None) -> list[int]:
    """The document as packed: with its ids, where it has tokens."""
    if not len(document):
        return []
    return [
        *([bos] if bos is not None else []),
        *document.tolist(),
        *([eos] if eos is not None else []),
    ]


class ReadOnly:
    """Documents with ``read`` but no ``read_pieces``: Packed reads them whole."""

    def __init__(self, documents: list[np.ndarray]):
        self.documents = documents
        self.lengths = np.array([len(d) for d in documents], np.int64)

    def __len__(self) -> int:
        return len(self.documents)

    def __getitem__(self, index: int) -> np.ndarray:
        return self.documents[index]

    def read(self, indices: Sequence[int] | np.ndarray) -> list[np.ndarray]:
        return [self.documents[int(i)] for i in indices]


class Counting(ReadOnly):
    """Documents read by pieces, each piece asked for counted; a whole read refused."""

    def __init__(self, documents: list[np.ndarray]):
        super().__init__(documents)
        self.asked: list[tuple[int, int, int]] = []

    def read(self, indices: Sequence[int] | np.ndarray) -> list[np.ndarray]:
        raise AssertionError("a whole document was read")

    def read_pieces(
        self, indices: np.ndarray, starts: np.ndarray, sizes: np.ndarray
    ) -> list[np.ndarray]:
        self.asked += zip(indices.tolist(), starts.tolist(), sizes.tolist(), strict=True)
        return [self.documents[i][a : a + n] for i, a, n in self.asked[-len(indices) :]]


class TwoSources(ReadOnly):
    """A stand-in for a mixture: documents from sources ``names``, by `source_indices`."""

    names = ("web", "code", "books")

    def __init__(self, documents: list[np.ndarray], sources: np.ndarray):
        super().__init__(documents)
        self.sources = sources

    def source_indices(self, indices: np.ndarray) -> np.ndarray:
        return self.sources[np.asarray(indices)]


def _pieces_of_rows(packed: Packed) -> list[list[tuple[int, int, list[int]]]]:
    """Every row's pieces: (document, start, tokens), from its segment ids and plan."""
    rows = []
    for r in range(len(packed)):
        row, pieces = packed[r], packed.pieces(r)
        rows.append(
            [
                (doc, start, row["tokens"][row["segment_ids"] == k + 1].tolist())
                for k, (doc, start) in enumerate(
                    zip(pieces["document"].tolist(), pieces["start"].tolist(), strict=True)
                )
            ]
        )
    return rows


@pytest.mark.parametrize("method", ["best_fit", "concat"])
@pytest.mark.parametrize(("bos", "eos"), [(None, None), (BOS, None), (None, EOS), (BOS, EOS)])
def test_targets_and_loss_mask_are_the_next_token_of_the_same_piece(
    method: Any, bos: int | None, eos: int | None
) -> None:
    documents = _corpus(150, 100, seed=1)
    packed = Packed(
        Documents(documents), 48, method=method, bos_id=bos, eos_id=eos, fields=ALL_FIELDS[:5]
    )
    assert list(packed[0]) == list(ALL_FIELDS[:5])
    drawn = np.random.default_rng(2).choice(len(packed), 30, replace=False).tolist()
    padded = 0
    for r in [*drawn, len(packed) - 1]:  # the last row: concat's one row with padding
        row = packed[r]
        tokens, segments = row["tokens"].tolist(), row["segment_ids"].tolist()
        targets, mask = [], []
        for i in range(48):
            has = i + 1 < 48 and segments[i] != 0 and segments[i + 1] == segments[i]
            targets.append(tokens[i + 1] if has else 0)
            mask.append(int(has))
        assert row["targets"].tolist() == targets and row["loss_mask"].tolist() == mask
        assert all(row[k].dtype == np.int32 and row[k].shape == (48,) for k in row)
        padded += segments[-2:] == [0, 0]
    assert padded  # rows with padding were drawn: no target there either


@pytest.mark.parametrize("method", ["best_fit", "concat"])
@pytest.mark.parametrize("kind", [Documents, ReadOnly])
@pytest.mark.parametrize(("bos", "eos"), [(BOS, None), (None, EOS), (BOS, EOS)])
def test_every_token_with_its_added_ids_is_in_exactly_one_row(
    method: Any, kind: Any, bos: int | None, eos: int | None
) -> None:
    documents = _corpus(200, 70, seed=3)
    packed = Packed(kind(documents), 16, method=method, rngs=nnx.Rngs(1), bos_id=bos, eos_id=eos)
    found: dict[int, list[tuple[int, list[int]]]] = {}
    for pieces in _pieces_of_rows(packed):
        for doc, start, tokens in pieces:
            found.setdefault(doc, []).append((start, tokens))
    for doc, document in enumerate(documents):
        laid = [token for _, tokens in sorted(found.get(doc, [])) for token in tokens]
        assert laid == _planned(document, bos, eos), doc
    added = (bos is not None) + (eos is not None)
    expected = sum(len(d) + added for d in documents if len(d))
    assert packed.num_tokens == expected
    assert packed.fill == pytest.approx(expected / (len(packed) * 16))


@pytest.mark.parametrize("method", ["best_fit", "concat"])
@pytest.mark.parametrize(("bos", "eos"), [(None, None), (BOS, EOS), (None, EOS)])
def test_truncate_keeps_a_rows_worth_of_each_document_and_drops_the_rest(
    method: Any, bos: int | None, eos: int | None
) -> None:
    documents = _corpus(200, 50, seed=4)
    packed = Packed(
        Documents(documents),
        16,
        method=method,
        bos_id=bos,
        eos_id=eos,
        long_documents="truncate",
        rngs=nnx.Rngs(2),
    )
    found: dict[int, list[tuple[int, list[int]]]] = {}
    for pieces in _pieces_of_rows(packed):
        for doc, start, tokens in pieces:
            found.setdefault(doc, []).append((start, tokens))
    for doc, document in enumerate(documents):
        laid = [token for _, tokens in sorted(found.get(doc, [])) for token in tokens]
        assert laid == _planned(document, bos, eos)[:16], doc
    kept = sum(min(len(_planned(d, bos, eos)), 16) for d in documents)
    assert packed.num_tokens == kept < sum(len(_planned(d, bos, eos)) for d in documents)
    laid = sum(int((packed[r]["segment_ids"] > 0).sum()) for r in range(len(packed)))
    assert laid == kept and packed.fill == pytest.approx(kept / (len(packed) * 16))
    if method == "best_fit":  # a document is one piece, of one row
        assert all(len(pieces) == 1 for pieces in found.values())


@pytest.mark.parametrize("max_segments", [1, 2, 3, 4, 7])
def test_max_segments_is_never_exceeded_and_every_token_is_placed(max_segments: int) -> None:
    draws = np.random.default_rng(max_segments).lognormal(np.log(16), 0.9, 2_000)
    lengths = np.maximum(draws.astype(np.int64), 0)
    documents = [(100_000 * i + np.arange(n)).astype(np.int64) for i, n in enumerate(lengths)]
    packed = Packed(Documents(documents), 64, max_segments=max_segments, rngs=nnx.Rngs(0))
    seen = {doc: 0 for doc, n in enumerate(lengths.tolist()) if n}
    for r in range(len(packed)):
        segments = packed[r]["segment_ids"]
        assert 1 <= segments.max() <= max_segments
        for doc, size in zip(
            *(packed.pieces(r)[k].tolist() for k in ("document", "size")), strict=True
        ):
            seen[doc] += size
    assert seen == {doc: n for doc, n in enumerate(lengths.tolist()) if n}
    unlimited = Packed(Documents(documents), 64, rngs=nnx.Rngs(0))
    most = max(len(unlimited.pieces(r)["size"]) for r in range(len(unlimited)))
    assert most > max_segments  # the limit is what held the rows back
    assert len(packed) >= len(unlimited)


def test_four_pieces_a_row_still_fill_rows_of_documents_half_a_row_long() -> None:
    class Lengths(ReadOnly):
        def __init__(self, lengths: np.ndarray):
            self.lengths = lengths

        def __len__(self) -> int:
            return len(self.lengths)

    draws = np.random.default_rng(5).lognormal(np.log(1024), 0.6, 20_000)
    lengths = np.maximum(draws.astype(np.int64), 1)
    lengths = (lengths * (1024 / lengths.mean())).astype(np.int64) + 1  # mean half a row
    packed = Packed(Lengths(lengths), 2048, max_segments=4)
    assert packed.fill > 0.9
    counts = np.diff(np.asarray(packed.plan.row_starts))
    assert counts.max() == 4


def test_source_ids_name_each_tokens_source_and_minus_one_on_padding() -> None:
    documents = _corpus(120, 40, seed=6)
    sources = np.random.default_rng(7).integers(0, 3, len(documents))
    fields = ("source_ids", "tokens", "segment_ids")
    packed = Packed(TwoSources(documents, sources), 32, fields=fields, bos_id=BOS)
    assert packed.fields == fields and list(packed[0]) == list(fields)
    for r in range(len(packed)):
        row, pieces = packed[r], packed.pieces(r)
        expected = np.full(32, -1)
        for doc, offset, size in zip(
            *(pieces[k] for k in ("document", "offset", "size")), strict=True
        ):
            expected[offset : offset + size] = sources[doc]
        np.testing.assert_array_equal(row["source_ids"], expected)
        assert row["source_ids"].dtype == np.int32
        assert ((row["source_ids"] == -1) == (row["segment_ids"] == 0)).all()


def test_rows_read_only_the_tokens_they_hold() -> None:
    documents = _corpus(60, 90, seed=8)
    source = Counting(documents)
    packed = Packed(source, 32, bos_id=BOS, eos_id=EOS)
    rows = [packed[r] for r in range(len(packed))]
    read = sorted(source.asked)
    assert sum(size for _, _, size in read) == sum(len(d) for d in documents)
    assert all(size > 0 for _, _, size in read)  # a piece of ids alone reads nothing
    ids = sum(int(np.isin(row["tokens"], (BOS, EOS)).sum()) for row in rows)
    assert ids == 2 * sum(1 for d in documents if len(d))


@pytest.mark.parametrize("pieces", [True, False])
def test_a_document_changed_after_planning_is_caught_with_ids_added(pieces: bool) -> None:
    documents = [np.arange(5), np.arange(30)]
    source = Counting(documents) if pieces else ReadOnly(documents)
    packed = Packed(source, 8, bos_id=BOS, eos_id=EOS)
    source.documents[1] = np.arange(29)  # a token short: read whole, or its last piece
    with pytest.raises(SourceChangedError, match="Document 1 has shape"):
        [packed[r] for r in range(len(packed))]


def test_options_set_rows_apart_in_fingerprints_and_plans_but_fields_do_not(
    tmp_path: Path,
) -> None:
    documents = _corpus(100, 40, seed=9)
    store = write_documents(documents, tmp_path / "store")
    options: list[dict[str, Any]] = [
        {},
        {"bos_id": 1},
        {"bos_id": 2},
        {"eos_id": 1},
        {"bos_id": 1, "eos_id": 2},
        {"long_documents": "truncate"},
        {"max_segments": 3},
    ]
    packings = [Packed(store, 16, rngs=nnx.Rngs(0), **given) for given in options]
    assert len({packed.fingerprint for packed in packings}) == len(options)
    # A plan depends on how many ids are added, not which: one id (bos 1, bos 2 or eos 1)
    # plans as one, and two as another.
    plans = sorted(os.listdir(tmp_path / "store" / "plans"))
    assert len(plans) == len(options) - 2
    again = [Packed(store, 16, rngs=nnx.Rngs(0), **given) for given in options]
    assert sorted(os.listdir(tmp_path / "store" / "plans")) == plans  # found again
    for one, other in zip(packings, again, strict=True):
        assert one.fingerprint == other.fingerprint and len(one) == len(other)
        assert all(np.array_equal(one[0][k], other[0][k]) for k in one[0])
    fields = Packed(store, 16, rngs=nnx.Rngs(0), fields=ALL_FIELDS[:5])
    assert fields.fingerprint == packings[0].fingerprint

    def pipeline(packed: Packed) -> Pipeline:
        return Pipeline(source=packed, batch_size=2, shuffle=True, rngs=nnx.Rngs(1))

    saved = pipeline(packings[1])
    next(iter(saved))
    with pytest.raises(PipelineStateError, match="saved by a pipeline over another source"):
        pipeline(packings[2]).set_state(saved.get_state())


@pytest.mark.parametrize("in_files", [True, False])
def test_a_pickled_packed_carries_its_options(tmp_path: Path, in_files: bool) -> None:
    documents = _corpus(100, 40, seed=10)
    source = write_documents(documents, tmp_path / "store") if in_files else Documents(documents)
    packed = Packed(
        source,
        16,
        rngs=nnx.Rngs(3),
        bos_id=BOS,
        eos_id=EOS,
        long_documents="truncate",
        max_segments=2,
        fields=("tokens", "loss_mask", "targets"),
    )
    copy = pickle.loads(pickle.dumps(packed))
    said = ("bos_id", "eos_id", "long_documents", "max_segments", "fields", "fingerprint")
    assert [getattr(copy, k) for k in said] == [getattr(packed, k) for k in said]
    assert len(copy) == len(packed)
    for r in range(len(packed)):
        assert list(copy[r]) == ["tokens", "loss_mask", "targets"]
        assert all(np.array_equal(copy[r][k], packed[r][k]) for k in packed[r])


BAD: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"bos_id": True}, TypeError, r"bos_id must be an int in \[-2147483648, 2147483647\]"),
    ({"bos_id": 2**31}, ValueError, r"bos_id must be an int in .*, got 2147483648"),
    ({"eos_id": 1.0}, TypeError, "eos_id must be an int .* got float"),
    ({"eos_id": np.int64(-(2**40))}, ValueError, "eos_id must be an int"),
    ({"long_documents": "drop"}, ValueError, "long_documents must be 'cut' or 'truncate'"),
    ({"max_segments": 0}, ValueError, r"max_segments must be an int >= 1 \(pieces a row"),
    ({"max_segments": 2.0}, TypeError, "max_segments must be an int >= 1"),
    ({"max_segments": True}, TypeError, "max_segments must be an int >= 1"),
    (
        {"max_segments": 2, "method": "concat"},
        ValueError,
        "method='concat' lays documents back to back .* Use method='best_fit'",
    ),
    ({"fields": "tokens"}, TypeError, "fields must be a list or tuple of field names"),
    ({"fields": []}, ValueError, r"fields names no field: choose each at most once from"),
    ({"fields": ["tokens", "labels"]}, ValueError, r"fields names \['labels'\], not fields"),
    ({"fields": ["tokens", "targets", "tokens"]}, ValueError, r"\['tokens'\] more than once"),
    ({"fields": ["tokens", 3]}, TypeError, r"fields\[1\] must be a string"),
    ({"fields": ["source_ids"]}, ValueError, "documents \\(Documents\\) have no sources"),
]


@pytest.mark.parametrize(("given", "error", "message"), BAD, ids=[str(b[0]) for b in BAD])
def test_bad_options_are_named_and_change_nothing(
    given: dict[str, Any], error: type[Exception], message: str
) -> None:
    tokens = [np.arange(3), np.arange(5)]
    documents = Documents(tokens)
    before = {k: (list(v) if isinstance(v, list) else v) for k, v in given.items()}
    with pytest.raises(error, match=message):
        Packed(documents, 8, **given)
    assert given == before and documents.lengths.tolist() == [3, 5]
    assert [t.tolist() for t in tokens] == [[0, 1, 2], [0, 1, 2, 3, 4]]
