"""Flat token files: every document's tokens back to back, each document ending with an
end-of-text id, in a ``.npy`` file (its dtype in its header) or a raw ``.bin`` (its dtype
given), as OLMo and others keep them.

A document ends with, and holds, the end-of-text id; tokens after the last one are the
last document. The index (where each document starts and how long it is) is found in
one pass over the tokens, read in chunks, and kept in the cache as an index of
Megatron's format over the file, so the file is then read exactly as a Megatron pair is:
its index mapped, a document one read of its bytes.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from datarax.errors import DocumentFormatError
from datarax.pipeline.documents._index import cached_folder, entry_name
from datarax.pipeline.documents._megatron import CODES, IndexedPair, token_dtype, write_index
from datarax.pipeline.documents._storage import open_binary, stamp_of

_CHUNK_TOKENS = 1 << 24
_INT32_MAX = np.iinfo(np.int32).max


def _npy_layout(path: str) -> tuple[int, np.dtype]:
    """Where the array of the ``.npy`` file `path` starts, and its dtype, from its header."""
    format_ = np.lib.format
    header_2 = format_.read_array_header_2_0
    try:
        with open_binary(path) as file:
            version = format_.read_magic(file)
            header = format_.read_array_header_1_0
            shape, fortran, dtype = (header if version == (1, 0) else header_2)(file)
            offset = file.tell()
    except (ValueError, OSError) as error:
        raise DocumentFormatError(f"{path} is not a .npy file ({error}).", path=path) from None
    if len(shape) != 1 or dtype.hasobject:
        raise DocumentFormatError(
            f"{path} holds an array of shape {shape}; a flat token file is 1-D: "
            "every document's tokens back to back.",
            path=path,
        )
    del fortran  # a 1-D array is laid out the same either way
    size = stamp_of(path)[0]
    if size != offset + shape[0] * dtype.itemsize:
        raise DocumentFormatError(
            f"{path} has {size - offset} bytes of data where its header says {shape[0]} {dtype} "
            "values: it is cut short or damaged.",
            path=path,
        )
    return offset, dtype


def layout(path: str, dtype: Any) -> tuple[int, np.dtype]:
    """The byte where the tokens of `path` start, and their dtype: a ``.npy`` file's from
    its header, a raw ``.bin``'s given as `dtype`.

    Raises:
        DocumentFormatError: not an integer dtype Megatron's format holds, big-endian, or
            a raw file without `dtype`.
    """
    if path.lower().endswith(".npy"):
        offset, found = _npy_layout(path)
    elif dtype is None:
        raise DocumentFormatError(
            f"{path} is a raw token file: pass dtype= (e.g. dtype=np.uint16) and eos_id=, "
            "or, if it is the .bin of a Megatron pair, pass the prefix (the path without "
            "'.bin').",
            path=path,
        )
    else:
        offset, found = 0, token_dtype(dtype)
    if found.kind not in "iu" or found not in CODES.values():
        raise DocumentFormatError(
            f"{path} holds {found}, not token ids of a dtype Megatron's format keeps (uint8, "
            "int8, int16, uint16, int32, int64).",
            path=path,
        )
    if found.byteorder == ">":
        raise DocumentFormatError(f"{path} is big-endian; save it little-endian.", path=path)
    return offset, found.newbyteorder("=")


def check_eos(eos_id: Any, dtype: np.dtype, path: str) -> int:
    """`eos_id` once it is an int that `dtype` holds.

    Raises:
        TypeError: it is not an int.
        ValueError: `dtype` does not hold it.
    """
    if not isinstance(eos_id, (int, np.integer)) or isinstance(eos_id, (bool, np.bool_)):
        raise TypeError(f"eos_id must be an int token id, got {type(eos_id).__name__}.")
    limits = np.iinfo(dtype)
    if not limits.min <= eos_id <= limits.max:
        raise ValueError(
            f"eos_id {eos_id} is outside the range of {path}'s tokens ({dtype}: "
            f"{limits.min}..{limits.max}), so no document could end with it."
        )
    return int(eos_id)


def _write_lengths(path: str, offset: int, dtype: np.dtype, eos_id: int, target: str) -> None:
    """Each document's length, found in one pass over the tokens a chunk at a time and
    written to `target` as int32 as they come (nothing of the corpus's size is held)."""
    begin = seen = 0  # where the document being read begins; tokens read so far
    with open_binary(path) as file, open(target, "wb") as out:
        file.seek(offset)
        while (tokens := np.frombuffer(file.read(_CHUNK_TOKENS * dtype.itemsize), dtype)).size:
            ends = np.flatnonzero(tokens == eos_id).astype(np.int64) + seen + 1
            if ends.size:
                _checked(np.diff(ends, prepend=begin), path, eos_id).tofile(out)
                begin = int(ends[-1])
            seen += tokens.size
        if begin != seen:  # the tail after the last end-of-text id
            _checked(np.array([seen - begin]), path, eos_id).tofile(out)


def _checked(lengths: np.ndarray, path: str, eos_id: int) -> np.ndarray:
    if lengths.max() > _INT32_MAX:
        raise DocumentFormatError(
            f"{path} has a document of {lengths.max()} tokens, more than an index of "
            f"Megatron's format counts (int32): is eos_id={eos_id} the right id?",
            path=path,
        )
    return lengths.astype("<i4")


def open_flat(path: str, dtype: Any, eos_id: Any, cache_dir: str) -> IndexedPair:
    """The documents of the flat token file `path`, its index found once and cached."""
    offset, found = layout(path, dtype)
    eos = check_eos(eos_id, found, path)
    stamp = stamp_of(path)
    if (stamp[0] - offset) % found.itemsize:
        raise DocumentFormatError(
            f"{path} has {stamp[0] - offset} bytes of tokens, not a whole number of {found} "
            "tokens: is the dtype right?",
            path=path,
        )

    def make(folder: str) -> None:
        lengths = os.path.join(folder, "lengths")
        _write_lengths(path, offset, found, eos, lengths)
        empty = not os.path.getsize(lengths)  # a map of an empty file cannot be made
        mapped = np.zeros(0, np.int32) if empty else np.memmap(lengths, np.int32, "r")
        write_index(os.path.join(folder, "index.idx"), mapped, found)
        del mapped
        os.unlink(lengths)

    key = f"v1\0{path}\0{stamp}\0{found.str}\0{eos}\0{offset}"
    folder = cached_folder(cache_dir, entry_name("flat", path), key, make)
    return IndexedPair(
        os.path.join(folder, "index.idx"), path, bin_offset=offset, cache_dir=cache_dir
    )
