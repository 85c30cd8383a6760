"""Packed: rows planned from document lengths alone, every token in exactly one row."""

from __future__ import annotations

import hashlib
import os
import pickle

import numpy as np
import pytest
from flax import nnx

from datarax.pipeline import Documents, Packed, Pipeline, write_documents
from datarax.pipeline.documents._plan import make_plan


def _documents(lengths: np.ndarray) -> Documents:
    """Document i holds 100_000 * i + 0, 1, ...: every token names its document and place."""
    return Documents([100_000 * i + np.arange(n) for i, n in enumerate(lengths.tolist())])


def _lognormal(count: int, length: int, seed: int = 0) -> np.ndarray:
    """Lengths drawn log-normally around half a row, at least 1."""
    draws = np.random.default_rng(seed).lognormal(np.log(length / 2), 0.6, count)
    return np.maximum(draws.astype(np.int64), 1)


class NoReading:
    """Documents whose lengths are known but which must not be read."""

    def __init__(self, lengths: np.ndarray):
        self.lengths = lengths

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, index: int) -> np.ndarray:
        raise AssertionError("the plan read a document")

    def read(self, indices: np.ndarray) -> list[np.ndarray]:
        raise AssertionError("the plan read documents")


def _check_rows(packed: Packed, lengths: np.ndarray) -> list[dict[str, np.ndarray]]:
    """Every token of every document in exactly one row, with segment ids and positions
    as promised; returns the rows."""
    rows = [packed[r] for r in range(len(packed))]
    seen = {i: np.zeros(n, int) for i, n in enumerate(lengths.tolist())}
    for row in rows:
        assert {k: (v.dtype, v.shape) for k, v in row.items()} == {
            k: (np.dtype(np.int32), (packed.length,))
            for k in ("tokens", "segment_ids", "positions")
        }
        segments, positions, tokens = row["segment_ids"], row["positions"], row["tokens"]
        used = segments > 0
        assert not np.any(np.diff(used.astype(int)) > 0), "padding only at the end"
        pieces = segments[used]
        assert pieces.tolist() == sorted(pieces.tolist())
        assert set(pieces.tolist()) == set(range(1, int(pieces.max(initial=0)) + 1))
        for piece in range(1, int(pieces.max(initial=0)) + 1):
            where = segments == piece
            assert positions[where].tolist() == list(range(int(where.sum())))
            doc, offsets = np.divmod(tokens[where], 100_000)
            assert len(set(doc.tolist())) == 1 and np.all(np.diff(offsets) == 1)
            seen[int(doc[0])][offsets] += 1
        assert not tokens[~used].any() and not positions[~used].any()
    assert all((counts == 1).all() for counts in seen.values())
    return rows


@pytest.mark.parametrize("method", ["best_fit", "concat"])
@pytest.mark.parametrize("rngs", [None, 7])
def test_every_token_is_in_exactly_one_row(method: str, rngs: int | None) -> None:
    lengths = np.random.default_rng(1).integers(0, 70, 300)
    lengths[::11] = 0
    packed = Packed(
        _documents(lengths), 32, method=method, rngs=None if rngs is None else nnx.Rngs(rngs)
    )
    rows = _check_rows(packed, lengths)
    assert packed.num_tokens == lengths.sum() and packed.empty_documents == (lengths == 0).sum()
    assert packed.fill == pytest.approx(lengths.sum() / (len(rows) * 32))
    if method == "concat":  # every row full but the last
        assert all((row["segment_ids"] > 0).all() for row in rows[:-1])


def test_best_fit_keeps_a_document_that_fits_whole_in_one_row() -> None:
    lengths = np.random.default_rng(2).integers(1, 80, 200)
    packed = Packed(_documents(lengths), 32, rngs=nnx.Rngs(0))
    rows_of = {}
    for r in range(len(packed)):
        for doc in packed.pieces(r)["document"].tolist():
            rows_of.setdefault(doc, []).append(r)
    for doc, rows in rows_of.items():
        assert len(rows) == -(-lengths[doc] // 32), (doc, lengths[doc], rows)
    full_rows = [packed.pieces(r) for r in range(len(packed)) if len(packed.pieces(r)["size"]) == 1]
    assert any(int(p["size"][0]) == 32 for p in full_rows)  # documents longer than a row


def test_best_fit_fills_its_rows_and_plans_a_million_documents_small() -> None:
    lengths = _lognormal(20_000, 2048)
    assert Packed(NoReading(lengths), 2048).fill >= 0.95
    many = _lognormal(1_000_000, 2048, seed=1)
    plan = make_plan(many, 2048, "best_fit", None)
    assert plan.nbytes / len(many) <= 16
    assert Packed(NoReading(many), 2048, method="concat").plan.nbytes / len(many) <= 16


def test_the_plan_reads_no_document_and_is_the_same_wherever_made() -> None:
    lengths = _lognormal(5_000, 128)
    one = Packed(NoReading(lengths), 128, rngs=nnx.Rngs(3))
    again = Packed(NoReading(lengths.copy()), 128, rngs=nnx.Rngs(3))
    other = Packed(NoReading(lengths), 128, rngs=nnx.Rngs(4))
    pieces = [one.pieces(r)["document"].tolist() for r in range(50)]
    assert pieces == [again.pieces(r)["document"].tolist() for r in range(50)]
    assert pieces != [other.pieces(r)["document"].tolist() for r in range(50)]


def test_a_pickled_packed_carries_its_plan_and_plans_nothing_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker receives the plan of documents in memory: planning runs once per process
    tree, not once a worker."""
    from datarax.pipeline.documents import _packed

    lengths = np.random.default_rng(5).integers(1, 50, 400)
    documents = Documents([np.arange(n) for n in lengths], lengths=lengths)
    packed = Packed(documents, 64, rngs=nnx.Rngs(1))
    data = pickle.dumps(packed)
    plans: list[int] = []
    monkeypatch.setattr(_packed, "make_plan", lambda *args: plans.append(1))
    copy = pickle.loads(data)
    assert plans == []
    for r in (0, 5, len(packed) - 1):
        assert all((copy[r][k] == packed[r][k]).all() for k in packed[r])


def test_a_pipeline_over_packed_rows_is_any_random_access_source() -> None:
    lengths = np.random.default_rng(6).integers(1, 40, 200)
    packed = Packed(_documents(lengths), 16, rngs=nnx.Rngs(0))
    pipeline = Pipeline(source=packed, batch_size=8, shuffle=True, rngs=nnx.Rngs(2))
    order = pipeline.epoch_order(0)
    for k, batch in enumerate(pipeline):
        for key in ("tokens", "segment_ids", "positions"):
            expected = np.stack([packed[int(r)][key] for r in order[8 * k : 8 * (k + 1)]])
            np.testing.assert_array_equal(batch[key], expected)
    assert k == len(packed) // 8 - 1


def test_a_document_changed_after_planning_is_named() -> None:
    class Grown(NoReading):  # document 1 has grown by a token since its length was read
        def __getitem__(self, index: int) -> np.ndarray:
            return np.arange([5, 4][index])

        def read(self, indices: np.ndarray) -> list[np.ndarray]:
            return [self[int(i)] for i in indices]

    packed = Packed(Grown(np.array([5, 3])), 8)
    with pytest.raises(ValueError, match="Document 1 has shape"):
        packed[0]


def test_bad_arguments_are_named() -> None:
    docs = _documents(np.array([3, 4]))
    with pytest.raises(ValueError, match=r"length must be an int in \[1, 16777216\]"):
        Packed(docs, 0)
    with pytest.raises(TypeError, match="length must be an int"):
        Packed(docs, 8.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="method must be 'best_fit', 'first_fit' or 'concat'"):
        Packed(docs, 8, method="first-fit")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"wrap a list of token arrays as Documents\(the_list\)"):
        Packed([np.arange(3)], 8)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"rngs must be an nnx\.Rngs"):
        Packed(docs, 8, rngs=0)  # type: ignore[arg-type]
    with pytest.raises(IndexError, match="Index 9 is out of range for 1 packed rows"):
        Packed(docs, 8)[9]


def test_workers_make_the_rows_that_this_process_makes() -> None:
    lengths = np.random.default_rng(8).integers(1, 40, 300)
    packed = Packed(_documents(lengths), 16, method="concat", rngs=nnx.Rngs(0))

    def batches(workers: int) -> list[list[int]]:
        pipeline = Pipeline(
            source=packed, batch_size=8, shuffle=True, rngs=nnx.Rngs(2), workers=workers
        )
        return [batch["tokens"].tolist() for batch in pipeline]

    assert batches(2) == batches(0)


def test_workers_open_parquet_files_by_path_and_make_the_same_rows(tmp_path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    lengths = np.random.default_rng(9).integers(1, 60, 240)
    for part in range(2):
        tokens = [
            (1000 * i + np.arange(n)).astype(np.int32)
            for i, n in enumerate(lengths[part * 120 : (part + 1) * 120].tolist(), part * 120)
        ]
        table = pa.table({"tokens": pa.array(tokens, pa.list_(pa.int32()))})
        pq.write_table(table, tmp_path / f"part-{part}.parquet", row_group_size=32)
    documents = Documents(str(tmp_path / "*.parquet"), cache_dir=tmp_path / "cache")
    packed = Packed(documents, 32, rngs=nnx.Rngs(1))
    assert len(pickle.dumps(packed)) < 2_000  # paths, stamps and arguments

    def batches(workers: int) -> list[list[int]]:
        pipeline = Pipeline(
            source=packed, batch_size=4, shuffle=True, rngs=nnx.Rngs(2), workers=workers
        )
        return [batch["tokens"].tolist() for batch in pipeline]

    assert batches(2) == batches(0)


@pytest.mark.parametrize("method", ["best_fit", "concat"])
@pytest.mark.parametrize(
    ("lengths", "length", "rows"),
    [([4, 4, 4], 4, 3), ([8, 12], 4, 5), ([3], 1, 3), ([0, 0], 4, 0), ([], 4, 0)],
    ids=["cut to the row", "multiples of the row", "rows of 1", "only empty", "none"],
)
def test_documents_that_leave_no_shorter_piece_give_one_row_a_piece(
    method: str, lengths: list[int], length: int, rows: int
) -> None:
    packed = Packed(_documents(np.array(lengths, np.int64)), length, method=method)
    assert len(packed) == rows and packed.fill == (1.0 if rows else 0.0)
    _check_rows(packed, np.array(lengths, np.int64))


def test_token_ids_int32_does_not_hold_are_refused_whatever_their_dtype() -> None:
    for dtype in (np.uint32, np.int64, np.uint64):
        packed = Packed(Documents([np.array([1, 4_000_000_000], dtype)]), 4)
        with pytest.raises(ValueError, match="Document 0 holds token 4000000000, which int32"):
            packed[0]
    assert Packed(Documents([np.array([1, 2**31 - 1], np.uint32)]), 4)[0]["tokens"][1] == 2**31 - 1


def test_best_fit_puts_a_piece_in_the_fullest_row_with_room_not_the_first() -> None:
    # Rows of 9, pieces longest first: 7 opens row A (2 free); 6 and 6 fit no row, so each
    # opens one, B and C (3 free each); 4 and 4 fit none of them and open D together (1
    # free). Last, 1: first fit would take the first row with room, A (7 + 1); best fit
    # takes the fullest row with room, D (4 + 4 + 1, no token free).
    lengths = np.array([7, 6, 6, 4, 4, 1])
    best = Packed(_documents(lengths), 9)
    rows = {frozenset(best.pieces(r)["document"].tolist()) for r in range(len(best))}
    assert rows == {frozenset({0}), frozenset({1}), frozenset({2}), frozenset({3, 4, 5})}
    assert rows != {frozenset({0, 5}), frozenset({1}), frozenset({2}), frozenset({3, 4})}
    _check_rows(best, lengths)


def test_first_fit_is_best_fit_under_its_earlier_name() -> None:
    lengths = np.random.default_rng(10).integers(0, 50, 200)
    best = Packed(_documents(lengths), 32, method="best_fit", rngs=nnx.Rngs(4))
    earlier = Packed(_documents(lengths), 32, method="first_fit", rngs=nnx.Rngs(4))
    assert best.method == earlier.method == "best_fit"
    assert best.fingerprint == earlier.fingerprint
    assert len(best) == len(earlier)
    for r in range(len(best)):
        assert all(np.array_equal(best[r][k], earlier[r][k]) for k in best[r])


def test_states_and_plans_saved_before_best_fit_was_so_named_still_match(tmp_path) -> None:
    """The fingerprints below were made by the earlier Packed, whose method was named
    "first_fit": a pipeline's state saved then names them."""
    lengths = np.array([5, 0, 9, 3, 12, 7])
    docs = Documents([np.arange(n) for n in lengths.tolist()])
    assert Packed(docs, 8).fingerprint == "packed-76c397b5c79c8991"
    assert Packed(docs, 8, rngs=nnx.Rngs(3)).fingerprint == "packed-a15d357c8522dcdd"
    assert Packed(docs, 8, method="concat").fingerprint == "packed-83dd63e4e5a25cca"
    saved = Pipeline(source=Packed(docs, 8, method="first_fit"), batch_size=1)
    next(iter(saved))
    state = saved.get_state()
    assert state["fingerprint"] == "packed-76c397b5c79c8991"
    resumed = Pipeline(source=Packed(docs, 8, method="best_fit"), batch_size=1)
    resumed.set_state(state)  # refused were the fingerprints to differ
    # A plan saved beside a store is found by its folder's name and key, made as before.
    store = write_documents([np.arange(n) for n in lengths.tolist()], tmp_path / "store")
    packed = Packed(store, 8, rngs=nnx.Rngs(3))
    identity = store._plan_home()[0]
    named = ["first_fit", "8", str(packed._seed), "1048576"]
    key = "\0".join(["v1", *named, identity])
    name = hashlib.sha256("\0".join(["plan", identity, *named]).encode()).hexdigest()[:32]
    folder = f"{name}.{hashlib.sha256(key.encode()).hexdigest()[:16]}"
    assert os.listdir(tmp_path / "store" / "plans") == [folder]
    assert (tmp_path / "store" / "plans" / folder / "key").read_text() == key
