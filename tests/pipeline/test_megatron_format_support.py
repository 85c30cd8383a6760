"""`_support.megatron_format`, the independent Megatron `.bin` + `.idx` reader and writer that
other tests check the library against: what it writes it reads back, and it refuses a pair
with a wrong magic, a wrong version or a cut index."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import numpy as np
import pytest
from _support.megatron_format import (
    HEADER_SIZE,
    MegatronFormatError,
    paths,
    read_pair,
    write_pair,
)


@pytest.mark.parametrize("dtype", [np.uint16, np.int32, np.int64])
@pytest.mark.parametrize(
    "lengths", [[], [0], [3, 0, 5, 0], [1, 7, 2]], ids=["none", "empty", "gaps", "plain"]
)
def test_round_trip(tmp_path: Path, dtype: type[np.integer], lengths: list[int]) -> None:
    rng = np.random.default_rng(len(lengths))
    high = int(np.iinfo(dtype).max)
    sequences = [rng.integers(0, high, size=n, endpoint=True, dtype=dtype) for n in lengths]
    prefix = tmp_path / "data.v1"  # a dot in the prefix: the suffix is appended
    write_pair(prefix, sequences, dtype)

    pair = read_pair(prefix)
    idx_path, bin_path = paths(prefix)
    count = len(lengths)
    assert pair.dtype == np.dtype(dtype)
    assert pair.lengths.tolist() == lengths
    assert pair.document_indices.tolist() == list(range(count + 1))
    assert len(pair.sequences) == count
    for got, want in zip(pair.sequences, sequences, strict=True):
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got, want)
    assert bin_path.stat().st_size == sum(lengths) * np.dtype(dtype).itemsize
    assert idx_path.stat().st_size == HEADER_SIZE + 12 * count + 8 * (count + 1)


def _spoil(path: Path, offset: int, data: bytes) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset : offset + len(data)] = data
    path.write_bytes(bytes(raw))


REFUSALS = {
    "magic": "magic b'MMIDIDY",
    "version": "version 2, expected 1",
    "dtype": "unknown dtype code 9",
    "cut idx": "but N=2 and D=3 make",
    "long bin": "28 bytes, but the index's sequences take 24",
}


@pytest.mark.parametrize("damage", list(REFUSALS))
def test_refuses_a_damaged_pair(tmp_path: Path, damage: str) -> None:
    prefix = tmp_path / "data"
    write_pair(prefix, [np.arange(4), np.arange(2)], np.int32)
    read_pair(prefix)
    idx_path, bin_path = paths(prefix)
    if damage == "magic":
        _spoil(idx_path, 0, b"MMIDIDY")
    elif damage == "version":
        _spoil(idx_path, 9, struct.pack("<Q", 2))
    elif damage == "dtype":
        _spoil(idx_path, 17, b"\x09")
    elif damage == "cut idx":
        idx_path.write_bytes(idx_path.read_bytes()[:-8])
    else:
        bin_path.write_bytes(bin_path.read_bytes() + b"\x00" * 4)
    with pytest.raises(MegatronFormatError, match=re.escape(REFUSALS[damage])):
        read_pair(prefix)


def test_writer_refuses_what_the_dtype_cannot_hold(tmp_path: Path) -> None:
    with pytest.raises(MegatronFormatError, match="does not hold"):
        write_pair(tmp_path / "a", [np.array([65536])], np.uint16)
    with pytest.raises(MegatronFormatError, match="does not hold"):
        write_pair(tmp_path / "b", [np.array([-1])], np.uint16)
    with pytest.raises(MegatronFormatError, match="not 1-D"):
        write_pair(tmp_path / "c", [np.zeros((2, 2))], np.int32)
    with pytest.raises(MegatronFormatError, match="no Megatron code"):
        write_pair(tmp_path / "d", [np.array([1])], np.uint32)
