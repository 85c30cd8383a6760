"""Documents in a JSON Lines file: one JSON object a line, its tokens under a field.

The index is one pass over the lines: where each document's line starts (a byte offset)
and how long it is, and, unless the caller passed lengths, each document's token count
(its line parsed and checked). Blank lines are not documents. A read fetches the byte
range of each line asked for, and parses only those.
"""

from __future__ import annotations

import json
from array import array

import numpy as np

from datarax.errors import DocumentError, DocumentFormatError
from datarax.pipeline.documents._index import Index, IndexedFile
from datarax.pipeline.documents._storage import open_binary, read_ranges
from datarax.pipeline.documents._values import as_document, where


def _parse(line: bytes, index: int, field: str, path: str, place: str) -> np.ndarray:
    name = where(index, path, place)
    try:
        record = json.loads(line)
    except ValueError as error:
        raise DocumentError(
            f"{name} is not valid JSON ({error}). A JSON Lines file holds one JSON object a line.",
            index=index,
            path=path,
        ) from None
    if not isinstance(record, dict):
        raise DocumentError(
            f"{name} is a JSON {type(record).__name__}, not an object; each line must be "
            f'an object holding the tokens, e.g. {{"{field}": [1, 2, 3]}}.',
            index=index,
            path=path,
        )
    document = as_document(record, index, field, path, place)
    if document.dtype != np.int64:
        raise DocumentError(
            f"{name} holds integers beyond int64; token ids must fit in int64.",
            index=index,
            path=path,
        )
    return document


_COMPRESSED = {b"\x1f\x8b": "gzip", b"\x28\xb5\x2f\xfd": "zstd", b"BZh": "bzip2", b"\xfd7zXZ": "xz"}


def _check_plain(path: str) -> None:
    """Raises DocumentFormatError where `path` starts as a compressed file does."""
    with open_binary(path) as file:
        head = file.read(6)
    for magic, kind in _COMPRESSED.items():
        if head.startswith(magic):
            raise DocumentFormatError(
                f"{path} is {kind}-compressed: Documents reads a JSON Lines file by seeking "
                "to its lines, so decompress it first.",
                path=path,
            )


def index_lines(path: str, field: str, first: int, with_lengths: bool) -> Index:
    """Where each non-blank line of `path` starts and how many bytes it has, and with
    `with_lengths` each one's token count, every document checked."""
    _check_plain(path)
    starts, sizes, lengths = array("q"), array("q"), array("q")
    offset = 0
    with open_binary(path) as file:
        for number, line in enumerate(file, start=1):
            if not line.isspace():
                if with_lengths:
                    place = f"line {number}"
                    lengths.append(len(_parse(line, first + len(starts), field, path, place)))
                starts.append(offset)
                sizes.append(len(line))
            offset += len(line)
    index = {"starts": np.frombuffer(starts, np.int64), "sizes": np.frombuffer(sizes, np.int64)}
    if with_lengths:
        index["lengths"] = np.frombuffer(lengths, np.int64)
    return index


class JsonLinesFile(IndexedFile):
    """A JSON Lines file's documents, read by seeking to their lines."""

    kind = "jsonl"

    @property
    def count(self) -> int:
        return len(self.index["starts"])

    def _compute(self, with_lengths: bool) -> Index:
        return index_lines(self.path, self.field, self.first, with_lengths)

    def _read(self, local: np.ndarray) -> list[np.ndarray]:
        starts, sizes = self.index["starts"], self.index["sizes"]
        lines = read_ranges(self.path, starts[local].tolist(), sizes[local].tolist())
        return [
            _parse(line, self.first + int(k), self.field, self.path, f"at byte {starts[k]}")
            for line, k in zip(lines, local, strict=True)
        ]
