"""Documents in a JSON Lines file: one JSON object a line, its tokens under a field.

The index is one pass over the lines: where each document's line starts (a byte offset)
and how long it is, and, unless the caller passed lengths, each document's token count
(its line parsed and checked). Blank lines are not documents. A read fetches the byte
range of each line asked for, and parses only those. With a tokenizer (`JsonLinesText`),
the field holds text, tokenized as it is read.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterator
from typing import Any

import numpy as np

from datarax.errors import DocumentError, DocumentFormatError
from datarax.pipeline.documents._index import Index, IndexedFile
from datarax.pipeline.documents._storage import open_binary, read_ranges
from datarax.pipeline.documents._text import Text, TextFile, text_of
from datarax.pipeline.documents._values import as_document, where


def record_of(
    line: bytes, index: int, field: str, path: str, place: str, example: str = "[1, 2, 3]"
) -> dict[str, Any]:
    """The JSON object on `line`, document `index`'s; `example` is a value of `field`, for
    the error."""
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
            f'an object holding the documents, e.g. {{"{field}": {example}}}.',
            index=index,
            path=path,
        )
    return record


def _parse(line: bytes, index: int, field: str, path: str, place: str) -> np.ndarray:
    """Document `index` (the token ids under `field` on `line`), checked."""
    name = where(index, path, place)
    record = record_of(line, index, field, path, place)
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
            known = {"gzip": ".jsonl.gz", "zstd": ".jsonl.zst"}
            rename = (
                f"rename it to end in {known[kind]} to read it in order (write_documents "
                "converts it to a token store in one pass), or "
                if kind in known
                else ""
            )
            raise DocumentFormatError(
                f"{path} is {kind}-compressed: a .jsonl file is read by seeking to its "
                f"lines; {rename}decompress it first.",
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


class JsonLinesText(TextFile, JsonLinesFile):
    """A JSON Lines file whose field holds text, tokenized when read. Its index of line
    offsets is the same as for token ids (cached as theirs), its lengths `TextFile`'s."""

    def _compute(self, with_lengths: bool) -> Index:
        return index_lines(self.path, self.field, self.first, False)

    def _text(self, line: bytes, index: int, place: str) -> str:
        record = record_of(line, index, self.field, self.path, place, '"some text"')
        return text_of(record, index, self.field, self.path, place)

    def _texts(self, start: int, stop: int) -> Iterator[Text]:
        """The texts of documents ``[start, stop)``, read in order from the first one's
        line (lines numbered from a read of the whole file, else named by byte)."""
        if start >= stop:
            return
        offset = 0 if start == 0 else int(self.index["starts"][start])
        at = start
        with open_binary(self.path) as file:
            file.seek(offset)
            for number, line in enumerate(file, start=1):
                if not line.isspace():
                    if at >= stop:
                        return
                    index = self.first + at
                    place = f"line {number}" if start == 0 else f"at byte {offset}"
                    yield self._text(line, index, place), index, self.path, place
                    at += 1
                offset += len(line)

    def _read(self, local: np.ndarray) -> list[np.ndarray]:
        starts, sizes = self.index["starts"], self.index["sizes"]
        lines = read_ranges(self.path, starts[local].tolist(), sizes[local].tolist())
        documents = []
        for line, k in zip(lines, local.tolist(), strict=True):
            index, place = self.first + k, f"at byte {starts[k]}"
            text = self._text(line, index, place)
            documents.append(self.text.tokens(text, index, self.path, place))
        return documents
