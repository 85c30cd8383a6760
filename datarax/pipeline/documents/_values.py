"""What a document is: a read-only 1-D numpy array of integers, checked where it enters.

Shared by every kind of `Documents`: `as_document` turns one record (an array, a list of
ints, a dict holding the tokens) into a document or names what is wrong with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from datarax.errors import DocumentError, DocumentFieldError


def read_only(array: np.ndarray) -> np.ndarray:
    """`array`, or a read-only view of it when it is writeable (the caller's stays so)."""
    if array.flags.writeable:
        array = array.view()
        array.setflags(write=False)
    return array


def where(index: int, path: str | None, place: str = "") -> str:
    """How an error names a document: ``document 3`` or ``document 3 (line 4 of f.jsonl)``."""
    if path is None:
        return f"document {index}"
    return f"document {index} ({place + ' of ' if place else 'in '}{path})"


def _describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"an array of dtype {value.dtype} and shape {value.shape}"
    return f"a {type(value).__name__}: {value!r:.60}"


def field_of(record: Any, index: int, field: str, path: str | None, place: str, holds: str) -> Any:
    """`record[field]` where `record` is a mapping (`record` itself otherwise); `holds`
    says what the field holds, for the error.

    Raises:
        DocumentFieldError: `record` is a mapping without `field`.

    Example:
        >>> field_of({"text": "hi"}, 0, "text", None, "", "the text")
        'hi'
    """
    if not isinstance(record, Mapping):
        return record
    if field not in record:
        keys = [str(key) for key in record]
        raise DocumentFieldError(
            f"{where(index, path, place)} has no field {field!r}; its fields are {keys}. "
            f"Pass field= the one that holds {holds}.",
            field=field,
            columns=keys,
            index=index,
            path=path,
        )
    return record[field]


def item_at(data: Any, index: int) -> Any:
    """`data[index]`, an item of a sequence read by position.

    Raises:
        TypeError: `data` raised KeyError or IndexError for a position in range (it is
            read by label: a pandas Series).
    """
    try:
        return data[index]
    except (KeyError, IndexError) as error:
        raise TypeError(
            f"data[{index}] raised {type(error).__name__} ({error}), but data has "
            f"{len(data)} items: Documents reads a sequence by position, 0 to len - 1. A "
            "pandas Series is read by label: pass series.to_list()."
        ) from None


def as_document(
    record: Any, index: int, field: str, path: str | None = None, place: str = ""
) -> np.ndarray:
    """The document in `record` (1-D integers, or a mapping holding them under `field`)
    as a read-only array of its own dtype; a list of Python ints becomes int64, and an
    empty list an empty int64 array.

    Raises:
        DocumentFieldError: `record` is a mapping without `field`.
        DocumentError: the tokens are not 1-D integers.

    Example:
        >>> as_document({"tokens": [5, 6, 7]}, 0, "tokens")
        array([5, 6, 7])
    """
    name = where(index, path, place)
    tokens = field_of(record, index, field, path, place, "the tokens")
    if isinstance(tokens, (str, bytes)):
        array = None
    else:
        try:
            array = np.asarray(tokens)
        except (ValueError, TypeError, OverflowError):  # ragged, or ints beyond any dtype
            array = None
    if array is not None and array.ndim == 1 and array.dtype.kind in "iu":
        return read_only(array)
    if array is not None and array.shape == (0,) and not isinstance(tokens, np.ndarray):
        return read_only(np.empty(0, np.int64))  # an empty list
    raise DocumentError(
        f"{name} is {_describe(tokens)}, not a 1-D sequence of integers. Every document "
        "must be token ids: tokenize text first (or pass tokenizer=), and make each "
        "document a flat list.",
        index=index,
        path=path,
    )
