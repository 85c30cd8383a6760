"""`Documents`: token documents of any length, from files, a Hugging Face dataset or a
sequence, as read-only 1-D integer arrays, with every document's length known up front.

Packing and mixing plan from lengths alone, so the lengths are read once, without
turning tokens into Python objects where the format allows, and the documents are read
later, by index, as few as asked for.
"""

from __future__ import annotations

import numbers
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from datarax._validate import check_str
from datarax.errors import DocumentError
from datarax.pipeline._document_files import FileDocuments, is_files, resolve_paths
from datarax.pipeline._document_index import default_cache_dir
from datarax.pipeline._document_values import (
    as_document,
    check_count,
    check_lengths,
    read_only,
)


class _Backend(Protocol):
    @property
    def lengths(self) -> np.ndarray: ...

    def read(self, indices: np.ndarray) -> list[np.ndarray]: ...


class SequenceDocuments:
    """The documents of anything with ``__len__`` and ``__getitem__`` (a list, a Grain
    data source), each item 1-D integers or a dict holding them under `field`."""

    def __init__(self, data: Any, field: str, lengths: np.ndarray | None):
        self.data, self.field = data, field
        if lengths is None:
            lengths = np.fromiter(
                (len(as_document(data[i], i, field)) for i in range(len(data))),
                np.int64,
                count=len(data),
            )
        else:
            check_count(lengths, len(data), f"the {type(data).__name__}")
        self.lengths = read_only(lengths)

    def read(self, indices: np.ndarray) -> list[np.ndarray]:
        asked = [int(i) for i in indices]
        getitems: Callable[[list[int]], Sequence[Any]] | None = getattr(
            self.data, "__getitems__", None
        )
        items = list(getitems(asked)) if callable(getitems) else [self.data[i] for i in asked]
        return [as_document(item, i, self.field) for item, i in zip(items, asked, strict=True)]


def _is_dataset(data: Any) -> bool:
    """Whether `data` is a `datasets.Dataset`, asked only if `datasets` is imported."""
    datasets = sys.modules.get("datasets")
    return datasets is not None and isinstance(data, getattr(datasets, "Dataset", ()))


class Documents:
    """Variable-length token documents: ``docs[i]`` is a read-only 1-D integer array and
    ``docs.lengths`` every document's token count, known before any document is read.

    `data` is one of:

    - a Parquet file (``.parquet``: a column `field` of lists of integers; needs the
      ``parquet`` extra), a JSON Lines file (``.jsonl`` or ``.json``: one JSON object a
      line, its tokens under `field`; blank lines are skipped), a glob pattern (its
      matches sorted), or a list of these, formats mixed as you like: documents are
      numbered across the files in the order given;
    - a Hugging Face ``datasets.Dataset`` with a column `field` of lists of integers;
    - anything else with ``__len__`` and ``__getitem__`` (a list, a Grain data source)
      whose items are 1-D integer arrays, lists of ints, or dicts holding them under
      `field`.

    Lengths are read once: from the list offsets of Parquet row groups and of a dataset's
    Arrow table (no token becomes a Python object), in one pass over a JSON Lines file or
    a sequence, every document checked. Pass `lengths` where you know them and that
    reading is skipped. Each file's index (lengths, where each document lies) is cached in
    `cache_dir` under a key of the file's absolute path, size, modification time
    (``st_mtime_ns``) and `field`, so a changed file is indexed afresh by the next
    `Documents`; a `Documents` built before the change raises `SourceFileChangedError`
    naming the file when it reads from it. An unwritable `cache_dir` only means no cache.

    Documents keep their dtype: a Parquet column's value type, int64 from JSON Lines, the
    items' own from a sequence (a list of Python ints gives int64). Empty documents stay,
    with length 0 (a packer skips them). Pickled for worker processes, a `Documents` over
    files holds only the paths, field, stamps and cache folder (and `lengths` where you
    passed them): a worker opens the files itself and reloads the index from the cache.

    Args:
        data: the documents, as above.
        field: the column or key that holds the token ids.
        lengths: each document's token count, when known; checked against the documents
            when they are read.
        cache_dir: where file indexes are cached; by default
            ``$XDG_CACHE_HOME/datarax-sharding/documents`` (``~/.cache`` without it).

    Raises:
        DocumentFileNotFoundError: a path or glob pattern names no file.
        DocumentFormatError: a file's extension is not one of the above.
        DocumentFieldError: a file or dataset has no column `field`, or it is not a list
            of integers; or a record lacks it.
        DocumentError: a document is not 1-D integers (its index named).
        TypeError, ValueError: `data` is none of the above; `lengths` is not a 1-D array
            of non-negative integers, one per document.

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
    ):
        check_str("field", field)
        self.field = field
        given = None if lengths is None else check_lengths(lengths)
        folder = default_cache_dir() if cache_dir is None else os.fspath(cache_dir)
        self.cache_dir = os.path.abspath(os.path.expanduser(folder))
        self._backend: _Backend
        if is_files(data):
            self._backend = FileDocuments(resolve_paths(data), field, self.cache_dir, given)
        elif _is_dataset(data):
            from datarax.pipeline._arrow_documents import DatasetDocuments

            self._backend = DatasetDocuments(data, field, given)
        elif hasattr(data, "__len__") and hasattr(data, "__getitem__"):
            self._backend = SequenceDocuments(data, field, given)
        else:
            raise TypeError(
                f"data must be a Parquet or JSON Lines path, a glob pattern, a list of "
                f"them, a datasets.Dataset, or a sequence of token arrays, got "
                f"{type(data).__name__}."
            )

    def __len__(self) -> int:
        return len(self.lengths)

    @property
    def lengths(self) -> np.ndarray:
        """Every document's token count: int64, one entry per document, read-only."""
        return self._backend.lengths

    def __getitem__(self, index: int) -> np.ndarray:
        """Document `index` (negative counts from the end).

        Raises:
            IndexError: `index` is out of range.
        """
        if not isinstance(index, numbers.Integral) or isinstance(index, (bool, np.bool_)):
            raise TypeError(
                f"Documents are indexed by one int, got {type(index).__name__}: "
                f"{index!r:.100}; use read(indices) for several."
            )
        return self.read([int(index)])[0]

    def read(self, indices: Sequence[int] | np.ndarray) -> list[np.ndarray]:
        """Documents `indices`, in the order asked, repeats included: each file's
        documents read together (a Parquet row group decoded once for all it holds).

        Raises:
            IndexError: an index is out of range.
            DocumentError: a document is not 1-D integers, or its length differs from
                its entry in `lengths`.
            SourceFileChangedError: a file changed since this `Documents` was built.

        Example:
            >>> Documents([[1, 2], [3], [4, 5, 6]]).read(np.array([2, -3]))
            [array([4, 5, 6]), array([1, 2])]
        """
        asked = np.asarray(indices)
        if asked.ndim != 1 or (asked.dtype.kind not in "iu" and asked.size):
            raise TypeError(
                f"indices must be a 1-D sequence of ints, got dtype {asked.dtype} and shape "
                f"{asked.shape}; use docs[i] for one document."
            )
        count = len(self.lengths)
        wrong = np.flatnonzero((asked < -count) | (asked >= count))
        if wrong.size:
            raise IndexError(
                f"Document index {asked[wrong[0]]} is out of range: there are {count} "
                f"documents, so an index must be in [-{count}, {count})."
            )
        asked = asked.astype(np.int64)
        asked[asked < 0] += count
        documents = self._backend.read(asked)
        counts = np.fromiter(map(len, documents), np.int64, count=len(documents))
        odd = np.flatnonzero(counts != self.lengths[asked])
        if odd.size:
            index = int(asked[odd[0]])
            raise _length_error(index, int(counts[odd[0]]), int(self.lengths[index]))
        return documents

    def __repr__(self) -> str:
        return f"Documents({len(self)} documents, field={self.field!r})"


def _length_error(index: int, count: int, expected: int) -> DocumentError:
    return DocumentError(
        f"document {index} has {count} tokens, but lengths[{index}] is {expected}. The "
        "lengths passed must be the documents' own; leave lengths=None to read them.",
        index=index,
    )
