"""Documents held in an Arrow list column: a Parquet file's row groups, or a Hugging Face
`datasets.Dataset`.

Lengths come from the column's list offsets and documents from its flat values, both as
numpy arrays: no token becomes a Python object. Imported only where such data is given
(it imports pyarrow).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from datarax._compat import dataset_rows
from datarax.errors import DocumentError, DocumentFieldError
from datarax.pipeline.documents._contract import check_lengths
from datarax.pipeline.documents._values import read_only, where


def check_column(schema: pa.Schema, field: str, path: str | None, what: str) -> pa.DataType:
    """The type of column `field` of `schema`, once it is a list of integers; `what`
    names the data for errors, e.g. ``"the dataset"``.

    Raises:
        DocumentFieldError: there is no such column, or it holds something else.
    """
    columns = list(schema.names)
    kind = _column_type(schema, field, path, what, "the token ids")
    is_list = pa.types.is_list(kind) or pa.types.is_large_list(kind)
    if not (is_list or pa.types.is_fixed_size_list(kind)) or not pa.types.is_integer(
        kind.value_type
    ):
        raise DocumentFieldError(
            f"Column {field!r} of {what} is of type {kind}, not a list of integers. "
            "Documents reads token ids: pass tokenizer= to tokenize a text column as it is "
            "read, or field= the column that holds the ids.",
            field=field,
            columns=columns,
            path=path,
        )
    return kind


def _column_type(schema: pa.Schema, field: str, path: str | None, what: str, held: str) -> Any:
    """The type of column `field` of `schema`; `held` says what it holds, for the error.

    Raises:
        DocumentFieldError: there is no such column.
    """
    columns = list(schema.names)
    if field not in columns:
        raise DocumentFieldError(
            f"{what[:1].upper()}{what[1:]} has no column {field!r}; its columns are "
            f"{columns}. Pass field= the one that holds {held}.",
            field=field,
            columns=columns,
            path=path,
        )
    return schema.field(field).type


def check_text_column(schema: pa.Schema, field: str, path: str | None, what: str) -> None:
    """Checks that column `field` of `schema` holds text (strings), as a tokenizer needs.

    Raises:
        DocumentFieldError: there is no such column, or it holds something else.
    """
    kind = _column_type(schema, field, path, what, "the text")
    view = getattr(pa.types, "is_string_view", lambda _: False)
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or view(kind)):
        raise DocumentFieldError(
            f"Column {field!r} of {what} is of type {kind}, not text (a string column), "
            "and a tokenizer reads text. Leave tokenizer= out to read a column of token "
            "ids, or pass field= the column that holds the text.",
            field=field,
            columns=list(schema.names),
            path=path,
        )


def _null_error(kind: str, index: int, path: str | None) -> DocumentError:
    return DocumentError(
        f"{where(index, path)} {kind}; a document must be a list of token ids. Drop or "
        "fill the nulls in the data.",
        index=index,
        path=path,
    )


def list_lengths(column: pa.ChunkedArray, documents: np.ndarray, path: str | None) -> np.ndarray:
    """Each list's length in `column` (int64), read from its offsets; `documents` are
    the lists' indices in their `Documents`, for errors.

    Raises:
        DocumentError: a document is null, or holds a null token.
    """
    parts, start = [np.zeros(0, np.int64)], 0
    for chunk in column.chunks:
        if chunk.null_count:
            row = start + np.flatnonzero(chunk.is_null().to_numpy(zero_copy_only=False))[0]
            raise _null_error("is null", int(documents[row]), path)
        parts.append(chunk.value_lengths().to_numpy().astype(np.int64))
        values = chunk.flatten()
        if values.null_count:
            position = np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False))[0]
            row = start + np.searchsorted(np.cumsum(parts[-1]), position, side="right")
            raise _null_error("holds a null token", int(documents[row]), path)
        start += len(chunk)
    return np.concatenate(parts)


def split_documents(
    column: pa.ChunkedArray, documents: np.ndarray, path: str | None
) -> tuple[np.ndarray, np.ndarray]:
    """`column`'s tokens as one flat array and each list's offsets into it (list `k` is
    ``values[offsets[k]:offsets[k + 1]]``); `documents` as for `list_lengths`."""
    counts = list_lengths(column, documents, path)
    offsets = np.zeros(len(counts) + 1, np.int64)
    np.cumsum(counts, out=offsets[1:])
    flat = [chunk.flatten().to_numpy() for chunk in column.chunks]
    empty = np.zeros(0, str(column.type.value_type))  # the column's own (integer) dtype
    values = flat[0] if len(flat) == 1 else np.concatenate([empty, *flat])
    return values, offsets


def copies(
    values: np.ndarray, offsets: np.ndarray, which: Sequence[int] | np.ndarray
) -> list[np.ndarray]:
    """Documents `which` of a split column, each a read-only copy (no view keeps the
    whole column alive)."""
    return [read_only(values[offsets[k] : offsets[k + 1]].copy()) for k in which]


def _rows_of(dataset: Any, rows: np.ndarray | None, field: str, indices: np.ndarray) -> Any:
    """The rows of `dataset`'s column `field` that hold items `indices` (`rows`: its
    indices mapping, or None)."""
    column = dataset.data.column(field)
    if rows is not None:
        indices = rows[indices]
    elif len(indices) == len(column) and np.array_equal(indices, np.arange(len(column))):
        return column
    return column.take(pa.array(indices))


class DatasetDocuments:
    """A Hugging Face `datasets.Dataset`'s documents, read from its Arrow table (through
    its indices mapping, after ``select`` or ``shuffle``)."""

    def __init__(self, dataset: Any, field: str, lengths: np.ndarray | None):
        self.dataset, self._rows = dataset_rows(dataset)
        self.field = field
        check_column(dataset.data.schema, field, None, "the dataset")
        if lengths is None:
            everything = np.arange(len(dataset))
            lengths = list_lengths(self._column(everything), everything, None)
        self.lengths = check_lengths(lengths, count=len(dataset))
        self.count = len(self.lengths)

    def _column(self, indices: np.ndarray) -> pa.ChunkedArray:
        """The rows of the field's column that hold documents `indices`."""
        return _rows_of(self.dataset, self._rows, self.field, indices)

    def read(self, indices: np.ndarray) -> list[np.ndarray]:
        values, offsets = split_documents(self._column(indices), indices, None)
        return copies(values, offsets, range(len(indices)))

    def __getstate__(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "field": self.field, "lengths": self.lengths}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.dataset, self._rows = dataset_rows(state["dataset"])  # it pickles its mapping
        self.field, self.lengths = state["field"], state["lengths"]
        self.count = len(self.lengths)


class DatasetTexts:
    """A Hugging Face `datasets.Dataset`'s string column `field`, item by item (through
    its indices mapping), for a tokenizer."""

    def __init__(self, dataset: Any, field: str):
        self.dataset, self._rows = dataset_rows(dataset)
        self.field = field
        check_text_column(dataset.data.schema, field, None, "the dataset")

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitems__(self, indices: list[int]) -> list[Any]:
        """Items `indices`: each a str, or None where it is null."""
        return _rows_of(
            self.dataset, self._rows, self.field, np.array(indices, np.int64)
        ).to_pylist()

    def __getstate__(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "field": self.field}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.dataset, self._rows = dataset_rows(state["dataset"])
        self.field = state["field"]
