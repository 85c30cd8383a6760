"""Megatron-LM's indexed token format: its index read by memory map, its documents by byte
range, and written a document at a time.

A pair of files per prefix: ``PREFIX.bin`` holds the tokens of every sequence back to
back, raw, in one dtype; ``PREFIX.idx`` says where each one is: the 9 bytes
``MMIDIDX\\x00\\x00``, the version (1) as a little-endian u64, the dtype's code as a u8
(1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16), the
sequence count and the document-index count as u64, then every sequence's length (int32),
every sequence's byte offset in the ``.bin`` (int64) and the document indices (int64:
0, then where each document's sequences end). Megatron's GPT datasets read each sequence
as a document, and so does `Documents`; the writer here writes one sequence a document.

Reading costs no pass over the tokens: the lengths and offsets are views of the ``.idx``
mapped into memory, and a document is one read of its byte range of the ``.bin``
(``pread``), nothing decoded. The documents of one read are first asked of the kernel all
at once (``POSIX_FADV_WILLNEED``, neighbouring ranges merged), so a disk serves them
together rather than one after another. The ``.bin`` is read, not mapped: every page of
a map that a process has touched counts in its resident memory, and a shuffled read
touches them all; a ``pread`` copies from the page cache, which the processes share
(`benchmarks/document_reads.py` measures both ways). Opening a pair checks its header,
its size and, in one pass over the index read in chunks (not kept in memory), that every
sequence lies inside the ``.bin``.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
import weakref
from collections.abc import Iterator
from typing import Any, BinaryIO

import numpy as np

from datarax.errors import DocumentFormatError
from datarax.pipeline.documents._index import (
    check_stamp,
    default_cache_dir,
    local_copy,
    stamp_now,
)
from datarax.pipeline.documents._storage import is_url, read_ranges
from datarax.pipeline.documents._values import read_only

MAGIC = b"MMIDIDX\x00\x00"
_HEADER = struct.Struct("<9sQBQQ")  # magic, version, dtype code, sequences, document indices
CODES: dict[int, np.dtype] = {
    code: np.dtype(name)
    for code, name in enumerate(
        ("uint8", "int8", "int16", "int32", "int64", "float64", "float32", "uint16"), 1
    )
}
_CHUNK = 1 << 20  # index entries checked (or streamed) at a time
_STREAM_BYTES = 1 << 24  # tokens read at a time, in bytes, when documents are read in order


def code_of(dtype: np.dtype) -> int:
    """Megatron's code for an integer `dtype`.

    Raises:
        ValueError: the format has no code for it (uint32, uint64).

    Example:
        >>> code_of(np.dtype("uint16"))
        8
    """
    for code, known in CODES.items():
        if known == dtype and dtype.kind in "iu":
            return code
    tokens = ", ".join(str(d) for d in CODES.values() if d.kind in "iu")
    raise ValueError(f"Megatron's format stores tokens as one of {tokens}, not {dtype}.")


def token_dtype(value: Any) -> np.dtype:
    """`value` (an argument ``dtype=``) as a token dtype Megatron's format holds.

    Raises:
        ValueError: it names no dtype, or one the format does not hold as token ids.

    Example:
        >>> token_dtype("uint16")
        dtype('uint16')
    """
    try:
        found = np.dtype(value)
    except (TypeError, ValueError, KeyError):  # KeyError: a dict naming fields it lacks
        found = None
    if found is None or found.kind not in "iu" or found not in CODES.values():
        raise ValueError(
            f"dtype must be one of uint8, int8, int16, uint16, int32, int64 (the token dtypes "
            f"of Megatron's format), got {value!r:.100}."
        )
    return found


def _refused(path: str, why: str) -> DocumentFormatError:
    return DocumentFormatError(
        f"{path} is not an index of Megatron's format that Documents reads: {why}.", path=path
    )


def read_header(idx_path: str, name: str | None = None) -> tuple[np.dtype, int, int]:
    """The token dtype, sequence count and document-index count of the local file
    `idx_path` (named `name` in errors: a URL it was copied from), once its header and
    size are what the format says.

    Raises:
        DocumentFormatError: another magic, version or dtype code, or another size.
    """
    size = os.path.getsize(idx_path)
    idx_path, local_path = name or idx_path, idx_path
    with open(local_path, "rb") as file:
        head = file.read(_HEADER.size)
    if len(head) < _HEADER.size or not head.startswith(MAGIC):
        raise _refused(idx_path, f"it does not start with {MAGIC!r}")
    _, version, code, sequences, document_indices = _HEADER.unpack(head)
    if version != 1:
        raise _refused(idx_path, f"its version is {version}, and only version 1 is known")
    if code not in CODES or CODES[code].kind not in "iu":
        what = f"dtype {CODES[code]}, not token ids" if code in CODES else "unknown"
        raise _refused(idx_path, f"its dtype code is {code} ({what})")
    expected = _HEADER.size + 12 * sequences + 8 * document_indices
    if size not in (expected, expected + sequences):  # + one mode byte a sequence (multimodal)
        raise _refused(
            idx_path,
            f"it has {size} bytes, where {sequences} sequences and {document_indices} document "
            f"indices take {expected}: it is cut short or damaged",
        )
    return CODES[code], sequences, document_indices


class IndexedPair:
    """One ``.idx`` (mapped) and its ``.bin`` (the tokens from byte `bin_offset` on, read
    by byte range), local files or URLs: a remote ``.idx`` is copied once a host into
    `cache_dir` and mapped from there, a remote ``.bin`` read a document's range at a time.

    Pickled, it holds the paths, the header and the files' stamps; each process maps
    and opens the files itself, once they are as they were when this pair was opened.
    """

    def __init__(
        self, idx_path: str, bin_path: str, *, bin_offset: int = 0, cache_dir: str | None = None
    ):
        self.idx_path, self.bin_path, self.bin_offset = idx_path, bin_path, bin_offset
        self.cache_dir = cache_dir or default_cache_dir()
        self.stamps = (stamp_now(idx_path), stamp_now(bin_path))
        self.dtype, self.count, _ = read_header(self._index_file(), idx_path)
        self._check_bounds()
        self._maps: tuple[np.ndarray, np.ndarray, int | None] | None = None

    def _index_file(self) -> str:
        """The ``.idx`` to map: itself, or its local copy where it is remote."""
        if not is_url(self.idx_path):
            return self.idx_path
        return local_copy(self.idx_path, self.stamps[0], self.cache_dir)

    @property
    def token_bytes(self) -> int:
        """Bytes of the ``.bin`` that hold tokens."""
        return self.stamps[1][0] - self.bin_offset

    def _check_bounds(self) -> None:
        """Every sequence inside the ``.bin``, read in chunks of the index."""
        itemsize, end = self.dtype.itemsize, self.token_bytes
        with open(self._index_file(), "rb") as file:
            for start in range(0, self.count, _CHUNK):
                take = min(_CHUNK, self.count - start)
                lengths = _read_at(file, _HEADER.size + 4 * start, np.int32, take)
                pointers = _read_at(file, _HEADER.size + 4 * self.count + 8 * start, np.int64, take)
                ends = pointers + lengths.astype(np.int64) * itemsize
                bad = np.flatnonzero((lengths < 0) | (pointers < 0) | (pointers % itemsize != 0))
                bad = bad if bad.size else np.flatnonzero(ends > end)
                if bad.size:
                    k = int(bad[0])
                    raise _refused(
                        self.idx_path,
                        f"sequence {start + k} has length {lengths[k]} at byte {pointers[k]}, "
                        f"which is not inside the {end} bytes of tokens of {self.bin_path}",
                    )

    def _mapped(self) -> tuple[np.ndarray, np.ndarray, int | None]:
        """(lengths, pointers, the ``.bin``'s descriptor; None for a URL), mapped and opened
        in this process on first use, once both files are as they were when this pair was
        opened (checked at every read too)."""
        check_stamp(self.idx_path, self.stamps[0])
        check_stamp(self.bin_path, self.stamps[1])
        if self._maps is None:
            index = _map(self._index_file())
            lengths = index[_HEADER.size : _HEADER.size + 4 * self.count].view(np.int32)
            pointers = index[_HEADER.size + 4 * self.count :][: 8 * self.count].view(np.int64)
            descriptor = None
            if not is_url(self.bin_path):
                descriptor = os.open(self.bin_path, os.O_RDONLY)
                weakref.finalize(self, os.close, descriptor)
            self._maps = (lengths, pointers, descriptor)
        return self._maps

    has_lengths = True  # the index holds them

    @property
    def lengths(self) -> np.ndarray:
        """Every document's length (int32, mapped from the index, read-only)."""
        return self._mapped()[0]

    def read(
        self, local: np.ndarray, spans: tuple[np.ndarray, np.ndarray] | None = None
    ) -> list[np.ndarray]:
        """Documents `local` (indices in this pair, in range), each read-only, their byte
        ranges asked of the kernel all at once before the first is read; with `spans`
        (starts, sizes in tokens, inside each document), only those pieces."""
        lengths, pointers, descriptor = self._mapped()
        itemsize = self.dtype.itemsize
        begins = self.bin_offset + pointers[local]
        sizes = lengths[local].astype(np.int64) * itemsize
        if spans is not None:
            begins, sizes = begins + spans[0] * itemsize, spans[1] * itemsize
        if descriptor is not None:
            _ask_for(descriptor, begins, sizes)
        return [
            self._tokens(descriptor, begin, size)
            for begin, size in zip(begins.tolist(), sizes.tolist(), strict=True)
        ]

    def _tokens(self, descriptor: int | None, begin: int, size: int) -> np.ndarray:
        if descriptor is None:
            return self._checked(read_ranges(self.bin_path, [begin], [size])[0], size)
        return self._checked(os.pread(descriptor, size, begin), size)

    def _checked(self, data: bytes, size: int) -> np.ndarray:
        """`data` as tokens, once it has the `size` bytes asked for."""
        if len(data) != size:
            check_stamp(self.bin_path, self.stamps[1], now=True)  # raises, naming what changed
            raise DocumentFormatError(
                f"{self.bin_path} gave {len(data)} bytes where {size} were asked, though its "
                "size is unchanged.",
                path=self.bin_path,
            )
        return np.frombuffer(data, self.dtype)

    def stream(self, start: int, stop: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Documents ``[start, stop)`` in order, as (tokens back to back, lengths), about
        `_STREAM_BYTES` at a time: one read where they lie back to back."""
        lengths, pointers, descriptor = self._mapped()
        itemsize, low = self.dtype.itemsize, start
        while low < stop:
            sizes = lengths[low : min(stop, low + _CHUNK)].astype(np.int64) * itemsize
            fit = int(np.searchsorted(np.cumsum(sizes), _STREAM_BYTES, side="right"))
            high = low + max(1, fit)
            counts, where = lengths[low:high].astype(np.int64), pointers[low:high]
            laid = int(where[0]) + np.concatenate([[0], np.cumsum(counts[:-1]) * itemsize])
            if np.array_equal(where, laid):  # back to back: one read
                tokens = self._tokens(
                    descriptor, self.bin_offset + int(where[0]), int(counts.sum()) * itemsize
                )
            else:  # laid out of order by another writer: a document at a time
                tokens = np.concatenate([np.zeros(0, self.dtype), *self.read(np.arange(low, high))])
            yield tokens, counts
            low = high

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_maps": None}


def _ask_for(descriptor: int, begins: np.ndarray, sizes: np.ndarray) -> None:
    """Asks the kernel to read the byte ranges ``[begin, begin + size)`` of the file
    (``POSIX_FADV_WILLNEED``), overlapping or touching ranges merged: the disk then serves
    them together instead of one read after another."""
    if not hasattr(os, "posix_fadvise"):
        return
    keep = sizes > 0
    order = np.argsort(begins[keep])
    lows, highs = begins[keep][order], (begins[keep] + sizes[keep])[order]
    if not len(lows):
        return
    reach = np.maximum.accumulate(highs)
    breaks = np.flatnonzero(lows[1:] > reach[:-1]) + 1  # where a range leaves a gap
    firsts, lasts = np.append(0, breaks), np.append(breaks, len(lows)) - 1
    for low, high in zip(lows[firsts].tolist(), reach[lasts].tolist(), strict=True):
        os.posix_fadvise(descriptor, low, high - low, os.POSIX_FADV_WILLNEED)


def _read_at(file: BinaryIO, offset: int, dtype: type[np.generic], count: int) -> np.ndarray:
    file.seek(offset)
    return np.fromfile(file, dtype, count)


def _map(path: str) -> np.ndarray:
    """The bytes of `path`, mapped read-only (an empty file: an empty array, no map)."""
    if os.path.getsize(path) == 0:
        return read_only(np.empty(0, np.uint8))
    with open(path, "rb") as file:
        mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    return np.frombuffer(mapped, np.uint8)


class PairWriter:
    """Writes documents to ``PREFIX.bin`` as they come and ``PREFIX.idx`` at `close`, in
    `dtype` (widened part way with `widen`); the lengths are kept until then (4 bytes a
    document)."""

    def __init__(self, prefix: str, dtype: np.dtype):
        self.prefix, self.dtype = prefix, np.dtype(dtype)
        self._bin = open(prefix + ".bin", "wb")  # noqa: SIM115 (closed in close or abandon)
        self._lengths: list[np.ndarray] = []

    def add(self, tokens: np.ndarray, lengths: np.ndarray) -> None:
        """Appends documents of `lengths` whose tokens are `tokens`, back to back; every
        token must fit this writer's dtype."""
        tokens.astype(self.dtype.newbyteorder("<"), copy=False).tofile(self._bin)
        self._lengths.append(lengths.astype(np.int32))

    def widen(self, dtype: np.dtype) -> None:
        """Rewrites what was written so far in the wider `dtype`, and goes on in it."""
        self._bin.close()
        _rewrite(self.prefix + ".bin", self.dtype, np.dtype(dtype))
        self.dtype = np.dtype(dtype)
        self._bin = open(self.prefix + ".bin", "ab")  # noqa: SIM115

    def close(self) -> np.ndarray:
        """Writes the index; returns the lengths."""
        self._bin.close()
        lengths = np.concatenate([np.zeros(0, np.int32), *self._lengths])
        write_index(self.prefix + ".idx", lengths, self.dtype)
        return lengths

    def abandon(self) -> None:
        """Closes without writing an index; the caller removes the files."""
        with contextlib.suppress(OSError):
            self._bin.close()


def write_index(idx_path: str, lengths: np.ndarray, dtype: np.dtype) -> None:
    """The index of documents of `lengths` laid back to back in `dtype`, one a document,
    written `_CHUNK` entries at a time (`lengths` may be a map of a file: no copy of it)."""
    count, itemsize = len(lengths), np.dtype(dtype).itemsize
    with open(idx_path, "wb") as file:
        file.write(_HEADER.pack(MAGIC, 1, code_of(np.dtype(dtype)), count, count + 1))
        for start in range(0, count, _CHUNK):
            file.write(np.asarray(lengths[start : start + _CHUNK], "<i4").tobytes())
        laid = 0  # bytes of the documents before this chunk
        for start in range(0, count, _CHUNK):
            sizes = np.asarray(lengths[start : start + _CHUNK], np.int64) * itemsize
            ends = laid + np.cumsum(sizes)
            file.write((ends - sizes).astype("<i8").tobytes())
            laid = int(ends[-1])
        for start in range(0, count + 1, _CHUNK):
            file.write(np.arange(start, min(count + 1, start + _CHUNK), dtype="<i8").tobytes())


def _rewrite(bin_path: str, old: np.dtype, new: np.dtype, chunk_tokens: int = 1 << 24) -> None:
    """The tokens of `bin_path` rewritten from `old` to `new`, in chunks, then moved back."""
    with open(bin_path, "rb") as source, open(bin_path + ".wide", "wb") as target:
        while (part := np.fromfile(source, old.newbyteorder("<"), chunk_tokens)).size:
            part.astype(new.newbyteorder("<")).tofile(target)
    os.replace(bin_path + ".wide", bin_path)


def widen(prefix: str, dtype: np.dtype) -> None:
    """Rewrites the pair `prefix` in the wider integer `dtype` (its tokens unchanged)."""
    old, count, _ = read_header(prefix + ".idx")
    lengths = np.fromfile(prefix + ".idx", "<i4", count, offset=_HEADER.size)
    _rewrite(prefix + ".bin", old, np.dtype(dtype))
    write_index(prefix + ".idx", lengths, dtype)
