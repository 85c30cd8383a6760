"""Documents in a Parquet file: one list-of-integers column, read by row group.

The index is the row groups' boundaries (from the file's metadata) and, unless the caller
passed lengths, each document's length: the field's column read one row group at a time
and its list offsets differenced. A read decodes only the row groups that hold the
documents asked for, only the field's column, each once; decoded groups stay in a
per-process cache of 256 MiB (cleared by `datarax.clear_caches`), so later reads from the
same groups decode nothing again, and each process keeps its files open. A string column
read with a tokenizer (`ParquetText`) keeps its groups' strings in a cache of its own
and tokenizes only the documents asked for. Imported only when a Parquet file is given
(it imports pyarrow).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from datarax._caches import BoundedCache
from datarax.errors import DocumentFormatError
from datarax.pipeline.documents._arrow import (
    check_column,
    check_text_column,
    copies,
    list_lengths,
    split_documents,
)
from datarax.pipeline.documents._index import Index, IndexedFile
from datarax.pipeline.documents._storage import Stamp, is_url, open_binary, open_ranges
from datarax.pipeline.documents._text import Text, TextFile, text_of

# (path, stamp, field, row group) -> (flat tokens, offsets): decoded row groups, up to
# 256 MiB in each process, so that a file of that size is decoded once, however its
# documents are shuffled.
_decoded: BoundedCache[tuple[np.ndarray, np.ndarray]] = BoundedCache(
    "decoded Parquet row groups", maxsize=65_536, maxbytes=256 << 20
)
# (path, stamp, field, row group) -> the column of text, as Arrow decoded it: a file whose
# field holds text keeps its strings, and tokenizes the documents read.
_decoded_text: BoundedCache[pa.ChunkedArray] = BoundedCache(
    "decoded Parquet row groups of text", maxsize=65_536, maxbytes=256 << 20
)
# (process, thread for a URL, path, stamp) -> the open file, its footer parsed once.
_opened: BoundedCache[pq.ParquetFile] = BoundedCache("open Parquet files", maxsize=64)


def read_row_group(file: pq.ParquetFile, group: int, field: str) -> pa.ChunkedArray:
    """Column `field` of row group `group` of `file`, decoded."""
    return file.read_row_group(group, columns=[field]).column(0)


# (process, path, stamp) -> a remote file's footer, parsed once in each process.
_footers: BoundedCache[pq.FileMetaData] = BoundedCache("Parquet footers", maxsize=1024)
_footer_lock = threading.Lock()


def parquet_file(path: str, stamp: Stamp, *, in_order: bool = False) -> pq.ParquetFile:
    """`path` (as it was at `stamp`) opened by pyarrow: a URL as a file whose reads are
    ranged requests for what they ask (or, read `in_order`, blocks of 8 MiB), its footer
    fetched once in each process."""
    if not is_url(path):
        return pq.ParquetFile(path)
    if in_order:
        return pq.ParquetFile(open_binary(path))
    key = (os.getpid(), path, stamp)
    with _footer_lock:  # one thread fetches a footer; the others wait for it
        footer = _footers.get(key)
        file = pq.ParquetFile(open_ranges(path, int(stamp[0])), metadata=footer)
        if footer is None:
            _footers.put(key, file.metadata)
    return file


class ParquetFile(IndexedFile):
    """A Parquet file's documents, read by row group."""

    kind = "parquet"

    @property
    def count(self) -> int:
        return int(self.index["boundaries"][-1])

    def _compute(self, with_lengths: bool) -> Index:
        try:
            opened = parquet_file(self.path, self.stamp)
        except (pa.ArrowException, OSError) as error:
            raise DocumentFormatError(
                f"{self.path} is not a Parquet file pyarrow can read ({error}): it may be "
                "empty, cut short or another format.",
                path=self.path,
            ) from None
        with opened as file:
            self._check_column(file.schema_arrow)
            rows = [file.metadata.row_group(g).num_rows for g in range(file.num_row_groups)]
            boundaries = np.zeros(len(rows) + 1, np.int64)
            np.cumsum(rows, out=boundaries[1:])
            index = {"boundaries": boundaries}
            if with_lengths:
                parts = [np.zeros(0, np.int64)]
                for group in range(len(rows)):
                    documents = np.arange(boundaries[group], boundaries[group + 1]) + self.first
                    column = read_row_group(file, group, self.field)
                    parts.append(list_lengths(column, documents, self.path))
                index["lengths"] = np.concatenate(parts)
        return index

    def _check_column(self, schema: pa.Schema) -> None:
        """Raises DocumentFieldError where the field is no column of lists of integers."""
        check_column(schema, self.field, self.path, f"the file {self.path}")

    def _file(self) -> pq.ParquetFile:
        """This file, opened once in each process (and thread, for a URL)."""
        # A remote file is read through a Python file object, one a thread.
        thread = threading.get_ident() if is_url(self.path) else 0
        opened = (os.getpid(), thread, self.path, self.stamp)
        file = _opened.get(opened)
        if file is None:
            file = parquet_file(self.path, self.stamp)
            _opened.put(opened, file)
        return file

    def _group(self, group: int) -> tuple[np.ndarray, np.ndarray]:
        """Row group `group`'s tokens and offsets, decoded now or a moment ago."""
        key = (self.path, self.stamp, self.field, group)
        decoded = _decoded.get(key)
        if decoded is None:
            start, stop = self.index["boundaries"][group : group + 2]
            column = read_row_group(self._file(), group, self.field)
            decoded = split_documents(column, np.arange(start, stop) + self.first, self.path)
            _decoded.put(key, decoded)
        return decoded

    def _in_order(self, start: int, stop: int) -> Iterator[tuple[int, int, pa.ChunkedArray]]:
        """(first document, last + 1, the field's column) of each row group that holds
        documents ``[start, stop)``, in order, decoded and not kept."""
        boundaries = self.index["boundaries"]
        first = int(np.searchsorted(boundaries, start, side="right")) - 1
        with parquet_file(self.path, self.stamp, in_order=True) as file:
            for group in range(first, len(boundaries) - 1):
                low, high = int(boundaries[group]), int(boundaries[group + 1])
                if low >= stop:
                    break
                yield low, high, read_row_group(file, group, self.field)

    def stream(self, start: int, stop: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Documents ``[start, stop)`` of this file in order, a row group at a time, as
        (tokens back to back, lengths); the groups are decoded and not kept."""
        for low, high, column in self._in_order(start, stop):
            documents = np.arange(low, high) + self.first
            values, offsets = split_documents(column, documents, self.path)
            begin, end = max(start, low) - low, min(stop, high) - low
            yield values[offsets[begin] : offsets[end]], np.diff(offsets[begin : end + 1])

    def pieces(self, local: np.ndarray) -> list[np.ndarray]:
        """Positions in `local` grouped by row group: what one request reads."""
        groups = np.searchsorted(self.index["boundaries"], local, side="right") - 1
        return [np.flatnonzero(groups == group) for group in np.unique(groups)]

    def _read(self, local: np.ndarray) -> list[np.ndarray]:
        boundaries = self.index["boundaries"]
        groups = np.searchsorted(boundaries, local, side="right") - 1
        documents: list[np.ndarray] = [np.empty(0, np.int64)] * len(local)
        for group in np.unique(groups):
            values, offsets = self._group(int(group))
            positions = np.flatnonzero(groups == group)
            within = local[positions] - boundaries[group]
            for position, document in zip(positions, copies(values, offsets, within), strict=True):
                documents[position] = document
        return documents


class ParquetText(TextFile, ParquetFile):
    """A Parquet file whose field is a string column, tokenized when read. A read decodes
    the row groups that hold the documents asked for and keeps their strings (in
    ``_decoded_text``), then tokenizes only the documents asked for."""

    kind = "parquet-text"  # its own index entry: made once the column is checked as text

    def _check_column(self, schema: pa.Schema) -> None:
        check_text_column(schema, self.field, self.path, f"the file {self.path}")

    def _compute(self, with_lengths: bool) -> Index:
        return super()._compute(False)

    def _texts(self, start: int, stop: int) -> Iterator[Text]:
        for low, high, column in self._in_order(start, stop):
            begin, end = max(start, low), min(stop, high)
            values = column.slice(begin - low, end - begin).to_pylist()
            for k, value in enumerate(values, start=self.first + begin):
                yield text_of(value, k, self.field, self.path), k, self.path, ""

    def _strings(self, group: int) -> pa.ChunkedArray:
        """Row group `group`'s column of text, decoded now or a moment ago."""
        key = (self.path, self.stamp, self.field, group)
        column = _decoded_text.get(key)
        if column is None:
            column = read_row_group(self._file(), group, self.field)
            _decoded_text.put(key, column)
        return column

    def _read(self, local: np.ndarray) -> list[np.ndarray]:
        boundaries = self.index["boundaries"]
        groups = np.searchsorted(boundaries, local, side="right") - 1
        documents = []
        for k, group in zip(local.tolist(), groups.tolist(), strict=True):
            value = self._strings(group)[k - int(boundaries[group])].as_py()
            index = self.first + k
            text = text_of(value, index, self.field, self.path)
            documents.append(self.text.tokens(text, index, self.path))
        return documents
