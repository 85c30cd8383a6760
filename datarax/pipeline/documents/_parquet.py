"""Documents in a Parquet file: one list-of-integers column, read by row group.

The index is the row groups' boundaries (from the file's metadata) and, unless the caller
passed lengths, each document's length: the field's column read one row group at a time
and its list offsets differenced. A read decodes only the row groups that hold the
documents asked for, only the field's column, each once; decoded groups stay in a
per-process cache of 256 MiB (cleared by `datarax.clear_caches`), so later reads from the
same groups decode nothing again, and each process keeps its files open. Imported only
when a Parquet file is given (it imports pyarrow).
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
from datarax.pipeline.documents._arrow import check_column, copies, list_lengths, split_documents
from datarax.pipeline.documents._index import Index, IndexedFile
from datarax.pipeline.documents._storage import is_url, open_binary, open_ranges

# (path, stamp, field, row group) -> (flat tokens, offsets): decoded row groups, up to
# 256 MiB in each process, so that a file of that size is decoded once, however its
# documents are shuffled.
_decoded: BoundedCache[tuple[np.ndarray, np.ndarray]] = BoundedCache(
    "decoded Parquet row groups", maxsize=65_536, maxbytes=256 << 20
)
# (process, thread for a URL, path, stamp) -> the open file, its footer parsed once.
_opened: BoundedCache[pq.ParquetFile] = BoundedCache("open Parquet files", maxsize=64)


def read_row_group(file: pq.ParquetFile, group: int, field: str) -> pa.ChunkedArray:
    """Column `field` of row group `group` of `file`, decoded."""
    return file.read_row_group(group, columns=[field]).column(0)


def parquet_file(path: str, *, in_order: bool = False) -> pq.ParquetFile:
    """`path` opened by pyarrow: a URL as a file whose reads fetch what they ask (or, read
    `in_order`, in blocks)."""
    if not is_url(path):
        return pq.ParquetFile(path)
    return pq.ParquetFile(open_binary(path) if in_order else open_ranges(path))


class ParquetFile(IndexedFile):
    """A Parquet file's documents, read by row group."""

    kind = "parquet"

    @property
    def count(self) -> int:
        return int(self.index["boundaries"][-1])

    def _compute(self, with_lengths: bool) -> Index:
        try:
            opened = parquet_file(self.path)
        except (pa.ArrowException, OSError) as error:
            raise DocumentFormatError(
                f"{self.path} is not a Parquet file pyarrow can read ({error}): it may be "
                "empty, cut short or another format.",
                path=self.path,
            ) from None
        with opened as file:
            check_column(file.schema_arrow, self.field, self.path, f"the file {self.path}")
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

    def _group(self, group: int) -> tuple[np.ndarray, np.ndarray]:
        """Row group `group`'s tokens and offsets, decoded now or a moment ago."""
        key = (self.path, self.stamp, self.field, group)
        decoded = _decoded.get(key)
        if decoded is None:
            start, stop = self.index["boundaries"][group : group + 2]
            # A remote file is read through a Python file object, one a thread.
            thread = threading.get_ident() if is_url(self.path) else 0
            opened = (os.getpid(), thread, self.path, self.stamp)
            file = _opened.get(opened)
            if file is None:
                file = parquet_file(self.path)
                _opened.put(opened, file)
            column = read_row_group(file, group, self.field)
            decoded = split_documents(column, np.arange(start, stop) + self.first, self.path)
            _decoded.put(key, decoded)
        return decoded

    def stream(self, start: int, stop: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Documents ``[start, stop)`` of this file in order, a row group at a time, as
        (tokens back to back, lengths); the groups are decoded and not kept."""
        boundaries = self.index["boundaries"]
        first = int(np.searchsorted(boundaries, start, side="right")) - 1
        with parquet_file(self.path, in_order=True) as file:
            for group in range(first, len(boundaries) - 1):
                low, high = int(boundaries[group]), int(boundaries[group + 1])
                if low >= stop:
                    break
                column = read_row_group(file, group, self.field)
                values, offsets = split_documents(
                    column, np.arange(low, high) + self.first, self.path
                )
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
