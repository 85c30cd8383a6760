"""Documents in a compressed JSON Lines file (``.jsonl.gz``, ``.jsonl.zst``; ``.json``
too), as Dolma and FineWeb ship them: read in order only.

A compressed stream has no offsets to seek to, so the index is one pass over the
decompressed lines: how many documents there are (blank lines are not documents) and,
when asked for, each one's length. `stream` reads the documents in order, in bounded
chunks, so `write_documents` converts such a file in one pass (a shard that starts
within the file decompresses the lines before its first document, unparsed); a read by
position (``docs[i]``, a shuffled `Packed`) is refused, naming that conversion. gzip
comes with Python; zstd needs the zstandard package (the ``zstd`` extra).
"""

from __future__ import annotations

import gzip
import io
from array import array
from collections.abc import Iterator
from typing import Any

import numpy as np

from datarax._extras import require
from datarax.errors import DocumentFormatError, RemoteReadError
from datarax.pipeline.documents._index import Index, IndexedFile
from datarax.pipeline.documents._jsonl import _parse, record_of
from datarax.pipeline.documents._storage import open_binary
from datarax.pipeline.documents._text import Text, TextFile, joined, text_of

SUFFIXES = {".gz": "gzip", ".zst": "zstd"}  # of a compressed file, and its compression
_CHUNK_DOCUMENTS = 1 << 12  # documents `stream` yields at a time, at most
_CHUNK_TOKENS = 1 << 23  # and tokens, at most (one document more)


def compression_of(path: str) -> str:
    """The compression `path`'s extension names.

    Example:
        >>> compression_of("/data/shard-0001.json.zst")
        'zstd'
    """
    return SUFFIXES["." + path.lower().rsplit(".", 1)[-1]]


def _damaged(error: Exception) -> bool:
    """Whether `error`, raised while decompressing, says the data is no such stream."""
    if isinstance(error, RemoteReadError):
        return False
    return isinstance(error, (OSError, EOFError)) or type(error).__name__ == "ZstdError"


class CompressedLines(IndexedFile):
    """A compressed JSON Lines file's documents, read in order."""

    kind = "jsonl-compressed"

    def __init__(self, path: str, field: str, cache_dir: str, *, first: int):
        self.compression = compression_of(path)
        if self.compression == "zstd":
            require("zstandard", "zstd", f"Reading {path}")
        super().__init__(path, field, cache_dir, first=first)

    @property
    def count(self) -> int:
        return int(self.index["count"][0])

    def _lines(self, start: int, stop: int | None) -> Iterator[tuple[int, int, bytes]]:
        """(document, line number, line) of documents ``[start, stop)`` (`stop` None: to
        the end), decompressed in order; the lines before `start` are skipped unparsed.

        Raises:
            DocumentFormatError: the file is not what its extension says, or is cut short.
        """
        at = 0
        with open_binary(self.path) as raw:
            if self.compression == "gzip":
                stream: Any = gzip.GzipFile(fileobj=raw, mode="rb")
            else:
                import zstandard

                reader = zstandard.ZstdDecompressor().stream_reader(
                    raw, read_across_frames=True, closefd=False
                )
                stream = io.BufferedReader(reader, 1 << 20)
            try:
                with stream:
                    for number, line in enumerate(stream, start=1):
                        if line.isspace():
                            continue
                        if stop is not None and at >= stop:
                            return
                        if at >= start:
                            yield at, number, line
                        at += 1
            except Exception as error:
                if not _damaged(error):
                    raise
                raise DocumentFormatError(
                    f"{self.path} is not a whole {self.compression} stream, as its extension "
                    f"says ({type(error).__name__}: {error}; after {at} documents): it may be "
                    "cut short, or another kind of file. Check it, or name it by its kind.",
                    path=self.path,
                ) from None

    def _compute(self, with_lengths: bool) -> Index:
        count, lengths = 0, array("q")
        for at, number, line in self._lines(0, None):
            if with_lengths:
                index = self.first + at
                lengths.append(len(_parse(line, index, self.field, self.path, f"line {number}")))
            count += 1
        index = {"count": np.array([count], np.int64)}
        if with_lengths:
            index["lengths"] = (
                np.frombuffer(lengths, np.int64) if lengths else np.zeros(0, np.int64)
            )
        return index

    def stream(self, start: int, stop: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Documents ``[start, stop)`` in order, as (tokens back to back, lengths), at most
        4,096 documents or about 8 million tokens at a time."""
        documents: list[np.ndarray] = []
        tokens = 0
        for at, number, line in self._lines(start, stop):
            index = self.first + at
            documents.append(_parse(line, index, self.field, self.path, f"line {number}"))
            tokens += len(documents[-1])
            if len(documents) >= _CHUNK_DOCUMENTS or tokens >= _CHUNK_TOKENS:
                yield joined(documents)
                documents, tokens = [], 0
        if documents:
            yield joined(documents)

    def _read(self, local: np.ndarray) -> list[np.ndarray]:
        raise DocumentFormatError(
            f"{self.path} is {self.compression}-compressed, so its documents are read in "
            "order only, not by position (docs[i], docs.read, a shuffled Packed or "
            f"Pipeline). Convert it first, in one pass: write_documents(Documents({self.path!r}"
            "), 'store_folder'), with the same field=, tokenizer= and other arguments, then "
            "read Documents('store_folder').",
            path=self.path,
        )


class CompressedText(TextFile, CompressedLines):
    """A compressed JSON Lines file whose field holds text, tokenized as it is read."""

    def _compute(self, with_lengths: bool) -> Index:
        return super()._compute(False)

    def _texts(self, start: int, stop: int) -> Iterator[Text]:
        for at, number, line in self._lines(start, stop):
            index, place = self.first + at, f"line {number}"
            record = record_of(line, index, self.field, self.path, place, '"some text"')
            yield text_of(record, index, self.field, self.path, place), index, self.path, place
