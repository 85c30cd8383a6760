"""What a documents source is, and the rules that check what reaches one.

A documents source (`Documents`, `Mixture`, or one of your own) has ``lengths`` (every
document's token count, known before any document is read), ``len()``, ``source[i]``
(one document) and ``source.read(indices)`` (several at once, in the order asked): the
one batched read that `Packed` and `Mixture` call; a source may also have
``source.read_pieces(indices, starts, sizes)`` (a piece of each document), which `Packed`
calls instead, so that a row's pieces of a long document are read, not all of it.
Three rules hold for all of them:

- an index (`one_index`) is one int, negative from the end, and a batch of indices
  (`many_indices`) a 1-D sequence of ints; bools and floats are neither;
- lengths (`check_lengths`) are a 1-D integer array of non-negative counts, one a
  document;
- a source handed to `Packed` or `Mixture` (`source_lengths`) has all four members, and
  its lengths pass the lengths rule. The library's own sources checked theirs where they
  read them (a store's index of a billion entries is not read again): they subclass
  `CheckedLengths`, and only their shape and dtype are checked here.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import numpy as np

from datarax.pipeline.documents._values import read_only


class DocumentSource(Protocol):
    """Documents by index, and all their lengths up front."""

    @property
    def lengths(self) -> np.ndarray: ...

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> np.ndarray: ...

    def read(self, indices: Sequence[int] | np.ndarray) -> list[np.ndarray]: ...


def pieces_of(
    source: Any, indices: np.ndarray, starts: np.ndarray, sizes: np.ndarray
) -> list[np.ndarray]:
    """Tokens ``[start, start + size)`` of each document `indices` of `source` (in range):
    through its ``read_pieces`` where it has one (a token store then fetches only those
    bytes), else cut from the whole documents `read` returns.

    Example:
        >>> pieces_of([[1, 2, 3], [4, 5]], np.array([1, 0]), np.array([1, 0]), np.array([1, 2]))
        [[5], [1, 2]]
    """
    read_pieces = getattr(source, "read_pieces", None)
    if read_pieces is not None:
        return read_pieces(indices, starts, sizes)
    read = source.read(indices) if hasattr(source, "read") else [source[i] for i in indices]
    return [
        tokens[start : start + size]
        for tokens, start, size in zip(read, starts.tolist(), sizes.tolist(), strict=True)
    ]


class CheckedLengths:
    """A source whose ``lengths`` were checked (integers, not negative) when it was built."""


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def one_index(index: Any, count: int, what: str) -> int:
    """`index` (an int; negative counts from the end) as a position in ``[0, count)``;
    `what` names the items in errors, e.g. ``"packed rows"``.

    Raises:
        TypeError: `index` is not an int (a bool or a float is not).
        IndexError: it is out of range.

    Example:
        >>> one_index(-1, 5, "documents")
        4
    """
    if not _is_int(index):
        raise TypeError(
            f"{what.capitalize()} are indexed by one int, got {type(index).__name__}: "
            f"{index!r:.100}; use read(indices) for several."
        )
    if not -count <= index < count:
        raise IndexError(
            f"Index {index} is out of range for {count} {what}: an index must be in "
            f"[-{count}, {count})."
        )
    return int(index) % count


def many_indices(indices: Iterable[int] | np.ndarray, count: int, what: str) -> np.ndarray:
    """`indices` (a 1-D sequence of ints; negatives count from the end) as int64
    positions in ``[0, count)``, in the order given, repeats kept.

    Raises:
        TypeError: they are not ints (bools and floats are not), or not 1-D.
        IndexError: one is out of range.

    Example:
        >>> many_indices([2, -1, 0], 4, "documents").tolist()
        [2, 3, 0]
    """
    try:
        asked = np.asarray(indices if isinstance(indices, np.ndarray) else list(indices))
    except (TypeError, ValueError):  # not iterable, or ragged
        asked = np.asarray(None)
    if asked.ndim != 1 or (asked.size and asked.dtype.kind not in "iu"):
        raise TypeError(
            f"Indices of {what} must be a 1-D sequence of ints, got dtype {asked.dtype} and "
            f"shape {asked.shape}; use source[i] for one."
        )
    asked = asked.astype(np.int64)
    wrong = np.flatnonzero((asked < -count) | (asked >= count))
    if wrong.size:
        raise IndexError(
            f"Index {asked[wrong[0]]} is out of range for {count} {what}: an index must be "
            f"in [-{count}, {count})."
        )
    asked[asked < 0] += count
    return asked


def check_lengths(lengths: Any, name: str = "lengths", count: int | None = None) -> np.ndarray:
    """`lengths` as a read-only 1-D integer array (its own dtype; a list gives int64),
    once every entry is a non-negative count, and, with `count`, one a document.

    Raises:
        TypeError: `lengths` does not hold integers.
        ValueError: it is not 1-D, holds a negative length or a count beyond int64, or
            has another number of entries than `count`.

    Example:
        >>> check_lengths([3, 0, 5])
        array([3, 0, 5])
    """
    array = _shaped(lengths, name, count)
    negative = np.flatnonzero(array < 0)
    if negative.size:
        first = int(negative[0])
        raise ValueError(
            f"{name}[{first}] is {array[first]}; a document's length cannot be negative."
        )
    if array.dtype.kind == "u" and array.size and array.max() >= 2**63:
        raise ValueError(f"{name} holds {array.max()}, more tokens than int64 counts.")
    return read_only(array)


def _shaped(lengths: Any, name: str, count: int | None) -> np.ndarray:
    try:
        array = np.asarray(lengths)
    except (TypeError, ValueError, OverflowError):  # ragged, or ints beyond any dtype
        raise TypeError(
            f"{name} must be a 1-D array of integers, one document's token count each, got "
            f"{type(lengths).__name__}: {lengths!r:.100}."
        ) from None
    if array.size == 0 and array.dtype.kind not in "iu":
        array = array.astype(np.int64)  # an empty list
    if array.dtype.kind not in "iu":
        raise TypeError(
            f"{name} must hold integers, one document's token count each, got dtype {array.dtype}."
        )
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D, one entry per document, got shape {array.shape}.")
    if count is not None and len(array) != count:
        raise ValueError(
            f"{name} has {len(array)} entries for {count} documents; give one length per "
            "document, in order."
        )
    return array


def source_lengths(name: str, documents: Any) -> np.ndarray:
    """The lengths of `documents`, a source handed to `Packed` or `Mixture` as `name`,
    checked by the rules above.

    Raises:
        TypeError: `documents` lacks a member of a source, or its lengths are not integers.
        ValueError: its lengths are not one non-negative count a document.
    """
    members = ("lengths", "__len__", "__getitem__", "read")
    missing = [member for member in members if not hasattr(documents, member)]
    if missing:
        raise TypeError(
            f"{name} must be documents (datarax.pipeline.Documents or Mixture, or a source "
            f"with lengths, __len__, __getitem__ and read), got {type(documents).__name__}, "
            f"which has no {', '.join(missing)}; wrap a list of token arrays as "
            "Documents(the_list)."
        )
    lengths, count = documents.lengths, len(documents)
    if isinstance(documents, CheckedLengths):
        return read_only(_shaped(lengths, f"{name}.lengths", count))
    return check_lengths(lengths, f"{name}.lengths", count)
