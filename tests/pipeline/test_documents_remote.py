"""`Documents` over URLs: every kind of documents file reads the same documents from a
local path, from ``memory://`` and from an HTTP server (`_support.range_server`); a read
fetches the byte ranges of the documents asked for, not the files; a server that ignores
ranges, fails, or whose files change is named, as are unknown schemes and missing
packages; a pickled copy holds URLs and reads in other processes; remote reads wait for
the network on threads, side by side."""

from __future__ import annotations

import concurrent.futures
import importlib.util
import json
import multiprocessing
import os
import pickle
import shutil
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _support.range_server import RangeServer

import datarax
from datarax.errors import DocumentFileNotFoundError, RemoteReadError, SourceFileChangedError
from datarax.pipeline import Documents, Packed, write_documents
from datarax.pipeline.documents import _index, _storage

EOS = 65_000  # the end-of-text id of the flat token files (uint16)
PER_SHARD = 64  # documents in each shard of the token store: 5 shards
ROW_GROUP = 16


def _corpus(count: int, seed: int, longest: int = 60) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    documents = [rng.integers(0, 60_000, rng.integers(0, longest + 1)) for _ in range(count)]
    documents[7] = np.zeros(0, np.int64)  # empty documents are documents too
    return documents


DOCS = _corpus(300, seed=0)
PARTS = (DOCS[:100], DOCS[100:180], DOCS[180:])


def _write_parquet(path: Path, documents: list[np.ndarray], row_group_size: int) -> Path:
    column = pa.array([d.tolist() for d in documents], pa.list_(pa.int64()))
    pq.write_table(pa.table({"tokens": column}), path, row_group_size=row_group_size)
    return path


def _write_jsonl(path: Path, documents: list[np.ndarray]) -> Path:
    path.write_text("".join(json.dumps({"tokens": d.tolist()}) + "\n" for d in documents))
    return path


def _write_files(root: Path) -> None:
    """Every kind of documents file, of `DOCS` (or of parts of it), under `root`."""
    root.mkdir(parents=True, exist_ok=True)
    write_documents(DOCS, root / "store", documents_per_shard=PER_SHARD)
    _write_parquet(root / "docs.parquet", DOCS, ROW_GROUP)
    _write_jsonl(root / "docs.jsonl", DOCS)
    flat = np.concatenate([np.append(d, EOS) for d in DOCS]).astype(np.uint16)
    np.save(root / "flat.npy", flat)
    flat.tofile(root / "flat.bin")
    _write_parquet(root / "part-0.parquet", PARTS[0], ROW_GROUP)
    _write_jsonl(root / "part-1.jsonl", PARTS[1])
    _write_parquet(root / "part-2.parquet", PARTS[2], ROW_GROUP)


def _with_eos(documents: list[np.ndarray]) -> list[np.ndarray]:
    """A flat token file's documents: each ends with (and holds) the end-of-text id."""
    return [np.append(d, EOS) for d in documents]


# kind -> (the path under the files' folder, the options, the documents it holds)
KINDS: dict[str, tuple[str, dict[str, Any], list[np.ndarray]]] = {
    "parquet": ("docs.parquet", {}, DOCS),
    "jsonl": ("docs.jsonl", {}, DOCS),
    "store": ("store", {}, DOCS),
    "megatron prefix": ("store/shard-00001", {}, DOCS[PER_SHARD : 2 * PER_SHARD]),
    "megatron idx": ("store/shard-00004.idx", {}, DOCS[4 * PER_SHARD :]),
    "npy": ("flat.npy", {"eos_id": EOS}, _with_eos(DOCS)),
    "bin": ("flat.bin", {"eos_id": EOS, "dtype": np.uint16}, _with_eos(DOCS)),
    "glob": ("part-*", {}, DOCS),  # two Parquet files and a JSON Lines file between them
}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The files of every kind, on the local disk (read, never changed, by the tests)."""
    folder = tmp_path_factory.mktemp("remote") / "files"
    _write_files(folder)
    return folder


@pytest.fixture(scope="module")
def server(root: Path) -> Iterator[RangeServer]:
    """An HTTP server of `root`, for the tests that neither change files nor count bytes."""
    with RangeServer(root) as running:
        yield running


def _put_in_memory(folder: Path, prefix: str) -> None:
    memory = fsspec.filesystem("memory")
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            memory.pipe(f"{prefix}/{path.relative_to(folder).as_posix()}", path.read_bytes())


@pytest.fixture(scope="module")
def memory(root: Path) -> Iterator[str]:
    """`root` copied to fsspec's memory file system: its ``memory://`` URL; removed after."""
    prefix = f"/datarax-remote-{uuid.uuid4().hex}"
    _put_in_memory(root, prefix)
    yield f"memory:/{prefix}"
    fsspec.filesystem("memory").rm(prefix, recursive=True)


@pytest.fixture
def own_memory() -> Iterator[str]:
    """A fresh folder of the memory file system, for one test (removed after it)."""
    prefix = f"/datarax-remote-{uuid.uuid4().hex}"
    yield prefix
    memory = fsspec.filesystem("memory")
    if memory.exists(prefix):
        memory.rm(prefix, recursive=True)


def _same(read: list[np.ndarray], expected: list[np.ndarray]) -> None:
    assert len(read) == len(expected)
    for number, (document, wanted) in enumerate(zip(read, expected, strict=True)):
        assert document.ndim == 1, number
        np.testing.assert_array_equal(document, wanted, err_msg=f"document {number}")


# Every kind, from every place.


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_kind_reads_the_same_from_a_path_memory_and_http(
    kind: str, root: Path, memory: str, server: RangeServer, tmp_path: Path
) -> None:
    name, options, expected = KINDS[kind]
    order = np.random.default_rng(5).permutation(len(expected))
    asked = np.concatenate([order, order[:3]])  # repeats too
    read: dict[str, list[np.ndarray]] = {}
    for place, base in [("path", str(root)), ("memory", memory), ("http", server.url)]:
        docs = Documents(f"{base}/{name}", cache_dir=tmp_path / "cache", **options)
        assert len(docs) == len(expected), place
        np.testing.assert_array_equal(docs.lengths, [len(d) for d in expected], err_msg=place)
        read[place] = docs.read(asked)
        _same(read[place], [expected[k] for k in asked])
    dtypes = {place: {d.dtype for d in documents} for place, documents in read.items()}
    assert dtypes["memory"] == dtypes["http"] == dtypes["path"]
    assert server.errors == []


# Byte ranges, not downloads.


def _store_of(folder: Path, documents: list[np.ndarray], per_shard: int) -> tuple[Path, int]:
    """A token store of `documents` at ``folder/store``, and the bytes of its indexes."""
    write_documents(documents, folder / "store", documents_per_shard=per_shard)
    indexes = sum(path.stat().st_size for path in (folder / "store").glob("*.idx"))
    return folder / "store", indexes


BIG = _corpus(3_000, seed=1, longest=130)  # about 200 KB of uint16 tokens
LISTINGS = 4096  # slack for the folder's listing pages, and the like


def test_reading_a_remote_store_fetches_the_documents_bytes_only(tmp_path: Path) -> None:
    store, _ = _store_of(tmp_path / "served", BIG, per_shard=500)
    tokens = sum(path.stat().st_size for path in store.glob("*.bin"))
    assert tokens > 190_000
    asked = np.random.default_rng(2).choice(len(BIG), 10, replace=False)
    wanted = int(sum(len(BIG[k]) for k in asked)) * 2  # uint16
    with RangeServer(tmp_path / "served") as server:
        docs = Documents(f"{server.url}/store", cache_dir=tmp_path / "cache")
        server.reset()
        _same(docs.read(asked), [BIG[k] for k in asked])
        assert wanted <= server.bytes_served <= wanted + 1024, (server.bytes_served, wanted)
        gets = [(path, span) for method, path, span in server.log if method == "GET"]
        assert len(gets) == sum(len(BIG[k]) > 0 for k in asked)  # a request a document
        assert all(path.endswith(".bin") and span is not None for path, span in gets), gets


def test_building_and_reading_a_remote_store_fetches_no_tokens_but_the_documents(
    tmp_path: Path,
) -> None:
    store, indexes = _store_of(tmp_path / "served", BIG, per_shard=500)
    manifest = (store / "manifest.json").stat().st_size
    tokens = sum(path.stat().st_size for path in store.glob("*.bin"))
    asked = np.random.default_rng(3).choice(len(BIG), 10, replace=False)
    wanted = int(sum(len(BIG[k]) for k in asked)) * 2
    with RangeServer(tmp_path / "served") as server:
        docs = Documents(f"{server.url}/store", cache_dir=tmp_path / "cache")
        _same(docs.read(asked), [BIG[k] for k in asked])
        allowed = wanted + indexes + manifest + LISTINGS
        by_file = dict(server.bytes_by_path)
        assert server.bytes_served <= allowed, (server.bytes_served, allowed, tokens, by_file)
        assert server.bytes_served < tokens / 2


def _group_bytes(path: Path, groups: set[int]) -> int:
    """The bytes of the column chunks of row groups `groups` of the Parquet file `path`."""
    metadata = pq.ParquetFile(path).metadata
    return sum(
        metadata.row_group(group).column(column).total_compressed_size
        for group in groups
        for column in range(metadata.num_columns)
    )


def test_reading_a_remote_parquet_file_fetches_only_the_row_groups_asked_for(
    tmp_path: Path,
) -> None:
    served = tmp_path / "served"
    served.mkdir()
    path = _write_parquet(served / "big.parquet", BIG, row_group_size=50)  # 60 row groups
    size = path.stat().st_size
    asked = np.random.default_rng(4).choice(len(BIG), 10, replace=False)
    groups = {int(k) // 50 for k in asked}
    footer = max(64 << 10, pq.ParquetFile(path).metadata.serialized_size + 8)  # pyarrow's read
    with RangeServer(served) as server:
        # The default 16 threads: each reads through its own file object, the footer
        # fetched once in the process.
        docs = Documents(f"{server.url}/big.parquet", cache_dir=tmp_path / "cache")
        assert len(docs.lengths) == len(BIG)  # every row group read once, for the lengths
        datarax.clear_caches()  # no decoded row group kept
        server.reset()
        _same(docs.read(asked), [BIG[k] for k in asked])
        allowed = _group_bytes(path, groups) + footer + LISTINGS
        assert server.bytes_served <= allowed, (server.bytes_served, allowed, size)
        assert server.bytes_served < size / 2, (server.bytes_served, size)


# Bad servers, changed files, unknown places.


@pytest.mark.parametrize(
    ("name", "file"),
    [
        ("store", "store/shard-00000.bin"),
        ("docs.jsonl", "docs.jsonl"),
        ("docs.parquet", "docs.parquet"),
    ],
)
def test_a_server_that_ignores_ranges_is_named_at_the_first_read(
    name: str, file: str, root: Path, tmp_path: Path
) -> None:
    with RangeServer(root, ignore_ranges=True) as server:
        started = time.monotonic()
        docs = Documents(f"{server.url}/{name}", cache_dir=tmp_path / "cache")
        with pytest.raises(RemoteReadError, match="does not serve byte ranges") as raised:
            docs.read([1, 2, 3])
        assert time.monotonic() - started < 30
        assert raised.value.url == f"{server.url}/{file}"
        assert raised.value.url in str(raised.value)


def test_a_failing_server_is_tried_again_then_named(root: Path, tmp_path: Path) -> None:
    with RangeServer(root) as server:
        docs = Documents(f"{server.url}/store", cache_dir=tmp_path / "cache")
        server.fail_next(2)
        _same(docs.read([5, 70]), [DOCS[5], DOCS[70]])
        assert server.failures_left == 0  # both failures were met, and tried again
        server.fail_next(10)
        with pytest.raises(RemoteReadError) as raised:
            docs.read([6])
        assert raised.value.attempts == 3
        assert server.failures_left == 10 - 3  # three tries, not one more
        url = f"{server.url}/store/shard-00000.bin"
        assert raised.value.url == url and url in str(raised.value)


def test_a_silent_server_is_given_up_on_in_bounded_time(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_storage, "TIMEOUT_S", 0.5)
    monkeypatch.setattr(_storage, "_filesystems", {})  # made again with the short bound
    with RangeServer(root) as server:
        docs = Documents(f"{server.url}/store", cache_dir=tmp_path / "cache")
        server.delay_s = 3.0  # silent past the bound on every try
        started = time.monotonic()
        with pytest.raises(RemoteReadError, match="failed 3 times") as raised:
            docs.read([6])
        assert time.monotonic() - started < 2 * 3.0  # not one wait of 3 s a try
        assert raised.value.url == f"{server.url}/store/shard-00000.bin"


@pytest.mark.parametrize("methods", [("GET",), ("HEAD", "GET")], ids=["GET", "HEAD and GET"])
def test_a_server_failing_a_moment_while_documents_is_built_is_tried_again(
    methods: tuple[str, ...], root: Path, tmp_path: Path
) -> None:
    with RangeServer(root, fail_first=2, fail_methods=methods) as server:
        docs = Documents(f"{server.url}/docs.jsonl", cache_dir=tmp_path / "cache")
        assert server.failures_left == 0
        assert len(docs) == len(DOCS)
        _same(docs.read([4, 0]), [DOCS[4], DOCS[0]])


def test_a_server_failing_a_moment_at_a_recheck_is_tried_again_not_called_changed(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with RangeServer(root, fail_methods=("HEAD", "GET")) as server:
        docs = Documents(f"{server.url}/store", cache_dir=tmp_path / "cache")
        monkeypatch.setattr(_index, "RECHECK_S", 0.0)  # every read asks for the stamps
        server.fail_next(2)  # the stamp's HEAD, and the GET fsspec tries after it
        _same(docs.read([5]), [DOCS[5]])
        assert server.failures_left == 0


def _changed(path: Path, same_size: bool) -> None:
    """`path` rewritten with other bytes (as many, with `same_size`), a second later."""
    stat = path.stat()
    data = bytearray(path.read_bytes())
    if same_size:
        at = len(data) // 2
        data[at] = (data[at] + 1) % 256
    else:
        data += b"\n" if path.suffix == ".jsonl" else b"\0\0"
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))


CHANGES = [
    ("docs.jsonl", "docs.jsonl", False),
    ("docs.jsonl", "docs.jsonl", True),
    ("docs.parquet", "docs.parquet", True),
    ("store", "store/shard-00002.bin", False),
]


@pytest.mark.parametrize(("name", "file", "same_size"), CHANGES)
def test_a_file_changed_on_the_server_is_named(
    name: str,
    file: str,
    same_size: bool,
    root: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    served = tmp_path / "served"
    shutil.copytree(root, served)
    with RangeServer(served) as server:
        docs = Documents(f"{server.url}/{name}", cache_dir=tmp_path / "cache")
        copy = pickle.loads(pickle.dumps(docs))
        _same(docs.read([2 * PER_SHARD + 1]), [DOCS[2 * PER_SHARD + 1]])
        _changed(served / file, same_size)
        monkeypatch.setattr(_index, "RECHECK_S", 0.0)  # checked at every read, not every 5 s
        for changed in (docs, copy):
            with pytest.raises(SourceFileChangedError, match="build a new Documents") as raised:
                changed.read([2 * PER_SHARD + 1])
            assert raised.value.path == f"{server.url}/{file}"
            assert raised.value.path in str(raised.value)


@pytest.mark.parametrize("same_size", [False, True])
def test_a_file_changed_in_memory_is_named(
    same_size: bool, own_memory: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = fsspec.filesystem("memory")
    data = _write_jsonl(tmp_path / "docs.jsonl", DOCS).read_bytes()
    memory.pipe(f"{own_memory}/docs.jsonl", data)
    url = f"memory:/{own_memory}/docs.jsonl"
    docs = Documents(url, cache_dir=tmp_path / "cache")
    _same(docs.read([9]), [DOCS[9]])
    time.sleep(0.01)  # the memory file system's version is its creation time
    changed = data.replace(b"1", b"2", 1) if same_size else data + b"\n"
    assert changed != data and (len(changed) == len(data)) == same_size
    memory.pipe(f"{own_memory}/docs.jsonl", changed)
    monkeypatch.setattr(_index, "RECHECK_S", 0.0)
    with pytest.raises(SourceFileChangedError, match="build a new Documents") as raised:
        docs.read([9])
    assert raised.value.path == url and url in str(raised.value)


@pytest.mark.parametrize("where", ["memory", "http folder", "http no folder"])
def test_a_remote_glob_matching_nothing_is_named(where: str, server: RangeServer) -> None:
    pattern = {
        "memory": "memory://nothing/*.parquet",
        "http folder": f"{server.url}/store/*.parquet",
        "http no folder": f"{server.url}/nothing/*.parquet",
    }[where]
    with pytest.raises(DocumentFileNotFoundError, match="matches no file") as raised:
        Documents(pattern)
    assert raised.value.pattern == pattern and pattern in str(raised.value)


def test_a_scheme_whose_package_is_missing_names_the_package() -> None:
    if importlib.util.find_spec("gcsfs") is not None:
        pytest.skip("gcsfs is installed here: gs:// needs no advice")
    with pytest.raises(ImportError, match="gcsfs") as raised:
        Documents("gs://bucket/a.parquet")
    assert "gs://bucket/a.parquet" in str(raised.value)


def test_an_unknown_scheme_is_named() -> None:
    with pytest.raises(ValueError, match="unknownscheme"):
        Documents("unknownscheme://x/a.jsonl")


# Pickled copies, other processes.


@pytest.mark.parametrize("name", ["store", "docs.parquet", "docs.jsonl", "part-*"])
def test_a_pickled_remote_documents_is_small_and_reads_the_same(
    name: str, server: RangeServer, tmp_path: Path
) -> None:
    docs = Documents(f"{server.url}/{name}", cache_dir=tmp_path / "cache")
    pickled = pickle.dumps(docs)
    assert len(pickled) < 4096, len(pickled)
    assert server.url.encode() in pickled
    copy = pickle.loads(pickled)
    asked = np.random.default_rng(6).permutation(len(DOCS))[:50]
    _same(copy.read(asked), [DOCS[k] for k in asked])
    np.testing.assert_array_equal(copy.lengths, docs.lengths)


def _read_in_child(pickled: bytes, asked: list[int]) -> tuple[int, list[np.ndarray]]:
    """What a worker process reads: this process's id, and documents `asked` of the
    pickled `Documents`."""
    return os.getpid(), pickle.loads(pickled).read(asked)


def test_other_processes_read_a_pickled_remote_documents(
    root: Path, server: RangeServer, tmp_path: Path
) -> None:
    local = Documents(root / "store", cache_dir=tmp_path / "cache")
    pickled = pickle.dumps(Documents(f"{server.url}/store", cache_dir=tmp_path / "cache"))
    rng = np.random.default_rng(7)
    asked = [rng.choice(len(DOCS), 20, replace=False).tolist() for _ in range(4)]
    context = multiprocessing.get_context("spawn")
    pool = concurrent.futures.ProcessPoolExecutor(2, mp_context=context)
    try:
        futures = [pool.submit(_read_in_child, pickled, indices) for indices in asked]
        results = [future.result(timeout=120) for future in futures]
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    assert os.getpid() not in {pid for pid, _ in results}
    for indices, (_, read) in zip(asked, results, strict=True):
        _same(read, local.read(indices))


# Reads on threads.


@pytest.mark.parametrize("spread", ["across shards", "one shard"])
def test_remote_reads_wait_for_the_network_side_by_side(
    spread: str, root: Path, tmp_path: Path
) -> None:
    rng = np.random.default_rng(8)
    if spread == "one shard":
        asked = rng.choice(PER_SHARD, 32, replace=False) + PER_SHARD
    else:
        asked = rng.choice(len(DOCS), 32, replace=False)
    with RangeServer(root) as server:
        url = f"{server.url}/store"
        threaded = Documents(url, cache_dir=tmp_path / "cache", read_threads=16)
        alone = Documents(url, cache_dir=tmp_path / "cache", read_threads=1)
        server.delay_s = 0.05  # every request waits 50 ms for its answer
        seconds, requests, gets = {}, {}, {}
        for label, docs in [("threaded", threaded), ("alone", alone)]:
            server.reset()
            started = time.perf_counter()
            _same(docs.read(asked), [DOCS[k] for k in asked])
            seconds[label] = time.perf_counter() - started
            requests[label] = server.requests
            gets[label] = sum(method == "GET" for method, *_ in server.log)
    non_empty = sum(len(DOCS[k]) > 0 for k in asked)
    assert gets == {"threaded": non_empty, "alone": non_empty}  # a request a document
    assert seconds["alone"] >= requests["alone"] * 0.05, (seconds, requests)  # one by one
    assert seconds["threaded"] < 0.5 * seconds["alone"], seconds


# The server the tests above read from.


def _ask(url: str, method: str = "GET", span: str | None = None) -> tuple[int, Any, bytes]:
    request = urllib.request.Request(url, method=method)
    if span is not None:
        request.add_header("Range", span)
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.headers, answer.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.headers, error.read()


def test_the_range_server_answers_ranges_listings_and_failures(tmp_path: Path) -> None:
    data = bytes(range(256)) * 4
    (tmp_path / "root" / "folder" / "inner").mkdir(parents=True)
    (tmp_path / "root" / "folder" / "a b.bin").write_bytes(data)
    (tmp_path / "secret").write_bytes(b"not served")
    bodies: list[bytes] = []  # what every GET below received

    def get(url: str, span: str | None = None) -> tuple[int, Any, bytes]:
        status, headers, body = _ask(url, "GET", span)
        bodies.append(body)
        return status, headers, body

    with RangeServer(tmp_path / "root") as server:
        url = server.url_of("folder/a b.bin")
        assert url == f"{server.url}/folder/a%20b.bin"
        status, headers, body = get(url, "bytes=10-19")
        assert (status, body) == (206, data[10:20])
        assert headers["Content-Range"] == f"bytes 10-19/{len(data)}"
        assert headers["Content-Length"] == "10" and headers["Accept-Ranges"] == "bytes"
        assert get(url, "bytes=1000-")[2] == data[1000:]
        assert get(url, "bytes=-5")[2] == data[-5:]
        assert get(url, f"bytes={len(data)}-")[0] == 416
        assert get(url)[2] == data
        status, headers, body = _ask(url, "HEAD")
        assert (status, body, headers["Content-Length"]) == (200, b"", str(len(data)))
        stat = (tmp_path / "root" / "folder" / "a b.bin").stat()
        assert headers["ETag"] == f'"{stat.st_size:x}-{stat.st_mtime_ns:x}"'
        assert headers["Last-Modified"]
        assert get(f"{server.url}/folder/missing")[0] == 404
        assert get(f"{server.url}/folder/../../secret")[0] == 404  # outside the root
        status, headers, body = get(f"{server.url}/folder")
        assert status == 200 and headers["Content-Type"].startswith("text/html")
        assert b'<a href="a%20b.bin">' in body and b'<a href="inner/">' in body
        assert server.bytes_served == sum(map(len, bodies))
        assert server.bytes_by_path["/folder/a b.bin"] == 10 + 24 + 5 + len(data)
        assert server.requests == len(bodies) + 1  # and the HEAD
        server.fail_next(1)
        assert _ask(url, "HEAD")[0] == 200  # GETs fail, not HEADs
        assert get(url)[0] == 503 and get(url)[0] == 200
        server.reset()
        assert (server.bytes_served, server.requests, server.log) == (0, 0, [])
        server.ignore_ranges = True
        status, headers, body = get(url, "bytes=10-19")
        assert (status, body) == (200, data) and "Accept-Ranges" not in headers
        assert server.bytes_served == len(data)
        assert server.errors == []
    with pytest.raises(urllib.error.URLError):
        _ask(url)  # stopped


def test_packed_rows_from_a_remote_store_hold_rows_of_edge_lengths_and_refuse_wide_tokens(
    own_memory: str, tmp_path: Path
) -> None:
    """Documents exactly a row long, empty and longer than a row pack over a URL as they
    pack locally; a token past int32 is refused through the pieces read."""
    row = 16
    documents = [np.arange(row), np.zeros(0, np.int64), np.arange(3 * row + 5), np.arange(7)]
    write_documents(documents, tmp_path / "store")
    _put_in_memory(tmp_path / "store", f"{own_memory}/store")
    local = Packed(Documents(tmp_path / "store", cache_dir=tmp_path / "c"), row)
    remote = Packed(Documents(f"memory://{own_memory}/store", cache_dir=tmp_path / "c"), row)
    assert len(remote) == len(local) and remote.empty_documents == 1
    for got, want in zip(
        remote.__getitems__(range(len(remote))), local.__getitems__(range(len(local))), strict=True
    ):
        assert all(np.array_equal(got[key], want[key]) for key in want)
    wide = [np.array([1, 2**31]), np.arange(5)]
    write_documents(wide, tmp_path / "wide", dtype=np.int64)
    _put_in_memory(tmp_path / "wide", f"{own_memory}/wide")
    packed = Packed(Documents(f"memory://{own_memory}/wide", cache_dir=tmp_path / "c"), 4)
    with pytest.raises(ValueError, match=r"holds token 2147483648, which int32 does not hold"):
        packed.__getitems__(range(len(packed)))
