"""Documents in files: paths and glob patterns resolved, one index a file, documents
numbered across the files in the order given.

A file's format is told by its extension: ``.parquet`` (needs pyarrow, the ``parquet``
extra), ``.jsonl`` or ``.json`` (one JSON object a line). One list may mix them.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from datarax._extras import require
from datarax.errors import DocumentFileNotFoundError, DocumentFormatError
from datarax.pipeline._document_index import IndexedFile
from datarax.pipeline._document_values import check_count, read_only

_PARQUET = (".parquet",)
_JSON_LINES = (".jsonl", ".json")


def is_files(data: Any) -> bool:
    """Whether `data` names files: a path, or a list or tuple whose first item is one."""
    if isinstance(data, (str, os.PathLike)):
        return True
    return (
        isinstance(data, (list, tuple)) and bool(data) and isinstance(data[0], (str, os.PathLike))
    )


def _matches(item: Any, number: int) -> list[str]:
    if not isinstance(item, (str, os.PathLike)):
        raise TypeError(
            f"data[{number}] is of type {type(item).__name__}, but data[0] is a path: a list of "
            "documents files must hold only paths and glob patterns."
        )
    pattern = os.path.expanduser(os.fspath(item))
    if os.path.isfile(pattern):
        return [os.path.abspath(pattern)]
    if os.path.isdir(pattern):
        raise DocumentFileNotFoundError(
            f"{pattern} is a folder, not a documents file; pass a glob such as "
            f"{os.path.join(pattern, '*.parquet')!r} or a list of its files.",
            pattern=pattern,
        )
    found = sorted(path for path in glob.glob(pattern, recursive=True) if os.path.isfile(path))
    if not found:
        what = "matches no file" if glob.has_magic(pattern) else "does not exist"
        raise DocumentFileNotFoundError(
            f"No documents file: {pattern!r} {what} (looked from {os.getcwd()}). Pass the "
            "path of a .parquet or .jsonl file, a glob pattern, or a list of them.",
            pattern=pattern,
        )
    return [os.path.abspath(path) for path in found]


def resolve_paths(data: str | os.PathLike[str] | Sequence[Any]) -> list[str]:
    """The absolute paths `data` names, in order; a glob's matches sorted.

    Raises:
        DocumentFileNotFoundError: a path or pattern names no file.
        DocumentFormatError: a file's extension is not one `Documents` reads.
    """
    items = [data] if isinstance(data, (str, os.PathLike)) else list(data)
    paths = [path for number, item in enumerate(items) for path in _matches(item, number)]
    for path in paths:
        if not path.lower().endswith(_PARQUET + _JSON_LINES):
            raise DocumentFormatError(
                f"{path} is not a file Documents reads: its extension is none of "
                f"{', '.join(_PARQUET + _JSON_LINES)}. Convert it to Parquet or JSON Lines "
                "(uncompressed: documents are read by seeking), or pass the documents as a "
                "list of arrays.",
                path=path,
            )
    return paths


def _open(path: str, field: str, cache_dir: str, first: int, with_lengths: bool) -> IndexedFile:
    if path.lower().endswith(_PARQUET):
        require("pyarrow", "parquet", "datarax.pipeline.Documents over Parquet files")
        from datarax.pipeline._parquet_documents import ParquetFile

        return ParquetFile(path, field, cache_dir, first=first, with_lengths=with_lengths)
    from datarax.pipeline._jsonl_documents import JsonLinesFile

    return JsonLinesFile(path, field, cache_dir, first=first, with_lengths=with_lengths)


class FileDocuments:
    """The documents of several files, numbered across them in order.

    Pickled, it holds each file's path, field, stamp and cache folder and where each
    file's documents start; the lengths (unless the caller passed them) are reloaded
    per file where it is read.
    """

    def __init__(self, paths: list[str], field: str, cache_dir: str, lengths: np.ndarray | None):
        self.files: list[IndexedFile] = []
        starts = [0]
        for path in paths:
            self.files.append(_open(path, field, cache_dir, starts[-1], lengths is None))
            starts.append(starts[-1] + self.files[-1].count)
        self.starts = np.array(starts, np.int64)
        if lengths is not None:
            what = paths[0] if len(paths) == 1 else f"the {len(paths)} files"
            check_count(lengths, starts[-1], what)
            for file, start, stop in zip(self.files, starts, starts[1:], strict=False):
                file.given = lengths[start:stop]
        self._lengths: np.ndarray | None = None

    @property
    def lengths(self) -> np.ndarray:
        if self._lengths is None:
            parts = [np.zeros(0, np.int64), *(file.lengths for file in self.files)]
            self._lengths = read_only(np.concatenate(parts))
        return self._lengths

    def read(self, indices: np.ndarray) -> list[np.ndarray]:
        owners = np.searchsorted(self.starts, indices, side="right") - 1
        documents: list[np.ndarray] = [np.empty(0, np.int64)] * len(indices)
        for owner in np.unique(owners):
            positions = np.flatnonzero(owners == owner)
            local = indices[positions] - self.starts[owner]
            for position, document in zip(positions, self.files[owner].read(local), strict=True):
                documents[position] = document
        return documents

    def __getstate__(self) -> dict[str, Any]:
        return {"files": self.files, "starts": self.starts, "_lengths": None}
