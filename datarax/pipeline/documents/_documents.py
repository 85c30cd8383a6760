"""`Documents`: token documents of any length, from files, a token store, a Hugging Face
dataset or a sequence, as read-only 1-D integer arrays, with every document's length
known up front.

Packing and mixing plan from lengths alone, so the lengths are read once, without
turning tokens into Python objects where the format allows (a token store's are mapped
from its index, not read at all), and the documents are read later, by index, as few as
asked for.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any, Protocol

import numpy as np

from datarax._validate import check_int, check_str
from datarax.errors import DocumentError
from datarax.pipeline.documents._contract import (
    CheckedLengths,
    check_lengths,
    many_indices,
    one_index,
)
from datarax.pipeline.documents._files import FileDocuments, FileOptions, is_files, resolve_paths
from datarax.pipeline.documents._index import default_cache_dir
from datarax.pipeline.documents._storage import on_threads
from datarax.pipeline.documents._values import as_document

READ_THREADS = 16  # a remote file's requests (or a sequence's items) read at once, by default


class _Backend(Protocol):
    @property
    def count(self) -> int: ...

    @property
    def lengths(self) -> np.ndarray: ...

    def read(self, indices: np.ndarray) -> list[np.ndarray]: ...


class SequenceDocuments:
    """The documents of anything with ``__len__`` and ``__getitem__`` (a list, a Grain
    data source), each item 1-D integers or a dict holding them under `field`."""

    def __init__(self, data: Any, field: str, lengths: np.ndarray | None, threads: int = 1):
        if isinstance(data, Mapping):
            raise TypeError(
                f"data is a {type(data).__name__} (keys {list(map(str, data))[:5]}), not a "
                "sequence of documents: pass the column that holds the token ids, e.g. "
                "Documents(data['tokens'])."
            )
        self.data, self.field = data, field
        # In memory, an item is there at once: a thread's hand-off would only slow it.
        self.threads = 1 if isinstance(data, (list, tuple, np.ndarray)) else threads
        if lengths is None:
            lengths = np.fromiter(
                (len(as_document(self._item(i), i, field)) for i in range(len(data))),
                np.int64,
                count=len(data),
            )
        self.lengths = check_lengths(lengths, count=len(data))
        self.count = len(self.lengths)

    def _item(self, index: int) -> Any:
        try:
            return self.data[index]
        except (KeyError, IndexError) as error:
            raise TypeError(
                f"data[{index}] raised {type(error).__name__} ({error}), but data has "
                f"{len(self.data)} items: Documents reads a sequence by position, 0 to "
                "len - 1. A pandas Series is read by label: pass series.to_list()."
            ) from None

    def read(self, indices: np.ndarray) -> list[np.ndarray]:
        asked = [int(i) for i in indices]
        getitems: Callable[[list[int]], Sequence[Any]] | None = getattr(
            self.data, "__getitems__", None
        )
        if callable(getitems):
            items = list(getitems(asked))
        else:
            items = on_threads([partial(self._item, i) for i in asked], self.threads)
        return [as_document(item, i, self.field) for item, i in zip(items, asked, strict=True)]


def _is_dataset(data: Any) -> bool:
    """Whether `data` is a `datasets.Dataset`, asked only if `datasets` is imported."""
    datasets = sys.modules.get("datasets")
    return datasets is not None and isinstance(data, getattr(datasets, "Dataset", ()))


class Documents(CheckedLengths):
    """Variable-length token documents: ``docs[i]`` is a read-only 1-D integer array and
    ``docs.lengths`` every document's token count, known before any document is read.

    `data` is one of:

    - a token store's folder (written by `write_documents`), a Megatron-LM indexed
      dataset by its prefix (the path to which ``.bin`` and ``.idx`` are appended, as
      Megatron and NeMo name them) or its ``.idx``, or a flat token file: a ``.npy`` file,
      or a raw ``.bin`` given `dtype`, each document ending with (and holding) `eos_id`,
      the tokens after the last one a document too. All three are read without decoding:
      the index is mapped, and a document is one read of its bytes;
    - a Parquet file (``.parquet``: a column `field` of lists of integers; needs the
      ``parquet`` extra) or a JSON Lines file (``.jsonl`` or ``.json``: one JSON object a
      line, its tokens under `field`; blank lines are skipped);
    - a glob pattern (its matches sorted; a Megatron pair matched by both of its files
      counts once, and a pattern that matches no file but matches ``PATTERN.idx`` names
      prefixes), or a list of any of these, kinds mixed as you like: documents are
      numbered across the files in the order given;
    - a Hugging Face ``datasets.Dataset`` with a column `field` of lists of integers;
    - anything else with ``__len__`` and ``__getitem__`` (a list, a Grain data source)
      whose items are 1-D integer arrays, lists of ints, or dicts holding them under
      `field`.

    Lengths are read once: from a store's or Megatron pair's index by memory map (int32,
    as the index holds them; no process keeps a copy), from the list offsets of Parquet
    row groups and of a dataset's Arrow table (no token becomes a Python object), in one
    pass over a JSON Lines file, a flat token file or a sequence, every document checked.
    Pass `lengths` where you know them and that reading is skipped (not for indexed files,
    whose lengths cost nothing). Indexes that must be computed (lengths, where each
    document lies, the lengths of several indexed files in one array) are cached in
    `cache_dir` under a key of the file's absolute path, size, modification time
    (``st_mtime_ns``) and what else they depend on (`field`, `eos_id`), so a changed file
    is indexed afresh by the next `Documents`; a `Documents` built before the change
    raises `SourceFileChangedError` naming the file when it reads from it. An unwritable
    `cache_dir` only means no cache.

    Documents keep their dtype: a store's or flat file's, a Parquet column's value type,
    int64 from JSON Lines, the items' own from a sequence (a list of Python ints gives
    int64). Empty documents stay, with length 0 (a packer skips them). Pickled for worker
    processes, a `Documents` over files holds only the paths, options, stamps and cache
    folder (and `lengths` where you passed them): a worker maps or opens the files itself.

    Args:
        data: the documents, as above.
        field: the column or key that holds the token ids (Parquet, JSON Lines, datasets,
            dicts).
        lengths: each document's token count, when known; checked against the documents
            when they are read.
        cache_dir: where computed indexes are cached; by default
            ``$XDG_CACHE_HOME/datarax-sharding/documents`` (``~/.cache`` without it).
        eos_id: the end-of-text id that ends each document of a flat token file; needed
            for them, refused for other files.
        dtype: the token dtype of a raw ``.bin`` flat token file; needed for one, refused
            for other files (which say their dtype).

    Raises:
        DocumentFileNotFoundError: a path or glob pattern names no file; a Megatron prefix
            lacks one of its two files; a folder is no store (or an interrupted one).
        DocumentFormatError: a file is of no kind above, or is not what its kind says (an
            index of another magic, version or dtype code, a ``.bin`` shorter than its
            index, a damaged manifest, a flat file whose dtype is not integers).
        DocumentFieldError: a file or dataset has no column `field`, or it is not a list
            of integers; or a record lacks it.
        DocumentError: a document is not 1-D integers (its index named).
        TypeError, ValueError: `data` is none of the above; `lengths` is not a 1-D array
            of non-negative integers, one per document; `eos_id` or `dtype` is missing,
            not wanted, or `eos_id` lies outside the dtype's range.

    Example:
        >>> docs = Documents([[5, 6, 7], np.array([8], np.int32), {"tokens": []}])
        >>> len(docs), docs.lengths
        (3, array([3, 1, 0]))
        >>> docs[1], docs.read([0, 1, 0])[2]
        (array([8], dtype=int32), array([5, 6, 7]))
    """

    def __init__(
        self,
        data: Any,
        *,
        field: str = "tokens",
        lengths: Sequence[int] | np.ndarray | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        eos_id: int | None = None,
        dtype: Any = None,
        read_threads: int = READ_THREADS,
    ):
        check_str("field", field)
        threads = check_int("read_threads", read_threads, minimum=1)
        self.field = field
        given = None if lengths is None else check_lengths(lengths)
        folder = default_cache_dir() if cache_dir is None else os.fspath(cache_dir)
        self.cache_dir = os.path.abspath(os.path.expanduser(folder))
        self._backend: _Backend
        if is_files(data):
            options = FileOptions(field, self.cache_dir, dtype, eos_id)
            found = resolve_paths(data, raw=dtype is not None)
            self._backend = FileDocuments(found, options, given, threads)
            return
        if eos_id is not None or dtype is not None:
            raise ValueError(
                "eos_id= and dtype= are for flat token files (.npy, raw .bin); the documents "
                f"here are a {type(data).__name__}: leave them out."
            )
        if _is_dataset(data):
            from datarax.pipeline.documents._arrow import DatasetDocuments

            self._backend = DatasetDocuments(data, field, given)
        elif hasattr(data, "__len__") and hasattr(data, "__getitem__"):
            self._backend = SequenceDocuments(data, field, given, threads)
        else:
            raise TypeError(
                f"data must be a documents file or token store (a path), a glob pattern, a "
                f"list of them, a datasets.Dataset, or a sequence of token arrays, got "
                f"{type(data).__name__}."
            )

    def __len__(self) -> int:
        return self._backend.count

    @property
    def lengths(self) -> np.ndarray:
        """Every document's token count: one integer entry per document (int64, or int32
        mapped from an index of Megatron's format), read-only."""
        return self._backend.lengths

    def __getitem__(self, index: int) -> np.ndarray:
        """Document `index` (negative counts from the end).

        Raises:
            TypeError: `index` is not an int.
            IndexError: `index` is out of range.
        """
        return self.read([one_index(index, len(self), "documents")])[0]

    def read(self, indices: Sequence[int] | np.ndarray) -> list[np.ndarray]:
        """Documents `indices`, in the order asked, repeats included: each file's
        documents read together (a Parquet row group decoded once for all it holds).

        Raises:
            TypeError: `indices` is not a 1-D sequence of ints.
            IndexError: an index is out of range.
            DocumentError: a document is not 1-D integers, or its length differs from
                its entry in `lengths`.
            SourceFileChangedError: a file changed since this `Documents` was built.

        Example:
            >>> Documents([[1, 2], [3], [4, 5, 6]]).read(np.array([2, -3]))
            [array([4, 5, 6]), array([1, 2])]
        """
        asked = many_indices(indices, len(self), "documents")
        documents = self._backend.read(asked)
        counts = np.fromiter(map(len, documents), np.int64, count=len(documents))
        odd = np.flatnonzero(counts != self.lengths[asked])
        if odd.size:
            index = int(asked[odd[0]])
            raise _length_error(index, int(counts[odd[0]]), int(self.lengths[index]))
        return documents

    def _stream(self, start: int, stop: int, chunk: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Documents ``[start, stop)`` in order, as (tokens back to back, lengths), at most
        `chunk` documents at a time (files: a Parquet row group at a time), each checked
        against `lengths` where they are known; files whose lengths are not read yet are
        not read twice for them.

        Raises:
            DocumentError: a document's length differs from its entry in `lengths`.
        """
        stream: Any = getattr(self._backend, "stream", None)
        if stream is None:
            yield from _read_in_order(self, start, stop, chunk)
            return
        known = self._lengths_known  # files: lengths not read yet are read here
        at = start
        for tokens, counts in stream(start, stop, chunk):
            expected = self.lengths[at : at + len(counts)] if known else counts
            odd = np.flatnonzero(counts != expected)
            if odd.size:
                k = int(odd[0])
                raise _length_error(at + k, int(counts[k]), int(expected[k]))
            at += len(counts)
            yield tokens, counts

    @property
    def _lengths_known(self) -> bool:
        """Whether `lengths` are known without a pass over the documents."""
        return getattr(self._backend, "has_lengths", True)

    def _plan_home(self) -> tuple[str, list[str]] | None:
        """Where `Packed` keeps plans of these documents (see `FileDocuments.plan_home`)."""
        home: Any = getattr(self._backend, "plan_home", None)
        return home() if home is not None else None

    def __repr__(self) -> str:
        return f"Documents({len(self)} documents, field={self.field!r})"


def _read_in_order(
    documents: Any, start: int, stop: int, chunk: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Documents ``[start, stop)`` of any documents source, `chunk` at a time, in order."""
    for at in range(start, stop, chunk):
        read = documents.read(np.arange(at, min(at + chunk, stop)))
        tokens = np.concatenate(read) if read else np.zeros(0, np.int64)
        yield tokens, np.fromiter(map(len, read), np.int64, len(read))


def _length_error(index: int, count: int, expected: int) -> DocumentError:
    return DocumentError(
        f"document {index} has {count} tokens, but lengths[{index}] is {expected}. The "
        "lengths passed must be the documents' own; leave lengths=None to read them.",
        index=index,
    )
