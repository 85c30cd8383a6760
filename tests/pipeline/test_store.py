"""The token store and the other indexed files: `write_documents` writes Megatron pairs
that a reader written from the format alone reads back, `Documents` reads stores,
Megatron prefixes and flat token files by memory map, packing plans of indexed documents
are kept in files, and bad input is refused by name with nothing written or changed."""

from __future__ import annotations

import concurrent.futures
import json
import mmap
import os
import pickle
import struct
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _support.megatron_format import read_pair, write_pair
from flax import nnx

from datarax.errors import (
    DocumentError,
    DocumentFileNotFoundError,
    DocumentFormatError,
    SourceFileChangedError,
)
from datarax.pipeline import Documents, Mixture, Packed, Pipeline, write_documents
from datarax.pipeline.documents import _plan


def _corpus(count: int = 300, seed: int = 0, high: int = 50_000) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    documents = [rng.integers(0, high, rng.integers(0, 60)) for _ in range(count)]
    documents[7] = np.zeros(0, np.int64)
    return documents


DOCS = _corpus()


def _same(read: list[np.ndarray], expected: list[np.ndarray]) -> bool:
    return len(read) == len(expected) and all(
        np.array_equal(a, b) for a, b in zip(read, expected, strict=True)
    )


def _mapped(array: np.ndarray) -> bool:
    """Whether `array` is a view of a file mapped into memory."""
    while array is not None:
        if isinstance(array, (np.memmap, mmap.mmap)):
            return True
        base = getattr(array, "base", None)
        array = base if base is not None else getattr(array, "obj", None)
    return False


def _files(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` and its bytes (what 'nothing changed' compares)."""
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def test_a_store_reads_back_equal_through_documents_and_the_formats_own_reader(
    tmp_path: Path,
) -> None:
    store = write_documents(DOCS, tmp_path / "store", documents_per_shard=128)
    assert len(store) == len(DOCS) and _same(store.read(np.arange(len(DOCS))), DOCS)
    assert store.lengths.dtype == np.int32 and not store.lengths.flags.writeable
    manifest = json.loads((tmp_path / "store" / "manifest.json").read_text())
    assert manifest["dtype"] == "uint16" and manifest["documents"] == len(DOCS)
    assert manifest["tokens"] == sum(map(len, DOCS))
    assert [s["name"] for s in manifest["shards"]] == ["shard-00000", "shard-00001", "shard-00002"]
    assert [s["documents"] for s in manifest["shards"]] == [128, 128, 44]
    for k, shard in enumerate(manifest["shards"]):
        pair = read_pair(tmp_path / "store" / shard["name"])
        assert pair.dtype == np.uint16 and pair.document_indices.tolist() == list(
            range(len(pair.lengths) + 1)
        )
        assert _same(pair.sequences, DOCS[128 * k : 128 * (k + 1)])
    assert os.listdir(tmp_path) == ["store"]  # no .writing left


@pytest.mark.parametrize(
    ("changed", "dtype", "stored"),
    [
        ({}, None, "uint16"),
        ({250: [65_536]}, None, "int32"),  # in the last shard: the first two are widened
        ({3: [-1, 5]}, None, "int32"),
        ({}, np.int64, "int64"),
        ({}, np.uint8, None),  # tokens up to 50,000 do not fit: refused, nothing written
        ({9: [2**31]}, None, None),  # beyond int32 with no dtype given: refused too
    ],
)
def test_the_dtype_is_the_narrowest_that_holds_every_token_or_the_one_given(
    changed: dict[int, list[int]], dtype: Any, stored: str | None, tmp_path: Path
) -> None:
    documents = [np.array(changed.get(k, d)) for k, d in enumerate(DOCS)]
    target = tmp_path / "store"
    if stored is None:
        with pytest.raises(ValueError, match=r"Document \d+ holds token .* does not hold"):
            write_documents(documents, target, dtype=dtype, documents_per_shard=100)
        assert os.listdir(tmp_path) == []
        return
    store = write_documents(documents, target, dtype=dtype, documents_per_shard=100)
    assert {store[k].dtype.name for k in (0, 150, 299)} == {stored}
    assert _same(store.read(np.arange(len(documents))), documents)


def _write_parquet(path: Path, documents: list[np.ndarray], group: int) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    column = pa.array([d.tolist() for d in documents], pa.list_(pa.int32()))
    pq.write_table(pa.table({"tokens": column}), path, row_group_size=group)
    return path


@pytest.mark.parametrize("workers", [0, 2])
def test_documents_in_files_and_mixtures_are_written_on_workers_or_here(
    workers: int, tmp_path: Path
) -> None:
    parquet = _write_parquet(tmp_path / "d.parquet", DOCS, group=37)
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text("".join(json.dumps({"tokens": d.tolist()}) + "\n" for d in DOCS[:50]))
    files = Documents([parquet, jsonl], cache_dir=tmp_path / "cache")
    store = write_documents(files, tmp_path / "files", documents_per_shard=64, workers=workers)
    assert _same(store.read(np.arange(len(files))), [*DOCS, *DOCS[:50]])
    mixture = Mixture({"a": files, "b": Documents(DOCS[:40])}, [3, 1], rngs=nnx.Rngs(0))
    mixed = write_documents(mixture, tmp_path / "mixture", documents_per_shard=64, workers=workers)
    assert _same(mixed.read(np.arange(len(mixture))), mixture.read(np.arange(len(mixture))))


def test_a_store_is_written_again_from_a_store_and_a_megatron_prefix(tmp_path: Path) -> None:
    first = write_documents(DOCS, tmp_path / "first", documents_per_shard=50)
    again = write_documents(first, tmp_path / "again", documents_per_shard=50)
    assert _files(tmp_path / "first") == _files(tmp_path / "again")
    write_pair(tmp_path / "elsewhere", DOCS, np.int32)
    converted = write_documents(Documents(tmp_path / "elsewhere"), tmp_path / "converted")
    assert _same(converted.read(np.arange(len(DOCS))), DOCS) and converted[0].dtype == np.uint16
    assert again.lengths.tolist() == converted.lengths.tolist()


def test_megatron_pairs_written_elsewhere_read_by_prefix_idx_list_and_glob(
    tmp_path: Path,
) -> None:
    write_pair(tmp_path / "part_a_text_document", DOCS[:100], np.uint16)
    write_pair(tmp_path / "part_b_text_document", DOCS[100:], np.int32)
    prefixes = [tmp_path / "part_a_text_document", tmp_path / "part_b_text_document"]
    for data in (
        prefixes,
        [str(prefixes[0]) + ".idx", str(prefixes[1]) + ".idx"],
        str(tmp_path / "part_*_text_document"),  # a glob of prefixes
        str(tmp_path / "part_*"),  # a glob of both files: each pair once
    ):
        documents = Documents(data, cache_dir=tmp_path / "cache")
        assert _same(documents.read(np.arange(len(DOCS))), DOCS), data
    assert _mapped(documents.lengths)  # two pairs' lengths, mapped from the cache
    one = Documents(prefixes[0])
    assert _same([one[k] for k in range(100)], DOCS[:100])


@pytest.mark.parametrize(
    ("tokens", "eos", "expected"),
    [
        ([5, 6, 0, 7, 0, 0, 8, 9], 0, [[5, 6, 0], [7, 0], [0], [8, 9]]),  # tail: a document
        ([5, 0], 0, [[5, 0]]),
        ([], 0, []),
        ([3, 3, 3], 3, [[3], [3], [3]]),
    ],
)
@pytest.mark.parametrize("kind", ["npy", "raw"])
def test_flat_token_files_hold_documents_ending_with_the_end_of_text_id(
    tokens: list[int], eos: int, expected: list[list[int]], kind: str, tmp_path: Path
) -> None:
    array = np.array(tokens, np.uint16)
    if kind == "npy":
        np.save(tmp_path / "tokens.npy", array)
        documents = Documents(tmp_path / "tokens.npy", eos_id=eos, cache_dir=tmp_path / "c")
    else:
        array.tofile(tmp_path / "tokens.bin")
        documents = Documents(
            tmp_path / "tokens.bin", eos_id=eos, dtype=np.uint16, cache_dir=tmp_path / "c"
        )
    assert [d.tolist() for d in documents.read(np.arange(len(documents)))] == expected
    assert documents.lengths.tolist() == [len(d) for d in expected]
    assert os.listdir(tmp_path / "c")  # the index was kept for the next Documents


def test_a_flat_files_index_is_found_once_and_made_again_when_the_file_changes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tokens.npy"
    np.save(path, np.array([1, 2, 0, 3, 0], np.int32))
    documents = Documents(path, eos_id=0, cache_dir=tmp_path / "c")
    kept = _files(tmp_path / "c")
    assert Documents(path, eos_id=0, cache_dir=tmp_path / "c").lengths.tolist() == [3, 2]
    assert _files(tmp_path / "c") == kept
    np.save(path, np.array([1, 0, 2, 3, 4, 0], np.int32))
    os.utime(path, ns=(1, 1))  # a new stamp, whatever the clock's resolution
    with pytest.raises(SourceFileChangedError, match=str(path)):
        documents[0]
    assert Documents(path, eos_id=0, cache_dir=tmp_path / "c").lengths.tolist() == [2, 4]


def test_packed_rows_over_a_store_are_the_rows_over_the_same_documents_in_memory(
    tmp_path: Path,
) -> None:
    store = write_documents(DOCS, tmp_path / "store", documents_per_shard=100)
    for method in ("first_fit", "concat"):
        for rngs in (None, 3):
            seed = None if rngs is None else nnx.Rngs(rngs)
            mapped = Packed(store, 32, method=method, rngs=seed)
            in_memory = Packed(
                Documents(DOCS), 32, method=method, rngs=None if rngs is None else nnx.Rngs(rngs)
            )
            assert _mapped(mapped.plan.ends if method == "concat" else mapped.plan.doc)
            assert len(mapped) == len(in_memory) > 0
            for row in range(len(mapped)):
                assert all(np.array_equal(mapped[row][k], in_memory[row][k]) for k in mapped[row])
    plans = sorted(os.listdir(tmp_path / "store" / "plans"))
    assert len(plans) == 4  # one folder a way of packing, beside the store
    again = Packed(store, 32, method="concat")
    assert sorted(os.listdir(tmp_path / "store" / "plans")) == plans and len(again)


def test_blocks_plan_on_this_hosts_cores_as_they_plan_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first-fit plan of several blocks is computed on worker processes (they read the
    lengths by memory map) and equals the one computed block by block here."""
    monkeypatch.setattr(_plan, "BLOCK", 64)
    documents = _corpus(1000, seed=2)
    store = write_documents(documents, tmp_path / "store", documents_per_shard=300)
    mapped = Packed(store, 48, rngs=nnx.Rngs(5))
    here = Packed(Documents(documents), 48, rngs=nnx.Rngs(5))
    assert len(mapped) == len(here)
    assert all(
        np.array_equal(mapped.pieces(r)["document"], here.pieces(r)["document"])
        for r in range(len(here))
    )
    assert here.fill > 0.9


def test_a_pipeline_over_a_store_reads_the_same_batches_on_workers(tmp_path: Path) -> None:
    store = write_documents(DOCS, tmp_path / "store", documents_per_shard=100)
    packed = Packed(store, 32, rngs=nnx.Rngs(1))
    assert len(pickle.dumps(packed)) < 3_000  # paths, stamps and arguments: no plan, no tokens

    def batches(workers: int) -> list[list[int]]:
        pipeline = Pipeline(
            source=packed, batch_size=4, shuffle=True, rngs=nnx.Rngs(2), workers=workers
        )
        return [batch["tokens"].tolist() for batch in pipeline]

    assert batches(2) == batches(0)


def test_replace_writes_over_a_store_and_nothing_else(tmp_path: Path) -> None:
    target = tmp_path / "store"
    write_documents(DOCS[:10], target)
    before = _files(target)
    with pytest.raises(FileExistsError, match="holds a token store; pass replace=True"):
        write_documents(DOCS, target)
    assert _files(target) == before
    old = Documents(target)
    replaced = write_documents(DOCS, target, replace=True)
    assert len(replaced) == len(DOCS) and _same(replaced.read(np.arange(10)), DOCS[:10])
    with pytest.raises(SourceFileChangedError, match=r"shard-00000\.idx"):
        old[0]  # built over the store replaced
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    for replace in (False, True):
        with pytest.raises(
            FileExistsError, match=r"holds files that are not a token store \(notes"
        ):
            write_documents(DOCS, tmp_path / "mine", replace=replace)
    assert os.listdir(tmp_path / "mine") == ["notes.txt"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError, match="is a file"):
        write_documents(DOCS, tmp_path / "file")


class _Failing:
    """Documents in memory that fail once `limit` of them are read: an interruption."""

    def __init__(self, limit: int, error: type[BaseException]):
        self.limit, self.error, self.read_so_far = limit, error, 0

    def __len__(self) -> int:
        return len(DOCS)

    def __getitem__(self, index: int) -> np.ndarray:
        self.read_so_far += 1
        if self.read_so_far > self.limit:
            raise self.error("interrupted")
        return DOCS[index]


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_an_interrupted_write_leaves_the_folder_as_it_was(
    error: type[BaseException], tmp_path: Path
) -> None:
    target = tmp_path / "store"
    write_documents(DOCS[:20], target)
    before = _files(target)
    documents = Documents(_Failing(len(DOCS) + 150, error))  # its lengths read, then 150 docs
    with pytest.raises(error, match="interrupted"):
        write_documents(documents, target, replace=True, documents_per_shard=64)
    assert _files(target) == before and sorted(os.listdir(tmp_path)) == ["store"]
    (tmp_path / "store.writing").mkdir()  # as a process killed while writing leaves it
    (tmp_path / "store.writing" / "shard-00000.bin").write_bytes(b"partial")
    store = write_documents(DOCS, target, replace=True)  # starts over
    assert _same(store.read(np.arange(len(DOCS))), DOCS) and os.listdir(tmp_path) == ["store"]


def _idx(prefix: Path) -> bytearray:
    return bytearray((prefix.parent / (prefix.name + ".idx")).read_bytes())


@pytest.mark.parametrize(
    ("damage", "match"),
    [
        (lambda idx, _: idx.__setitem__(slice(0, 9), b"NOTMEGAT\x00"), "does not start with"),
        (lambda idx, _: idx.__setitem__(slice(9, 17), struct.pack("<Q", 2)), "version is 2"),
        (lambda idx, _: idx.__setitem__(17, 6), r"dtype code is 6 \(dtype float64"),
        (lambda idx, _: idx.__setitem__(17, 9), r"dtype code is 9 \(unknown"),
        (lambda idx, _: idx.__delitem__(slice(-8, None)), "cut short or damaged"),
        (lambda _, bin_: bin_.__delitem__(slice(-2, None)), "not inside the"),
        (
            lambda idx, _: idx.__setitem__(
                slice(34 + 4 * 3 + 8 * 2, 34 + 4 * 3 + 8 * 3), struct.pack("<q", 10**9)
            ),
            r"sequence 2 has length .* at byte 1000000000",
        ),
        (
            lambda idx, _: idx.__setitem__(slice(34, 38), struct.pack("<i", -4)),
            "sequence 0 has length -4",
        ),
    ],
)
def test_a_damaged_pair_is_refused_naming_the_file(damage: Any, match: str, tmp_path: Path) -> None:
    prefix = tmp_path / "pair"
    write_pair(prefix, [np.arange(5), np.arange(3), np.arange(4)], np.uint16)
    idx, bin_ = _idx(prefix), bytearray((tmp_path / "pair.bin").read_bytes())
    damage(idx, bin_)
    (tmp_path / "pair.idx").write_bytes(bytes(idx))
    (tmp_path / "pair.bin").write_bytes(bytes(bin_))
    with pytest.raises(DocumentFormatError, match=match) as raised:
        Documents(prefix)
    assert raised.value.path == str(tmp_path / "pair.idx")


def test_missing_files_and_stores_not_written_in_full_are_named(tmp_path: Path) -> None:
    write_pair(tmp_path / "pair", DOCS[:5], np.uint16)
    (tmp_path / "pair.bin").unlink()
    with pytest.raises(DocumentFileNotFoundError, match=r"pair\.bin is missing"):
        Documents(tmp_path / "pair")
    store = tmp_path / "store"
    write_documents(DOCS, store, documents_per_shard=100)
    manifest = json.loads((store / "manifest.json").read_text())
    manifest["shards"][1]["documents"] = 99
    (store / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DocumentFormatError, match=r"shard-00001 holds 100 documents .* says 99"):
        Documents(store)
    (store / "manifest.json").write_text("{not json")
    with pytest.raises(DocumentFormatError, match="not the manifest of a token store"):
        Documents(store)
    (store / "manifest.json").unlink()
    with pytest.raises(DocumentFileNotFoundError, match=r"holds shards but no manifest\.json"):
        Documents(store)


def test_bad_arguments_and_documents_are_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    target = tmp_path / "store"
    with pytest.raises(DocumentError, match="document 4 is an array of dtype float64"):
        write_documents([*DOCS[:4], np.ones(3)], target)
    with pytest.raises(ValueError, match="dtype must be one of uint8"):
        write_documents(DOCS, target, dtype=np.float32)
    with pytest.raises(ValueError, match="dtype must be one of uint8"):
        write_documents(DOCS, target, dtype=np.uint32)
    with pytest.raises(ValueError, match="dtype must be one of uint8"):
        write_documents(DOCS, target, dtype={-1: [None]})  # np.dtype raises KeyError
    with pytest.raises(ValueError, match="documents_per_shard must be an int >= 1"):
        write_documents(DOCS, target, documents_per_shard=0)
    with pytest.raises(TypeError, match="path must be a folder's path"):
        write_documents(DOCS, 3)  # type: ignore[arg-type]
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    ("data", "options", "error", "match"),
    [
        ("tokens.npy", {}, ValueError, "flat token file: pass eos_id="),
        (
            "tokens.npy",
            {"eos_id": 70_000},
            ValueError,
            r"eos_id 70000 is outside .*\(uint16: 0\.\.65535\)",
        ),
        ("tokens.npy", {"eos_id": 1.5}, TypeError, "eos_id must be an int"),
        (
            "tokens.npy",
            {"eos_id": 0, "dtype": np.int32},
            ValueError,
            "dtype= is for raw .bin token files",
        ),
        ("floats.npy", {"eos_id": 0}, DocumentFormatError, "holds float32, not token ids"),
        (
            "grid.npy",
            {"eos_id": 0},
            DocumentFormatError,
            r"shape \(2, 2\); a flat token file is 1-D",
        ),
        ("tokens.bin", {"eos_id": 0}, DocumentFormatError, "raw tokens: pass dtype="),
        (
            "odd.bin",
            {"eos_id": 0, "dtype": np.uint16},
            DocumentFormatError,
            "not a whole number of uint16",
        ),
        ("d.jsonl", {"eos_id": 0}, ValueError, "eos_id= is for flat token files"),
        ("d.jsonl", {"dtype": np.uint16}, ValueError, "dtype= is for raw .bin token files"),
    ],
)
def test_flat_files_with_wrong_options_are_refused_naming_what_to_change(
    data: str, options: dict[str, Any], error: type[Exception], match: str, tmp_path: Path
) -> None:
    np.save(tmp_path / "tokens.npy", np.array([1, 0, 2], np.uint16))
    np.save(tmp_path / "floats.npy", np.ones(3, np.float32))
    np.save(tmp_path / "grid.npy", np.zeros((2, 2), np.int32))
    np.array([1, 0], np.uint16).tofile(tmp_path / "tokens.bin")
    (tmp_path / "odd.bin").write_bytes(b"\x01\x00\x02")
    (tmp_path / "d.jsonl").write_text('{"tokens": [1]}\n')
    before = _files(tmp_path)
    with pytest.raises(error, match=match):
        Documents(tmp_path / data, cache_dir=tmp_path / "cache", **options)
    assert _files(tmp_path) == before


def test_processes_making_one_cache_entry_at_once_all_read_it(tmp_path: Path) -> None:
    """Many makers of the same entry at once (processes sharing a cache, here threads):
    each gets a folder that holds the entry, and none removes what another reads."""
    from datarax.pipeline.documents._index import cached_folder

    def make(folder: str) -> None:
        time.sleep(0.002)
        Path(folder, "data").write_text("made")

    def use(round_: int) -> str:
        folder = cached_folder(str(tmp_path), "entry", f"key {round_}", make)
        time.sleep(0.001)
        return Path(folder, "data").read_text()

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for round_ in range(30):
            assert list(pool.map(use, [round_] * 8)) == ["made"] * 8
    assert len([p for p in tmp_path.iterdir() if p.name.startswith("entry.")]) == 1
