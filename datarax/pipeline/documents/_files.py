"""Documents in files: paths and glob patterns resolved, one index a file, documents
numbered across the files in the order given.

What a path holds, by one rule each (one list may mix them):

- a folder with a ``manifest.json``: a token store (`write_documents` writes one);
- ``PREFIX.idx``, or a ``PREFIX`` that is no file while ``PREFIX.idx`` and ``PREFIX.bin``
  are: a pair of Megatron's indexed format;
- ``.parquet`` (needs pyarrow, the ``parquet`` extra): a column of lists of token ids;
- ``.jsonl`` or ``.json``: one JSON object a line, its tokens under a field;
- ``.jsonl.gz``, ``.jsonl.zst`` (``.json`` too): the same, compressed, read in order only;
- ``.npy``, or ``.bin`` given ``dtype=``: a flat token file, documents ending with
  ``eos_id``.

A glob pattern's matches are sorted; a Megatron pair matched by both its files counts
once, and a pattern that matches no file but matches ``PATTERN.idx`` names prefixes.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any

import numpy as np

from datarax._extras import require
from datarax.errors import DocumentFileNotFoundError, DocumentFormatError
from datarax.pipeline.documents import _storage as storage
from datarax.pipeline.documents._contract import check_lengths
from datarax.pipeline.documents._flat import open_flat
from datarax.pipeline.documents._index import IndexedFile, cached_folder, entry_name
from datarax.pipeline.documents._megatron import IndexedPair
from datarax.pipeline.documents._storage import on_threads
from datarax.pipeline.documents._store import has_shards, is_store, open_store
from datarax.pipeline.documents._text import TextFile
from datarax.pipeline.documents._values import read_only

_COMPRESSED = (".jsonl.gz", ".json.gz", ".jsonl.zst", ".json.zst")  # JSON Lines, read in order
_EXTENSIONS = {".parquet": "parquet", ".jsonl": "jsonl", ".json": "jsonl", ".npy": "flat"}
_EXTENSIONS |= dict.fromkeys(_COMPRESSED, "compressed")
_READ = (
    ".parquet, .jsonl, .json, .jsonl.gz, .jsonl.zst (.json too), .npy, .bin (with dtype=), "
    ".idx, a token store's folder"
)


@dataclasses.dataclass(frozen=True)
class Found:
    """One documents file: its kind and its path (a Megatron pair's prefix)."""

    kind: str
    path: str


def is_files(data: Any) -> bool:
    """Whether `data` names files: a path, or a list or tuple whose first item is one."""
    if isinstance(data, (str, os.PathLike)):
        return True
    return (
        isinstance(data, (list, tuple)) and bool(data) and isinstance(data[0], (str, os.PathLike))
    )


def _found(path: str, raw: bool) -> Found:
    """What `path` (an existing file or folder) holds, by the rules of this module."""
    lower = path.lower()
    if storage.isdir(path):
        if is_store(path):
            return Found("store", path)
        if has_shards(path):
            raise DocumentFileNotFoundError(
                f"{path} holds shards but no manifest.json: a token store whose writing was "
                "cut short. Write it again with write_documents(..., replace=True).",
                pattern=path,
            )
        raise DocumentFileNotFoundError(
            f"{path} is a folder, not a documents file or a token store; pass a glob such as "
            f"{storage.join(path, '*.parquet')!r} or a list of its files.",
            pattern=path,
        )
    if not storage.is_url(path) and not os.path.isfile(path):
        raise DocumentFormatError(
            f"{path} is not a regular file (a FIFO, a socket or a device): Documents reads "
            "a file by seeking in it; write the documents to a file first.",
            path=path,
        )
    if lower.endswith(".idx"):
        return Found("megatron", path[: -len(".idx")])
    if lower.endswith(".bin") and not raw:
        prefix = path[: -len(".bin")]
        hint = (
            f"it is half of a Megatron pair: pass its prefix {prefix!r}"
            if storage.isfile(prefix + ".idx")
            else "pass dtype= (e.g. np.uint16) and eos_id= to read it as a flat token file"
        )
        raise DocumentFormatError(f"{path} is raw tokens: {hint}.", path=path)
    kind = "flat" if lower.endswith(".bin") else _kind_of(lower)
    if kind is None:
        raise DocumentFormatError(
            f"{path} is not a file Documents reads: its extension is none of {_READ}. "
            "Convert it to Parquet, JSON Lines or a token store, or pass the documents as a "
            "list of arrays.",
            path=path,
        )
    return Found(kind, path)


def names_file(text: str) -> bool:
    """Whether `text` ends as the name of a documents file does.

    Example:
        >>> names_file("gs://bucket/part-0.jsonl.gz"), names_file("a cat sat")
        (True, False)
    """
    return text.lower().endswith((*_EXTENSIONS, ".bin", ".idx"))


def _kind_of(lower: str) -> str | None:
    """The kind of a file by the end of its name (lower case), None for none."""
    return next((kind for end, kind in _EXTENSIONS.items() if lower.endswith(end)), None)


def _prefix(path: str) -> Found | None:
    """The Megatron pair of prefix `path` (no file itself), if either of its files exists.

    Raises:
        DocumentFileNotFoundError: only one of the two files exists.
    """
    have = [storage.isfile(path + suffix) for suffix in (".idx", ".bin")]
    if not any(have):
        return None
    if not all(have):
        missing = path + (".bin" if have[0] else ".idx")
        raise DocumentFileNotFoundError(
            f"{path} names a Megatron pair, but {missing} is missing: a pair needs both its "
            ".idx (the index) and its .bin (the tokens).",
            pattern=path,
        )
    return Found("megatron", storage.absolute(path))


def _matches(item: Any, number: int, raw: bool) -> list[Found]:
    if not isinstance(item, (str, os.PathLike)):
        raise TypeError(
            f"data[{number}] is of type {type(item).__name__}, but data[0] is a path: a list of "
            "documents files must hold only paths and glob patterns."
        )
    pattern = os.fspath(item)
    remote = storage.is_url(pattern)
    pattern = pattern if remote else os.path.expanduser(storage.local(pattern))
    magic = storage.has_magic(pattern)
    if storage.exists(pattern):
        return [_found(storage.absolute(pattern), raw)]
    prefix = None if magic else _prefix(pattern)
    if prefix is not None:
        return [prefix]
    matched = storage.glob(pattern) if magic else []
    if not matched and magic:
        matched = storage.glob(pattern + ".idx")
    paired = {path[: -len(".idx")] for path in matched if path.lower().endswith(".idx")}
    matched = [
        path
        for path in matched
        if (storage.isfile(path) or is_store(path))
        and not (path.lower().endswith(".bin") and path[: -len(".bin")] in paired)
    ]
    if not matched:
        what = "matches no file" if magic else "does not exist"
        where = "" if remote else f" (looked from {os.getcwd()})"
        text = not names_file(pattern)
        hint = (
            " If it is a text, not a path: tokenize it first, Documents reads token ids."
            if text
            else ""
        )
        raise DocumentFileNotFoundError(
            f"No documents file: {pattern!r} {what}{where}. Pass the "
            "path of a .parquet, .jsonl or .npy file, a token store's folder, a Megatron "
            f"prefix, a glob pattern, or a list of them.{hint}",
            pattern=pattern,
        )
    return [_found(storage.absolute(path), raw) for path in matched]


def resolve_paths(data: str | os.PathLike[str] | Sequence[Any], raw: bool = False) -> list[Found]:
    """The files `data` names, in order (a glob's matches sorted); with `raw`, ``.bin``
    files are flat token files (``dtype=`` was given).

    Raises:
        DocumentFileNotFoundError: a path or pattern names no file.
        DocumentFormatError: a file is of no kind `Documents` reads.
    """
    items = [data] if isinstance(data, (str, os.PathLike)) else list(data)
    return [found for number, item in enumerate(items) for found in _matches(item, number, raw)]


Part = IndexedFile | IndexedPair


@dataclasses.dataclass(frozen=True)
class FileOptions:
    """How files are read: the field of Parquet and JSON Lines, the cache, and the dtype and
    end-of-text id of flat token files."""

    field: str
    cache_dir: str
    dtype: Any = None
    eos_id: Any = None
    text: Any = None  # the `Tokenizing` of files whose field holds text


def _open(found: Found, options: FileOptions, first: int) -> list[Part]:
    if found.kind == "store":
        return list[Part](open_store(found.path, options.cache_dir))
    if found.kind == "megatron":
        return [IndexedPair(found.path + ".idx", found.path + ".bin", cache_dir=options.cache_dir)]
    if found.kind == "flat":
        if options.eos_id is None:
            raise ValueError(
                f"{found.path} is a flat token file: pass eos_id=, the end-of-text id that "
                "ends each document in it."
            )
        return [open_flat(found.path, options.dtype, options.eos_id, options.cache_dir)]
    if found.kind == "parquet":
        require("pyarrow", "parquet", "datarax.pipeline.Documents over Parquet files")
        from datarax.pipeline.documents._parquet import ParquetFile, ParquetText

        kind: type[IndexedFile] = ParquetFile
        text: type[TextFile] = ParquetText
    elif found.kind == "compressed":
        from datarax.pipeline.documents._compressed import CompressedLines, CompressedText

        kind, text = CompressedLines, CompressedText
    else:
        from datarax.pipeline.documents._jsonl import JsonLinesFile, JsonLinesText

        kind, text = JsonLinesFile, JsonLinesText
    if options.text is not None:
        return [text(found.path, options.field, options.cache_dir, first=first, text=options.text)]
    return [kind(found.path, options.field, options.cache_dir, first=first)]


def _check_options(found: list[Found], options: FileOptions) -> None:
    """Raises ValueError where `dtype` or `eos_id` were given for files without use for
    them, or a tokenizer for files of token ids."""
    kinds = {item.kind for item in found}
    if options.eos_id is not None and "flat" not in kinds:
        raise ValueError(
            "eos_id= is for flat token files (.npy, or .bin with dtype=), and none is given; "
            "leave it out."
        )
    if options.dtype is not None and not any(
        item.kind == "flat" and item.path.lower().endswith(".bin") for item in found
    ):
        raise ValueError(
            "dtype= is for raw .bin token files, and none is given (other files say their "
            "dtype); leave it out."
        )
    held = {"store": "a token store", "megatron": "a Megatron pair", "flat": "a flat token file"}
    ids = [item for item in found if item.kind in held]
    if options.text is not None and ids:
        raise ValueError(
            f"tokenizer= is for files whose field holds text (Parquet, JSON Lines, compressed "
            f"JSON Lines), but {ids[0].path} is {held[ids[0].kind]}, which holds token ids: "
            "leave tokenizer= out to read it."
        )


class FileDocuments:
    """The documents of several files, numbered across them in order.

    Pickled, it holds each file's path, options and stamp and where each file's documents
    start; a process that unpickles it maps or reloads what it reads.
    """

    def __init__(
        self,
        found: list[Found],
        options: FileOptions,
        lengths: np.ndarray | None,
        threads: int = 1,
    ):
        _check_options(found, options)
        self.cache_dir, self.threads = options.cache_dir, threads
        self.store = found[0].path if [item.kind for item in found] == ["store"] else None
        self.parts: list[Part] = []
        starts = [0]
        for item in found:
            for part in _open(item, options, starts[-1]):
                self.parts.append(part)
                starts.append(starts[-1] + part.count)
        self.starts = np.array(starts, np.int64)
        self.given = None if lengths is None else check_lengths(lengths, count=starts[-1])
        if self.given is not None:
            for part, start, stop in zip(self.parts, starts, starts[1:], strict=False):
                if isinstance(part, IndexedFile):
                    part.given = self.given[start:stop]
        self._lengths: np.ndarray | None = None

    @property
    def count(self) -> int:
        return int(self.starts[-1])

    @property
    def has_lengths(self) -> bool:
        """Whether the lengths are known without reading the documents."""
        return self._lengths is not None or all(part.has_lengths for part in self.parts)

    @property
    def lengths(self) -> np.ndarray:
        if self._lengths is None:
            self._lengths = self._all_lengths()
        return self._lengths

    def _all_lengths(self) -> np.ndarray:
        if self.given is not None:
            return self.given
        if len(self.parts) == 1:
            return read_only(self.parts[0].lengths)
        if self.parts and all(isinstance(part, IndexedPair) for part in self.parts):
            return self._mapped_lengths()
        pieces = [np.zeros(0, np.int64), *(part.lengths for part in self.parts)]
        return read_only(np.concatenate(pieces))

    def _mapped_lengths(self) -> np.ndarray:
        """Every pair's lengths in one array, written once to the cache and mapped."""
        pairs = [part for part in self.parts if isinstance(part, IndexedPair)]

        def make(folder: str) -> None:
            target = np.lib.format.open_memmap(
                os.path.join(folder, "lengths.npy"), "w+", np.int32, (int(self.starts[-1]),)
            )
            for pair, start in zip(pairs, self.starts, strict=False):
                target[start : start + pair.count] = pair.lengths
            target.flush()
            del target

        key = "\0".join(f"{pair.idx_path}\0{pair.stamps}" for pair in pairs)
        names = [pair.idx_path for pair in pairs]
        folder = cached_folder(self.cache_dir, entry_name("lengths", *names), key, make)
        return np.asarray(np.load(os.path.join(folder, "lengths.npy"), mmap_mode="r"))

    def plan_home(self) -> tuple[str, list[str]] | None:
        """What identifies these documents' lengths (every file's path, stamps and field)
        and the folders their packing plans are kept in (the store's ``plans`` first, when
        they are one store); None where the lengths were passed, not read from the files."""
        if self.given is not None or not self.parts:
            return None
        identity = "\0".join(
            f"{part.idx_path}\0{part.stamps}"
            if isinstance(part, IndexedPair)
            else f"{part.path}\0{part.stamp}\0{part.field}"
            for part in self.parts
        )
        store = self.store
        roots = [] if store is None or storage.is_url(store) else [os.path.join(store, "plans")]
        return identity, [*roots, os.path.join(self.cache_dir, "plans")]

    def stream(self, start: int, stop: int, chunk: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Documents ``[start, stop)`` in order, as (tokens back to back, lengths), at most
        `chunk` documents at a time (a Parquet file's a row group at a time)."""
        for part, low, high in zip(self.parts, self.starts, self.starts[1:], strict=False):
            begin, end = max(start, int(low)) - int(low), min(stop, int(high)) - int(low)
            if begin >= end:
                continue
            stream: Any = getattr(part, "stream", None)
            if stream is not None:
                yield from stream(begin, end)
                continue
            for at in range(begin, end, chunk):
                documents = part.read(np.arange(at, min(at + chunk, end)))
                yield _joined(documents), np.fromiter(map(len, documents), np.int64)

    def read(
        self, indices: np.ndarray, spans: tuple[np.ndarray, np.ndarray] | None = None
    ) -> list[np.ndarray]:
        """Documents `indices` (with `spans`, (starts, sizes): a piece of each): a local
        file's together (its ranges asked of the kernel at once), a remote file's on
        `threads` threads, a request a document (a Parquet row group a request), so that
        each waits for the network beside the others. Only Megatron pairs (stores, flat
        files) read pieces alone; other files' documents are read whole and cut."""
        owners = np.searchsorted(self.starts, indices, side="right") - 1
        documents: list[np.ndarray] = [np.empty(0, np.int64)] * len(indices)
        calls: list[tuple[np.ndarray, Callable[[], list[np.ndarray]]]] = []
        remote = False
        for owner in np.unique(owners):
            positions = np.flatnonzero(owners == owner)
            local, part = indices[positions] - self.starts[owner], self.parts[owner]
            pieces: Any = getattr(part, "pieces", None)
            if not _is_remote(part):
                groups = [np.arange(len(local))]
            else:
                remote = True
                groups = pieces(local) if pieces else [np.array([k]) for k in range(len(local))]
            for group in groups:
                at = positions[group]
                piece = None if spans is None else (spans[0][at], spans[1][at])
                calls.append((at, partial(_read_part, part, local[group], piece)))
        made = on_threads([call for _, call in calls], self.threads if remote else 1)
        for (positions, _), read in zip(calls, made, strict=True):
            for position, document in zip(positions, read, strict=True):
                documents[position] = document
        return documents

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_lengths": None}


def _read_part(
    part: Part, local: np.ndarray, spans: tuple[np.ndarray, np.ndarray] | None
) -> list[np.ndarray]:
    """Documents `local` of `part`, or with `spans` a piece of each."""
    if spans is None:
        return part.read(local)
    if isinstance(part, IndexedPair):
        return part.read(local, spans)
    read = part.read(local)
    return [
        d[a : a + n] for d, a, n in zip(read, spans[0].tolist(), spans[1].tolist(), strict=True)
    ]


def _is_remote(part: Part) -> bool:
    return storage.is_url(part.bin_path if isinstance(part, IndexedPair) else part.path)


def _joined(documents: list[np.ndarray]) -> np.ndarray:
    """`documents` back to back (an empty int64 array for none)."""
    return np.concatenate(documents) if documents else np.zeros(0, np.int64)
