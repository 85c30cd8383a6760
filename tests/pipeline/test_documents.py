"""`Documents`: every kind of data gives the same documents and lengths, files are
indexed once (cached, checked against the file) and read by row group or line, a
pickled copy is small, and bad input is refused by name."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import datarax
from datarax.errors import (
    DocumentError,
    DocumentFieldError,
    DocumentFileNotFoundError,
    DocumentFormatError,
    SourceFileChangedError,
)
from datarax.pipeline import Documents
from datarax.pipeline.documents import _jsonl as _jsonl_documents
from datarax.pipeline.documents import _parquet as _parquet_documents

ROW_GROUP = 16
Refused = TypeVar("Refused", bound=Exception)


def _corpus(count: int = 100, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    documents = [rng.integers(0, 50_000, rng.integers(0, 40)) for _ in range(count)]
    documents[3] = np.zeros(0, np.int64)  # empty documents are documents too
    return documents


DOCS = _corpus()


def write_parquet(
    path: Path,
    documents: list[np.ndarray],
    value_type: pa.DataType | None = None,
    row_group_size: int = ROW_GROUP,
) -> Path:
    column = pa.array([d.tolist() for d in documents], pa.list_(value_type or pa.int64()))
    table = pa.table({"text": [f"doc {k}" for k in range(len(documents))], "tokens": column})
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


def write_jsonl(path: Path, documents: list[np.ndarray], newline: str = "\n") -> Path:
    lines = [json.dumps({"id": k, "tokens": d.tolist()}) for k, d in enumerate(documents)]
    path.write_text(newline.join(lines) + newline, newline="")
    return path


class _Source:
    """A random-access source with ``__getitems__``, as Grain's data sources have."""

    def __init__(self, items: list[Any]):
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> Any:
        return self.items[index]

    def __getitems__(self, indices: list[int]) -> list[Any]:
        return [self.items[i] for i in indices]


def _data(kind: str, tmp_path: Path) -> Any:
    thirds = (DOCS[:40], DOCS[40:70], DOCS[70:])
    if kind == "parquet":
        return write_parquet(tmp_path / "docs.parquet", DOCS)
    if kind == "parquet glob":
        for number, part in enumerate(thirds):
            write_parquet(tmp_path / f"part-{number}.parquet", part)
        return str(tmp_path / "part-*.parquet")
    if kind == "jsonl":
        return str(write_jsonl(tmp_path / "docs.jsonl", DOCS))
    if kind == "jsonl crlf, blank lines":
        path = tmp_path / "docs.jsonl"
        write_jsonl(path, DOCS, newline="\r\n\r\n")
        return path
    if kind == "mixed list":
        return [
            write_parquet(tmp_path / "a.parquet", thirds[0]),
            str(write_jsonl(tmp_path / "b.json", thirds[1])),
            write_parquet(tmp_path / "c.parquet", thirds[2]),
        ]
    if kind == "dataset":
        import datasets

        return datasets.Dataset.from_dict({"tokens": [d.tolist() for d in DOCS]})
    if kind == "dataset in chunks":  # its column in sliced chunks, as concatenation leaves it
        import datasets

        table = pa.table({"tokens": pa.array([d.tolist() for d in DOCS], pa.list_(pa.int64()))})
        return datasets.Dataset(pa.concat_tables([table.slice(0, 30), table.slice(30)]))
    if kind == "dataset shuffled":
        import datasets

        order = np.random.default_rng(1).permutation(len(DOCS))
        dataset = datasets.Dataset.from_dict({"tokens": [DOCS[k].tolist() for k in order]})
        return dataset.select(np.argsort(order))  # an indices mapping back to DOCS' order
    if kind == "arrays":
        return DOCS
    if kind == "lists":
        return [d.tolist() for d in DOCS]
    if kind == "dicts source":
        return _Source([{"tokens": d, "id": k} for k, d in enumerate(DOCS)])
    raise AssertionError(kind)


KINDS = [
    "parquet",
    "parquet glob",
    "jsonl",
    "jsonl crlf, blank lines",
    "mixed list",
    "dataset",
    "dataset in chunks",
    "dataset shuffled",
    "arrays",
    "lists",
    "dicts source",
]


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_of_data_gives_the_same_documents(kind: str, tmp_path: Path) -> None:
    docs = Documents(_data(kind, tmp_path), cache_dir=tmp_path / "cache")
    assert len(docs) == len(DOCS)
    assert docs.lengths.dtype == np.int64 and not docs.lengths.flags.writeable
    np.testing.assert_array_equal(docs.lengths, [len(d) for d in DOCS])
    for index, expected in enumerate(DOCS):
        document = docs[index]
        assert document.ndim == 1 and document.dtype == np.int64
        assert not document.flags.writeable
        np.testing.assert_array_equal(document, expected)
    np.testing.assert_array_equal(docs[-1], DOCS[-1])
    asked = np.random.default_rng(2).integers(-len(DOCS), len(DOCS), 60)
    asked = np.concatenate([asked, asked[:5], [3, 3]])  # repeats, an empty document
    read = docs.read(asked)
    assert len(read) == len(asked)
    for document, index in zip(read, asked, strict=True):
        np.testing.assert_array_equal(document, DOCS[index])
    assert docs.read([]) == []
    copy = pickle.loads(pickle.dumps(docs))
    for document, index in zip(copy.read(asked), asked, strict=True):
        np.testing.assert_array_equal(document, DOCS[index])


@pytest.mark.parametrize(
    ("data", "dtype"),
    [
        ("int32 parquet", np.int32),
        ("uint16 parquet", np.uint16),
        ("jsonl", np.int64),
        ([np.arange(3, dtype=np.int16)], np.int16),
        ([[1, 2]], np.int64),
    ],
)
def test_documents_keep_their_dtype(data: Any, dtype: type, tmp_path: Path) -> None:
    if data in ("int32 parquet", "uint16 parquet"):
        data = write_parquet(tmp_path / "d.parquet", DOCS[:5], pa.from_numpy_dtype(dtype))
    elif data == "jsonl":
        data = write_jsonl(tmp_path / "d.jsonl", DOCS[:5])
    assert Documents(data, cache_dir=tmp_path / "cache")[0].dtype == dtype


def test_a_caller_array_stays_writeable() -> None:
    array = np.arange(4)
    assert not Documents([array])[0].flags.writeable
    assert array.flags.writeable


def _spy(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[tuple[Any, ...]]:
    calls: list[tuple[Any, ...]] = []
    function = getattr(module, name)

    def spy(*args: Any) -> Any:
        calls.append(args)
        return function(*args)

    monkeypatch.setattr(module, name, spy)
    return calls


def test_reads_decode_only_the_row_groups_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = Documents(write_parquet(tmp_path / "d.parquet", DOCS), cache_dir=tmp_path)
    assert len(docs.lengths) == len(DOCS)  # read once, before any document is asked for
    datarax.clear_caches()
    decoded = _spy(monkeypatch, _parquet_documents, "read_row_group")
    asked = [5 * ROW_GROUP + 3, 2 * ROW_GROUP, 5 * ROW_GROUP, 2 * ROW_GROUP + 1]
    for document, index in zip(docs.read(asked), asked, strict=True):
        np.testing.assert_array_equal(document, DOCS[index])
    assert sorted(group for _, group, _ in decoded) == [2, 5]
    docs.read([2 * ROW_GROUP + 7])  # a group decoded a moment ago is not decoded again
    docs[5 * ROW_GROUP + 9]
    assert len(decoded) == 2
    docs.read([0, 1])
    assert [group for _, group, _ in decoded] == [2, 5, 0]
    assert all(field == "tokens" for *_, field in decoded)


@pytest.mark.parametrize(
    ("suffix", "module", "name"),
    [("parquet", _parquet_documents, "read_row_group"), ("jsonl", _jsonl_documents, "_parse")],
)
def test_the_index_is_cached_and_reused(
    suffix: str, module: Any, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write = write_parquet if suffix == "parquet" else write_jsonl
    path = write(tmp_path / f"d.{suffix}", DOCS)
    cache = tmp_path / "cache"
    Documents(path, cache_dir=cache).lengths  # noqa: B018 (read, and cached)
    assert [p.suffix for p in cache.iterdir()] == [".npz"]
    calls = _spy(monkeypatch, module, name)
    docs = Documents(path, cache_dir=cache)
    assert calls == []  # not one token read again
    np.testing.assert_array_equal(docs.lengths, [len(d) for d in DOCS])
    Documents(path, field="tokens", cache_dir=tmp_path / "elsewhere").lengths  # noqa: B018
    assert calls  # another cache folder: read again


def test_the_default_cache_folder_follows_xdg(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    Documents(write_jsonl(tmp_path / "d.jsonl", DOCS))
    assert len(list((tmp_path / "xdg" / "datarax-sharding" / "documents").glob("*.npz"))) == 1


def _change(path: Path, documents: list[np.ndarray]) -> None:
    stat = path.stat()
    (write_parquet if path.suffix == ".parquet" else write_jsonl)(path, documents)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))


@pytest.mark.parametrize("suffix", ["parquet", "jsonl"])
def test_a_file_changed_after_building_is_named(suffix: str, tmp_path: Path) -> None:
    write = write_parquet if suffix == "parquet" else write_jsonl
    path = write(tmp_path / f"d.{suffix}", DOCS)
    docs = Documents([path], cache_dir=tmp_path / "cache")
    copy = pickle.loads(pickle.dumps(docs))
    _change(path, DOCS[:7])
    for changed in (docs, copy):
        with pytest.raises(SourceFileChangedError, match="build a new Documents") as raised:
            changed.read([0])
        assert raised.value.path == str(path) and str(path) in str(raised.value)
    fresh = Documents(path, cache_dir=tmp_path / "cache")  # the stale entry is not used
    assert len(fresh) == 7
    assert len(list((tmp_path / "cache").iterdir())) == 1  # but replaced
    np.testing.assert_array_equal(fresh[6], DOCS[6])


@pytest.mark.parametrize("suffix", ["parquet", "jsonl"])
def test_a_pickled_documents_is_small_and_reads_the_same(suffix: str, tmp_path: Path) -> None:
    many = _corpus(10_000, seed=3)
    path = tmp_path / f"d.{suffix}"
    if suffix == "parquet":
        write_parquet(path, many, row_group_size=1000)
    else:
        write_jsonl(path, many)
    docs = Documents(path, cache_dir=tmp_path / "cache")
    pickled = pickle.dumps(docs)
    assert len(pickled) < 1024, len(pickled)
    asked = [9_999, 0, 4_321, 0]
    for cache_left in (True, False):
        if not cache_left:  # the copy computes its index again
            for entry in (tmp_path / "cache").iterdir():
                entry.unlink()
        copy = pickle.loads(pickled)
        assert len(copy) == len(many)
        for document, index in zip(copy.read(asked), asked, strict=True):
            np.testing.assert_array_equal(document, many[index])
        np.testing.assert_array_equal(copy.lengths, docs.lengths)


def test_a_pickled_documents_keeps_the_lengths_passed(tmp_path: Path) -> None:
    lengths = [len(d) for d in DOCS]
    path = write_jsonl(tmp_path / "d.jsonl", DOCS)
    copy = pickle.loads(pickle.dumps(Documents(path, lengths=lengths, cache_dir=tmp_path)))
    np.testing.assert_array_equal(copy.lengths, lengths)
    np.testing.assert_array_equal(copy[10], DOCS[10])


@pytest.mark.parametrize(
    ("suffix", "module", "name"),
    [("parquet", _parquet_documents, "read_row_group"), ("jsonl", _jsonl_documents, "_parse")],
)
def test_lengths_passed_skip_reading_the_tokens(
    suffix: str, module: Any, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write = write_parquet if suffix == "parquet" else write_jsonl
    path = write(tmp_path / f"d.{suffix}", DOCS)
    calls = _spy(monkeypatch, module, name)
    docs = Documents(path, lengths=np.array([len(d) for d in DOCS]), cache_dir=tmp_path)
    assert calls == []
    np.testing.assert_array_equal(docs[1], DOCS[1])


def test_wrong_lengths_passed_are_named_when_read(tmp_path: Path) -> None:
    lengths = [len(d) for d in DOCS]
    lengths[5] += 1
    docs = Documents(
        write_parquet(tmp_path / "d.parquet", DOCS), lengths=lengths, cache_dir=tmp_path
    )
    with pytest.raises(
        DocumentError, match=r"document 5 has \d+ tokens, but lengths\[5\]"
    ) as raised:
        docs.read([4, 5])
    assert raised.value.index == 5


def test_an_unwritable_cache_folder_means_no_cache(tmp_path: Path) -> None:
    blocker = tmp_path / "a file"
    blocker.write_text("")
    for suffix, write in (("parquet", write_parquet), ("jsonl", write_jsonl)):
        path = write(tmp_path / f"d.{suffix}", DOCS)
        docs = Documents(path, cache_dir=blocker / "cache")
        np.testing.assert_array_equal(docs.lengths, [len(d) for d in DOCS])
        np.testing.assert_array_equal(pickle.loads(pickle.dumps(docs))[2], DOCS[2])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a file", "d.jsonl", "d.parquet"]


# Bad input: an error of ours naming what is wrong, and the data files left as they were.


def _refused(error: type[Refused], match: str, data: Any, **options: Any) -> Refused:
    with pytest.raises(error, match=match) as raised:
        Documents(data, **options).lengths  # noqa: B018 (a file's lengths are read when asked)
    return raised.value


def test_no_file_is_named(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.parquet")
    assert _refused(DocumentFileNotFoundError, "does not exist", missing).pattern == missing
    pattern = str(tmp_path / "shards" / "*.parquet")
    error = _refused(DocumentFileNotFoundError, "matches no file", [pattern])
    assert pattern in str(error)
    _refused(DocumentFileNotFoundError, r"is a folder.*\*\.parquet", tmp_path)


def test_an_unknown_extension_is_named(tmp_path: Path) -> None:
    path = tmp_path / "docs.csv"
    path.write_text("1,2,3\n")
    error = _refused(DocumentFormatError, r"docs\.csv .*none of \.parquet, \.jsonl, \.json", path)
    assert error.path == str(path)


def test_a_list_of_files_holds_only_paths(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", DOCS)
    _refused(TypeError, r"data\[1\] is of type ndarray, but data\[0\] is a path", [path, DOCS[0]])


def test_a_missing_field_names_the_columns_there(tmp_path: Path) -> None:
    import datasets

    path = write_parquet(tmp_path / "d.parquet", DOCS)
    error = _refused(
        DocumentFieldError,
        r"no column 'ids'; its columns are \['text', 'tokens'\]",
        path,
        field="ids",
        cache_dir=tmp_path,
    )
    assert (error.field, error.columns, error.path) == ("ids", ("text", "tokens"), str(path))
    dataset = datasets.Dataset.from_dict({"input_ids": [[1, 2]]})
    _refused(DocumentFieldError, r"dataset has no column 'tokens'.*\['input_ids'\]", dataset)
    jsonl = write_jsonl(tmp_path / "d.jsonl", DOCS)
    error = _refused(
        DocumentFieldError,
        r"document 0 \(line 1 of .*d\.jsonl\) has no field 'ids'; its "
        r"fields are \['id', 'tokens'\]",
        jsonl,
        field="ids",
        cache_dir=tmp_path,
    )
    assert error.index == 0
    error = _refused(DocumentFieldError, r"document 1 has no field 'tokens'", [{"tokens": [1]}, {}])
    assert error.index == 1


@pytest.mark.parametrize(
    ("column", "named"),
    [
        (pa.array(["a b", "c"]), "string"),
        (pa.array([[1.5], [2.0]], pa.list_(pa.float32())), "float"),
        (pa.array([1, 2]), "int64"),
    ],
)
def test_a_field_that_is_not_lists_of_integers_names_its_type(
    column: pa.Array, named: str, tmp_path: Path
) -> None:
    import datasets

    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"tokens": column}), path)
    match = rf"is of type [^,]*{named}[^,]*, not a list of integers"
    assert _refused(DocumentFieldError, match, path, cache_dir=tmp_path).field == "tokens"
    _refused(DocumentFieldError, match, datasets.Dataset(pa.table({"tokens": column})))


@pytest.mark.parametrize(
    ("document", "described"),
    [
        (np.array([1.0, 2.0]), "dtype float64"),
        (np.zeros((2, 3), np.int64), r"shape \(2, 3\)"),
        ("some text", "a str"),
        ([[1, 2], [3]], "a list"),
        ([True, False], "a list"),
        (None, "a NoneType"),
    ],
)
def test_a_document_that_is_not_integers_is_named(document: Any, described: str) -> None:
    error = _refused(
        DocumentError, rf"document 2 is .*{described}.*not a 1-D sequence", [[1], [2], document]
    )
    assert error.index == 2


@pytest.mark.parametrize(
    ("line", "match"),
    [
        ('{"tokens": [1.5]}', r"document 1 \(line 3 of .*\) is a list"),
        ('{"tokens": [1, 2]', r"document 1 \(line 3 of .*\) is not valid JSON"),
        ("[1, 2]", r"document 1 \(line 3 of .*\) is a JSON list, not an object"),
        ('{"tokens": [18446744073709551615]}', "beyond int64"),
    ],
)
def test_a_bad_line_is_named(line: str, match: str, tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"tokens": [1]}\n\n' + line + "\n")
    assert _refused(DocumentError, match, path, cache_dir=tmp_path).index == 1


@pytest.mark.parametrize(
    ("values", "match"), [([[1], None], "document 1 .* is null"), ([[1], [2, None]], "null token")]
)
def test_nulls_in_parquet_are_named(values: list[Any], match: str, tmp_path: Path) -> None:
    path = tmp_path / "d.parquet"
    pq.write_table(pa.table({"tokens": pa.array(values, pa.list_(pa.int32()))}), path)
    assert _refused(DocumentError, match, path, cache_dir=tmp_path).index == 1


@pytest.mark.parametrize(
    ("lengths", "error", "match"),
    [
        ([[1, 2]], ValueError, r"lengths must be 1-D.*shape \(1, 2\)"),
        ([1, -2, 3], ValueError, r"lengths\[1\] is -2"),
        ([1.0, 2.0, 3.0], TypeError, "lengths must hold integers.*float64"),
        ([1, 2], ValueError, "lengths has 2 entries for 3 documents"),
    ],
)
def test_lengths_passed_are_checked(
    lengths: Any, error: type[Exception], match: str, tmp_path: Path
) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", DOCS[:3])
    for data in (DOCS[:3], path):
        _refused(error, match, data, lengths=lengths, cache_dir=tmp_path)


def test_bad_indices_and_data_are_refused() -> None:
    docs = Documents(DOCS)
    for index in (len(DOCS), -len(DOCS) - 1):
        with pytest.raises(IndexError, match=f"Index {index} is out of range for 100 documents"):
            docs[index]
    with pytest.raises(IndexError, match="out of range"):
        docs.read([0, 1000])
    with pytest.raises(TypeError, match="indexed by one int"):
        docs[True]
    indices: Any
    for indices in ([[0]], [0.5], 0):
        with pytest.raises(TypeError, match="Indices of documents must be a 1-D sequence of ints"):
            docs.read(indices)
    _refused(TypeError, "data must be a documents file or token store", 42)
    _refused(TypeError, "field must be a string", DOCS, field=3)


def test_bad_input_leaves_the_files_as_they_were(tmp_path: Path) -> None:
    parquet, jsonl = (
        write_parquet(tmp_path / "d.parquet", DOCS),
        write_jsonl(tmp_path / "d.jsonl", DOCS),
    )
    before = {path: path.read_bytes() for path in (parquet, jsonl)}
    for path in (parquet, jsonl):
        with pytest.raises(DocumentError):
            Documents(path, field="ids", cache_dir=tmp_path / "cache").lengths  # noqa: B018
        with pytest.raises(ValueError):
            Documents(path, lengths=[1], cache_dir=tmp_path / "cache")
    assert {path: path.read_bytes() for path in before} == before


def test_a_missing_pyarrow_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_parquet(tmp_path / "d.parquet", DOCS)
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    _refused(ImportError, r"Parquet files needs pyarrow.*datarax-sharding\[parquet\]", path)


def test_importing_the_pipeline_imports_neither_pyarrow_nor_datasets(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", DOCS)
    code = (
        "import sys\n"
        "from datarax.pipeline import Documents\n"
        f"Documents({str(path)!r}, cache_dir={str(tmp_path)!r})[0]\n"
        "Documents([[1, 2]])[0]\n"
        "print(sorted({'pyarrow', 'datasets'} & set(sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip() == "[]", result.stderr


@pytest.mark.parametrize(
    "error",
    [
        DocumentError("m", index=3, path="a.jsonl"),
        DocumentFieldError("m", field="ids", columns=["text"], index=None, path="a.parquet"),
        DocumentFileNotFoundError("m", pattern="shards/*.parquet"),
        DocumentFormatError("m", path="a.csv"),
    ],
)
def test_the_errors_survive_pickling(error: Exception) -> None:
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is type(error) and copy.__dict__ == error.__dict__
    assert str(copy) == "m"
