"""A small, strict reader and writer of Megatron-LM's indexed dataset (a `.bin` + `.idx` pair),
kept apart from the library so that tests can check the library's own reader and writer
against it. Written from the format's description; checked once against megatron-core.

The `.idx` file, every number little-endian::

    magic       9 bytes   b"MMIDIDX\\x00\\x00"
    version     u64       1
    dtype code  u8        see DTYPE_CODES
    N           u64       number of sequences
    D           u64       number of document indices (documents + 1)
    lengths     N x i32   tokens in each sequence
    pointers    N x i64   byte offset of each sequence in the .bin file
    documents   D x i64   0, then the sequence index that ends each document

The `.bin` file holds the tokens of the sequences, one after another, in the dtype. This
reader takes only what Megatron's writer makes: no multimodal modes after the document
indices, and sequences laid end to end from byte 0 with nothing after the last.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
HEADER_SIZE = len(MAGIC) + 8 + 1 + 8 + 8  # 34 bytes

# Megatron's numeric codes for the token dtype; each token little-endian in the .bin file.
DTYPE_CODES: dict[int, np.dtype] = {
    1: np.dtype("<u1"),
    2: np.dtype("<i1"),
    3: np.dtype("<i2"),
    4: np.dtype("<i4"),
    5: np.dtype("<i8"),
    6: np.dtype("<f8"),
    7: np.dtype("<f4"),
    8: np.dtype("<u2"),
}


class MegatronFormatError(AssertionError):
    """A pair that is not what Megatron's writer makes, or input the writer refuses.

    An AssertionError, so tests may treat it as a failed check; raised explicitly, so it
    holds under ``python -O`` too."""


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise MegatronFormatError(message)


def _code_of(dtype: npt.DTypeLike) -> int:
    """Megatron's code for `dtype` (any byte order)."""
    little = np.dtype(dtype).newbyteorder("<")
    codes = [code for code, known in DTYPE_CODES.items() if known == little]
    _check(len(codes) == 1, f"dtype {np.dtype(dtype)} has no Megatron code")
    return codes[0]


def paths(prefix: str | Path) -> tuple[Path, Path]:
    """The `.idx` and `.bin` paths of `prefix` (the suffixes appended, never substituted)."""
    return Path(f"{prefix}.idx"), Path(f"{prefix}.bin")


@dataclass(frozen=True)
class MegatronPair:
    """What one `.idx` + `.bin` pair holds.

    `dtype` is the token dtype in native byte order; `lengths` (int32), `pointers` and
    `document_indices` (int64) are the index arrays as stored; `sequences` are copies of
    every sequence's tokens, in `dtype`."""

    dtype: np.dtype
    lengths: np.ndarray
    pointers: np.ndarray
    document_indices: np.ndarray
    sequences: list[np.ndarray]


def read_pair(prefix: str | Path) -> MegatronPair:
    """Read `prefix.idx` and `prefix.bin`, checking every field and both file sizes."""
    idx_path, bin_path = paths(prefix)
    idx = idx_path.read_bytes()
    data = bin_path.read_bytes()

    _check(len(idx) >= HEADER_SIZE, f"{idx_path}: {len(idx)} bytes, shorter than the header")
    _check(idx[:9] == MAGIC, f"{idx_path}: magic {idx[:9]!r}, expected {MAGIC!r}")
    (version,) = struct.unpack_from("<Q", idx, 9)
    _check(version == VERSION, f"{idx_path}: version {version}, expected {VERSION}")
    (code,) = struct.unpack_from("<B", idx, 17)
    _check(code in DTYPE_CODES, f"{idx_path}: unknown dtype code {code}")
    count, document_count = struct.unpack_from("<QQ", idx, 18)

    expected = HEADER_SIZE + count * (4 + 8) + document_count * 8
    _check(
        len(idx) == expected,
        f"{idx_path}: {len(idx)} bytes, but N={count} and D={document_count} make {expected}",
    )
    offset = HEADER_SIZE
    lengths = np.frombuffer(idx, dtype="<i4", count=count, offset=offset).astype(np.int32)
    offset += 4 * count
    pointers = np.frombuffer(idx, dtype="<i8", count=count, offset=offset).astype(np.int64)
    offset += 8 * count
    documents = np.frombuffer(idx, dtype="<i8", count=document_count, offset=offset)
    documents = documents.astype(np.int64)

    _check(bool((lengths >= 0).all()), f"{idx_path}: a negative sequence length")
    # Megatron's builder starts the document indices with 0 and appends len(sequences)
    # at each document's end: never empty, non-decreasing, ending at N.
    _check(document_count >= 1, f"{idx_path}: no document indices (not even the leading 0)")
    _check(int(documents[0]) == 0, f"{idx_path}: document indices start at {documents[0]}")
    _check(bool((np.diff(documents) >= 0).all()), f"{idx_path}: document indices decrease")
    _check(
        int(documents[-1]) == count,
        f"{idx_path}: document indices end at {documents[-1]}, not at N={count}",
    )

    dtype = DTYPE_CODES[code]
    itemsize = dtype.itemsize
    ends = np.cumsum(lengths.astype(np.int64) * itemsize)
    starts = ends - lengths.astype(np.int64) * itemsize
    _check(
        np.array_equal(pointers, starts),
        f"{idx_path}: pointers {pointers.tolist()[:8]}... are not the sequences laid "
        f"end to end from 0 ({starts.tolist()[:8]}...)",
    )
    total = int(ends[-1]) if count else 0
    _check(
        len(data) == total,
        f"{bin_path}: {len(data)} bytes, but the index's sequences take {total}",
    )

    native = dtype.newbyteorder("=")
    sequences = [
        np.frombuffer(data, dtype=dtype, count=int(length), offset=int(pointer)).astype(native)
        for length, pointer in zip(lengths, pointers, strict=True)
    ]
    return MegatronPair(native, lengths, pointers, documents, sequences)


def write_pair(prefix: str | Path, sequences: list[npt.ArrayLike], dtype: npt.DTypeLike) -> None:
    """Write `sequences` as `prefix.idx` + `prefix.bin`, one sequence per document, the way
    Megatron's builder does with one `add_item` + `end_document` per sequence.

    Each sequence must be one-dimensional, and integer tokens must fit `dtype` exactly."""
    code = _code_of(dtype)
    little = DTYPE_CODES[code]
    arrays: list[np.ndarray] = []
    for index, sequence in enumerate(sequences):
        given = np.asarray(sequence)
        _check(given.ndim == 1, f"sequence {index} has shape {given.shape}, not 1-D")
        _check(len(given) < 2**31, f"sequence {index} is too long for an int32 length")
        tokens = given.astype(little)
        if little.kind in "iu":
            _check(
                np.array_equal(tokens, given),
                f"sequence {index} has values that {little} does not hold",
            )
        arrays.append(tokens)

    lengths = np.array([len(tokens) for tokens in arrays], dtype="<i4")
    ends = np.cumsum(lengths.astype(np.int64) * little.itemsize)
    pointers = (ends - lengths.astype(np.int64) * little.itemsize).astype("<i8")
    documents = np.arange(len(arrays) + 1, dtype="<i8")

    idx_path, bin_path = paths(prefix)
    with open(bin_path, "wb") as stream:
        for tokens in arrays:
            stream.write(tokens.tobytes(order="C"))
    with open(idx_path, "wb") as stream:
        stream.write(MAGIC)
        stream.write(struct.pack("<Q", VERSION))
        stream.write(struct.pack("<B", code))
        stream.write(struct.pack("<Q", len(arrays)))
        stream.write(struct.pack("<Q", len(documents)))
        stream.write(lengths.tobytes())
        stream.write(pointers.tobytes())
        stream.write(documents.tobytes())
