"""Text tokenized on the way, and compressed JSON Lines: every kind of text gives the
documents a tokenizer gives by hand, lengths are counted once (on workers when it is worth
it) and cached only under a tokenizer's name, `write_documents` tokenizes each document
once, a compressed file is read in order only, and bad input is refused by name."""

from __future__ import annotations

import functools
import gzip
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from datarax.errors import DocumentError, DocumentFieldError, DocumentFormatError
from datarax.pipeline import Documents, write_documents

TEXTS = [
    "the cat sat on the mat",
    "",
    "héllo wörld, ünïcode",
    "a dog and a cat",
    "numbers 1 2 3 and more numbers",
    "the end",
] * 3
EOS = 7


def byte_tokens(text: str) -> list[int]:
    """A tokenizer with no training: a text's UTF-8 bytes."""
    return list(text.encode("utf-8"))


@functools.cache
def _bpe() -> Tokenizer:
    """A small BPE model, trained here on `TEXTS` (no download)."""
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.BpeTrainer(vocab_size=120, special_tokens=["[UNK]"], show_progress=False)
    tokenizer.train_from_iterator(TEXTS, trainer)
    return tokenizer


class BpeIds:
    """The ids of the BPE model: a tokenizer that pickles."""

    def __call__(self, text: str) -> list[int]:
        return _bpe().encode(text).ids


class Counting:
    """A tokenizer that counts its calls (in this process)."""

    def __init__(self, tokenizer: Callable[[str], Sequence[int]] = byte_tokens):
        self.tokenizer, self.calls = tokenizer, 0

    def __call__(self, text: str) -> Sequence[int]:
        self.calls += 1
        return self.tokenizer(text)


_seen_in: set[int] = set()


def logged_bytes(folder: str, text: str) -> list[int]:
    """`byte_tokens`, leaving a file named by each process that runs it in `folder`."""
    if os.getpid() not in _seen_in:
        _seen_in.add(os.getpid())
        Path(folder, str(os.getpid())).touch()
    return byte_tokens(text)


def _expected(tokenizer: Callable[[str], Sequence[int]], eos: int | None) -> list[list[int]]:
    return [list(tokenizer(text)) + ([] if eos is None else [eos]) for text in TEXTS]


def _lines(texts: Sequence[str], field: str = "text") -> bytes:
    lines = [json.dumps({"id": k, field: text}) for k, text in enumerate(texts)]
    lines.insert(2, "   ")  # a blank line is no document
    return ("\n".join(lines) + "\n").encode()


def write_text(path: Path, texts: Sequence[str] = TEXTS) -> Path:
    """`texts` as JSON Lines (plain, .gz or .zst, by `path`'s extension) or Parquet."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        large = "large" in path.name
        column = pa.array(list(texts), pa.large_string() if large else pa.string())
        pq.write_table(pa.table({"text": column}), path, row_group_size=5)
    elif suffix == ".gz":
        path.write_bytes(gzip.compress(_lines(texts)))
    elif suffix == ".zst":
        data = _lines(texts)
        compressor = zstandard.ZstdCompressor()  # two frames, as a file written in parts
        path.write_bytes(compressor.compress(data[:40]) + compressor.compress(data[40:]))
    else:
        path.write_bytes(_lines(texts))
    return path


FILES = ["t.jsonl", "t.parquet", "large.parquet", "t.jsonl.gz", "t.JSON.ZST"]


def _source(kind: str, tmp_path: Path) -> Any:
    if kind in FILES:
        return write_text(tmp_path / kind)
    if kind == "strings":
        return list(TEXTS)
    if kind == "dicts":
        return [{"text": text, "id": k} for k, text in enumerate(TEXTS)]
    import datasets

    return datasets.Dataset.from_dict({"text": TEXTS}).select(range(len(TEXTS)))


def _read_all(documents: Documents, in_order: bool, tmp_path: Path) -> list[list[int]]:
    """Every document, read by position, or (`in_order` only) through a token store."""
    if in_order:
        documents = write_documents(documents, tmp_path / "store")
    return [d.tolist() for d in documents.read(np.arange(len(documents)))]


@pytest.mark.parametrize("kind", [*FILES, "strings", "dicts", "dataset"])
@pytest.mark.parametrize("eos", [None, EOS])
@pytest.mark.parametrize("name", ["bytes", "bpe"])
def test_every_kind_of_text_gives_the_tokenizers_documents(
    kind: str, eos: int | None, name: str, tmp_path: Path
) -> None:
    tokenizer: Callable[[str], Sequence[int]] = byte_tokens if name == "bytes" else BpeIds()
    documents = Documents(
        _source(kind, tmp_path),
        field="text",
        tokenizer=tokenizer,
        append_eos=eos,
        cache_dir=tmp_path / "cache",
    )
    expected = _expected(tokenizer, eos)
    assert len(documents) == len(TEXTS)
    assert documents.lengths.tolist() == [len(tokens) for tokens in expected]
    compressed = kind in ("t.jsonl.gz", "t.JSON.ZST")
    assert _read_all(documents, compressed, tmp_path) == expected
    if not compressed:
        assert documents[2].dtype == np.int64 and not documents[2].flags.writeable


def test_an_integer_array_keeps_its_dtype_and_the_eos_is_appended_in_it() -> None:
    def narrow(text: str) -> np.ndarray:
        return np.frombuffer(text.encode(), np.uint8).astype(np.uint16)

    documents = Documents(["ab", ""], tokenizer=narrow, append_eos=300)
    assert [(d.dtype, d.tolist()) for d in documents.read([0, 1])] == [
        (np.dtype(np.uint16), [97, 98, 300]),
        (np.dtype(np.uint16), [300]),
    ]
    with pytest.raises(DocumentError, match=r"ids of dtype uint16 .* append_eos=70000"):
        Documents(["ab"], tokenizer=narrow, append_eos=70_000).lengths  # noqa: B018


def test_the_lengths_pass_runs_on_workers_and_equals_the_pass_here(tmp_path: Path) -> None:
    texts = [f"document {k} " + "x" * (k % 13) for k in range(4_200)]
    paths = [write_text(tmp_path / f"{k}.jsonl", texts[k::2]) for k in range(2)]
    folder = tmp_path / "processes"
    folder.mkdir()
    on_workers = Documents(
        [Path(p) for p in paths],
        field="text",
        tokenizer=functools.partial(logged_bytes, str(folder)),
        cache_dir=tmp_path / "cache",
    ).lengths
    here = Documents(
        paths[0], field="text", tokenizer=lambda s: byte_tokens(s), cache_dir=tmp_path / "cache"
    )
    assert len(on_workers) == 4_200  # the two files' documents, counted in one pass
    assert on_workers[:2_100].tolist() == here.lengths.tolist()
    assert on_workers.tolist() == [len(byte_tokens(t)) for t in texts[0::2] + texts[1::2]]
    assert {int(name) for name in os.listdir(folder)} - {os.getpid()}  # run on workers


@pytest.mark.parametrize("kind", ["t.jsonl", "t.parquet", "t.jsonl.gz"])
def test_lengths_are_cached_under_the_tokenizers_name_only(kind: str, tmp_path: Path) -> None:
    path, cache = write_text(tmp_path / kind), tmp_path / "cache"

    def counted(name: str | None, eos: int | None = None) -> int:
        tokenizer = Counting()
        documents = Documents(
            path,
            field="text",
            tokenizer=tokenizer,
            tokenizer_name=name,
            append_eos=eos,
            cache_dir=cache,
        )
        assert documents.lengths.tolist() == [len(t) for t in _expected(byte_tokens, eos)]
        return tokenizer.calls

    assert counted(None) == counted(None) == len(TEXTS)  # no name: counted every time
    entries = len(list(cache.glob("*.npz")))  # the file's index, not its lengths
    assert counted("bytes-v1") == len(TEXTS)
    assert len(list(cache.glob("*.npz"))) == entries + 1
    assert counted("bytes-v1") == 0  # a second Documents tokenizes nothing for lengths
    assert counted("bytes-v2") == len(TEXTS)  # another name, another entry
    assert counted("bytes-v1", eos=EOS) == len(TEXTS)  # the eos is part of the key
    assert counted("bytes-v1") == 0


def test_packing_plans_are_kept_on_disk_only_for_a_named_tokenizer(tmp_path: Path) -> None:
    path = write_text(tmp_path / "t.jsonl")
    unnamed = Documents(path, field="text", tokenizer=byte_tokens, cache_dir=tmp_path)
    named = [
        Documents(path, field="text", tokenizer=byte_tokens, tokenizer_name=n, cache_dir=tmp_path)
        for n in ("a", "b")
    ]
    assert unnamed._plan_home() is None
    homes = [documents._plan_home() for documents in named]
    assert homes[0] is not None and homes[1] is not None and homes[0][0] != homes[1][0]


@pytest.mark.parametrize("kind", ["t.jsonl", "t.parquet", "t.jsonl.gz", "t.JSON.ZST", "strings"])
def test_write_documents_tokenizes_each_document_once(kind: str, tmp_path: Path) -> None:
    tokenizer = Counting(BpeIds())
    documents = Documents(
        _source(kind, tmp_path), field="text", tokenizer=tokenizer, cache_dir=tmp_path / "c"
    )
    store = write_documents(documents, tmp_path / "store", workers=0, documents_per_shard=4)
    assert tokenizer.calls == len(TEXTS)
    expected = _expected(BpeIds(), None)
    assert store.lengths.tolist() == [len(tokens) for tokens in expected]
    assert [d.tolist() for d in store.read(np.arange(len(store)))] == expected


def test_a_tokenizer_that_does_not_pickle_is_written_in_this_process(tmp_path: Path) -> None:
    path = write_text(tmp_path / "t.jsonl")
    documents = Documents(path, field="text", tokenizer=lambda s: byte_tokens(s))
    store = write_documents(documents, tmp_path / "store", documents_per_shard=4)  # 5 shards
    assert [d.tolist() for d in store.read(np.arange(len(store)))] == _expected(byte_tokens, None)
    with pytest.raises(TypeError, match=r"workers=2 writes on worker processes, and .* does not"):
        write_documents(documents, tmp_path / "again", documents_per_shard=4, workers=2)


def _raises(text: str) -> list[int]:
    raise ValueError(f"no tokens for {text!r}")


@pytest.mark.parametrize(
    ("tokenizer", "match"),
    [
        (_raises, r"tokenizer raised ValueError on document 0 \(line 1 of .*t\.jsonl\): no tok"),
        (lambda s: _bpe().encode(s), r"returned a tokenizers\.Encoding: .*lambda s: tok\.encode"),
        (lambda s: s, r"document 0 \(line 1 of .*\), not a 1-D sequence of token ids"),
        (lambda s: [1.5, 2.0], r"returned a list: \[1\.5, 2\.0\] for document 0 \(line 1"),
        (lambda s: [[1, 2]], r"returned a list: \[\[1, 2\]\] for document 0"),
        (lambda s: [True], r"returned a list: \[True\] for document 0"),
    ],
)
def test_a_tokenizer_that_fails_or_returns_no_ids_is_named_with_the_document(
    tokenizer: Callable[[str], Any], match: str, tmp_path: Path
) -> None:
    path = write_text(tmp_path / "t.jsonl")
    documents = Documents(path, field="text", tokenizer=tokenizer, cache_dir=tmp_path)
    with pytest.raises(DocumentError, match=match) as raised:
        documents.lengths  # noqa: B018
    assert (raised.value.index, raised.value.path) == (0, str(path))
    if tokenizer is _raises:
        assert isinstance(raised.value.__cause__, ValueError)
    with pytest.raises(DocumentError, match=r"document 3\b") as raised:
        Documents(TEXTS, tokenizer=tokenizer, lengths=[1] * len(TEXTS))[3]
    assert raised.value.index == 3


def test_a_field_that_holds_no_text_is_named(tmp_path: Path) -> None:
    lines = tmp_path / "ids.jsonl"
    lines.write_text('{"text": "fine"}\n{"text": [1, 2]}\n')
    with pytest.raises(DocumentError, match=r"document 1 \(line 2 of .*ids\.jsonl\) is a list"):
        Documents(lines, field="text", tokenizer=byte_tokens, cache_dir=tmp_path).lengths  # noqa: B018
    with pytest.raises(DocumentError, match=r"document 1 is a list: \[3\], not text \(a str\)"):
        Documents(["fine", [3]], tokenizer=byte_tokens).lengths  # noqa: B018
    with pytest.raises(DocumentFieldError, match=r"document 0 has no field 'text'; .*\['body'\]"):
        Documents([{"body": "x"}], field="text", tokenizer=byte_tokens).lengths  # noqa: B018
    nulls = tmp_path / "nulls.parquet"
    pq.write_table(pa.table({"text": pa.array(["a", None], pa.string())}), nulls)
    with pytest.raises(DocumentError, match=r"document 1 \(in .*nulls\.parquet\) is null"):
        Documents(nulls, field="text", tokenizer=byte_tokens, cache_dir=tmp_path).lengths  # noqa: B018


def test_a_column_of_ids_is_no_text_column(tmp_path: Path) -> None:
    import datasets

    ids = pa.table({"tokens": pa.array([[1, 2], [3]], pa.list_(pa.int32()))})
    pq.write_table(ids, tmp_path / "ids.parquet")
    match = r"Column 'tokens' of .* is of type list<\w+: int32>, not text \(a string column\)"
    for data in (tmp_path / "ids.parquet", datasets.Dataset(ids)):
        with pytest.raises(DocumentFieldError, match=match) as raised:
            Documents(data, tokenizer=byte_tokens, cache_dir=tmp_path)
        assert raised.value.field == "tokens"
    assert Documents(tmp_path / "ids.parquet", cache_dir=tmp_path).lengths.tolist() == [2, 1]


def test_bad_tokenizer_arguments_are_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"tokenizer must be a callable .*got str: 'gpt2'"):
        Documents(["a"], tokenizer="gpt2")  # pyright: ignore[reportArgumentType]
    given: dict[str, Any]
    for given in ({"tokenizer_name": "gpt2"}, {"append_eos": 0}):
        with pytest.raises(ValueError, match=r"is for text tokenized on the way"):
            Documents([[1]], **given)
    with pytest.raises(TypeError, match=r"append_eos must be an int"):
        Documents(["a"], tokenizer=byte_tokens, append_eos=True)
    for eos in (-1, 2**31):
        with pytest.raises(ValueError, match=r"append_eos must be an int in \[0, 2147483647\]"):
            Documents(["a"], tokenizer=byte_tokens, append_eos=eos)
    with pytest.raises(ValueError, match=r"tokenizer_name must not be empty"):
        Documents(["a"], tokenizer=byte_tokens, tokenizer_name="")
    np.save(tmp_path / "flat.npy", np.array([1, 2, 0], np.int32))
    with pytest.raises(ValueError, match=r"flat\.npy is a flat token file, which holds token ids"):
        Documents(tmp_path / "flat.npy", eos_id=0, tokenizer=byte_tokens, cache_dir=tmp_path)
    path = write_text(tmp_path / "t.jsonl")
    with pytest.raises(ValueError, match=r"data\[0\] is '.*t\.jsonl', the path of a file, but"):
        Documents([str(path)], field="text", tokenizer=byte_tokens)


def _token_lines(documents: list[list[int]]) -> bytes:
    lines = [json.dumps({"tokens": tokens}) for tokens in documents]
    lines.insert(1, "")
    return ("\n".join(lines) + "\n").encode()


IDS = [[5, 6, 7], [], [70_000, 1], [9] * 40, [3]]


@pytest.mark.parametrize("name", ["ids.jsonl.gz", "ids.json.gz", "ids.jsonl.zst", "IDS.JSONL.ZST"])
def test_compressed_json_lines_are_converted_in_one_pass_and_refused_by_position(
    name: str, tmp_path: Path
) -> None:
    data = _token_lines(IDS)
    path = tmp_path / name
    compressed = gzip.compress(data) if name.endswith("gz") else zstandard.compress(data)
    path.write_bytes(compressed)
    (tmp_path / "ids.jsonl").write_bytes(data)
    plain = Documents(tmp_path / "ids.jsonl", cache_dir=tmp_path / "c")
    documents = Documents(path, cache_dir=tmp_path / "c")
    assert len(documents) == len(plain) == len(IDS)
    assert documents.lengths.tolist() == plain.lengths.tolist()
    store = write_documents(documents, tmp_path / "store")
    assert [d.tolist() for d in store.read(np.arange(len(store)))] == IDS
    assert store.lengths.tolist() == plain.lengths.tolist()
    fresh = Documents(path, cache_dir=tmp_path / "fresh")  # lengths come with the tokens
    assert write_documents(fresh, tmp_path / "store2").lengths.tolist() == [3, 0, 2, 40, 1]
    refusal = r"is (gzip|zstd)-compressed, so its documents are read in order only.*write_doc"
    for read in (lambda: documents[0], lambda: documents.read([4, 1])):
        with pytest.raises(DocumentFormatError, match=refusal) as raised:
            read()
        assert raised.value.path == str(path)


def test_damaged_and_misnamed_compressed_files_are_named(tmp_path: Path) -> None:
    bad = _token_lines([[1], [2]]).replace(b'{"tokens": [2]}', b'{"tokens": [2]')
    (tmp_path / "bad.jsonl.gz").write_bytes(gzip.compress(bad))
    with pytest.raises(DocumentError, match=r"document 1 \(line 3 of .*bad\.jsonl\.gz\) is not"):
        Documents(tmp_path / "bad.jsonl.gz", cache_dir=tmp_path).lengths  # noqa: B018
    whole = gzip.compress(_token_lines([[1]] * 500))
    (tmp_path / "cut.jsonl.gz").write_bytes(whole[: len(whole) // 2])
    (tmp_path / "plain.jsonl.gz").write_bytes(_token_lines([[1]]))
    for name in ("cut.jsonl.gz", "plain.jsonl.gz"):
        with pytest.raises(DocumentFormatError, match=rf"{name} is not a whole gzip stream"):
            Documents(tmp_path / name, cache_dir=tmp_path)
    (tmp_path / "zipped.jsonl").write_bytes(zstandard.compress(_token_lines([[1]])))
    with pytest.raises(DocumentFormatError, match=r"zstd-compressed: .* end in \.jsonl\.zst"):
        Documents(tmp_path / "zipped.jsonl", cache_dir=tmp_path)
