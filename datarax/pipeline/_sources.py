"""Data sources for `Pipeline`, and reading a set of rows from any of them.

A source is anything with ``__len__`` and ``__getitem__(int)`` returning one record:
an `ArraySource` (a dict or tuple of arrays, memory-mapped ``.npy`` files included), a list,
or a Grain data source such as ``ArrayRecordDataSource``. `read_rows` reads exactly
the rows asked for (one gather per leaf for an `ArraySource`, ``__getitems__`` when
the source has it) and returns them as one batch whose arrays are read-only, so no
stage can write into the caller's data.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import jax
import numpy as np

from datarax._trees import (
    check_keys_sortable,
    check_known_container,
    check_not_deleted,
    check_rows_agree,
    flatten_with_names,
)
from datarax.errors import LeafValueError, SourceChangedError
from datarax.pipeline._stages import stop_iteration_error

Rows = slice | np.ndarray
_STACKABLE = (np.ndarray, np.generic, int, float, bool, complex)


class RandomAccessSource(Protocol):
    """Anything with a length and integer indexing that returns one record."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Any: ...


def _read_only(leaf: Any) -> Any:
    if isinstance(leaf, np.ndarray) and leaf.flags.writeable:
        leaf = leaf.view()
        leaf.setflags(write=False)  # twice as fast as assigning flags.writeable
    return leaf


def _frozen(part: Any) -> Any:
    if isinstance(part, np.ndarray) and part.flags.writeable:
        part.flags.writeable = False
    return part


class ArraySource:
    """An in-memory source: a pytree (usually a dict) of arrays with equal row counts.

    Indexing with an int returns one record; with a slice or an integer array it
    returns a whole batch in one gather per leaf. The arrays it returns are read-only
    (views of the source, or copies for an integer array), so nothing written through
    them can change the source. Memory-mapped arrays
    (``np.load(path, mmap_mode="r")``) stay on disk: only the rows asked for are read.

    Example:
        >>> source = ArraySource({"x": np.arange(6), "y": np.arange(6) * 10})
        >>> len(source), source[2]
        (6, {'x': np.int64(2), 'y': np.int64(20)})
        >>> source[np.array([0, 5])]["y"]
        array([ 0, 50])
    """

    def __init__(self, data: Any):
        named, self._treedef = flatten_with_names(data, "source")
        if not named:
            raise ValueError("source has no arrays; pass e.g. {'image': images, 'label': labels}.")
        for name, leaf in named:
            check_not_deleted(name, leaf)
            check_known_container(name, leaf)
        # Read-only views (a memmap stays on disk): a slice of one is read-only already.
        self._leaves = [_read_only(np.asarray(leaf)) for _, leaf in named]
        for (name, _), leaf in zip(named, self._leaves, strict=True):
            if leaf.ndim == 0:
                raise ValueError(
                    f"{name} is a scalar; every leaf of a source needs one row per example."
                )
        check_rows_agree(
            [(name, len(leaf)) for (name, _), leaf in zip(named, self._leaves, strict=True)]
        )
        self._length = len(self._leaves[0])

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: int | slice | np.ndarray) -> Any:
        if isinstance(index, slice):  # views of read-only leaves, read-only themselves
            parts = [leaf[index] for leaf in self._leaves]
        else:  # an integer array gathers a copy, which nothing else refers to yet
            parts = [_frozen(leaf[index]) for leaf in self._leaves]
        return self._treedef.unflatten(parts)  # jax.tree_util.tree_unflatten, one call less

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Unpickled (in a worker), numpy's arrays are writeable again.
        self.__dict__.update(state)
        self._leaves = [_read_only(leaf) for leaf in self._leaves]


def as_source(source: Any) -> ArraySource | RandomAccessSource:
    """`source` as a pipeline reads it, by one rule: a dict, a tuple (a namedtuple too) or
    one array, or any other pytree ``jax.tree_util`` splits (a registered dataclass, say)
    without ``__len__`` and ``__getitem__``, becomes an `ArraySource` of those columns;
    anything else with ``__len__`` and ``__getitem__`` (a list of records, a Grain data
    source) is read as it is, one record per index.

    Raises:
        TypeError: `source` is neither.

    Example:
        >>> type(as_source({"x": np.arange(4)})).__name__, type(as_source([1, 2])).__name__
        ('ArraySource', 'list')
        >>> len(as_source((np.arange(64), np.arange(64))))  # two columns of 64 rows
        64
    """
    if isinstance(source, (Mapping, tuple, np.ndarray, jax.Array)):
        return ArraySource(source)
    if hasattr(source, "__len__") and hasattr(source, "__getitem__"):
        return source
    if not jax.tree_util.treedef_is_leaf(jax.tree_util.tree_structure(source)):
        return ArraySource(source)  # a pytree of arrays
    raise TypeError(
        f"source must be a dict (or other pytree) of arrays, or have __len__ and "
        f"__getitem__, got {type(source).__name__}."
    )


def check_length(source: ArraySource | RandomAccessSource, built: int) -> None:
    """Raises `SourceChangedError` when `source` no longer has the `built` rows it had
    when its pipeline was built (batches and states follow from that length)."""
    now = len(source)
    if now != built:
        raise SourceChangedError(
            f"The source had {built} rows when the pipeline was built and has {now} now. "
            "Batches and states follow from the source's length, so build a new Pipeline "
            "over the changed source.",
            built=built,
            now=now,
        )


def _indices(rows: Rows, length: int) -> list[int]:
    if isinstance(rows, slice):
        return list(range(*rows.indices(length)))
    return [int(i) for i in rows]


def _beyond_int64(value: Any) -> bool:
    return type(value) is int and not -(2**63) <= value < 2**63


def _collate(records: list[Any], indices: list[int]) -> Any:
    """One batch from records: arrays and numbers are stacked; anything else is a list."""
    if not records:
        return records
    named, treedef = flatten_with_names(records[0], f"source[{indices[0]}]")
    columns: list[list[Any]] = [[] for _ in named]
    for record, index in zip(records, indices, strict=True):
        try:
            leaves, structure = jax.tree_util.tree_flatten(record)
        except (TypeError, ValueError):
            check_keys_sortable(record, f"source[{index}]")
            raise
        if structure != treedef:
            raise ValueError(
                f"source[{index}] has structure {structure}, but source[{indices[0]}] has "
                f"{treedef}. Every record must have the same structure; fix the source or "
                "make the records uniform before they reach the pipeline."
            )
        for column, leaf in zip(columns, leaves, strict=True):
            column.append(leaf)
    batch = []
    for (name, _), values in zip(named, columns, strict=True):
        column = [np.asarray(v) if isinstance(v, jax.Array) else v for v in values]
        if not all(isinstance(v, _STACKABLE) for v in column):
            batch.append(column)  # bytes, strings, objects: a list for a host stage to decode
            continue
        shapes = [np.shape(value) for value in column]
        odd = next((k for k, shape in enumerate(shapes) if shape != shapes[0]), None)
        if odd is not None:
            documents = len(shapes[0]) == len(shapes[odd]) == 1
            hint = " (token documents: pack them into rows, Packed(documents, length))"
            raise ValueError(
                f"Records differ in shape: {name} has shape {shapes[0]}, but the same leaf "
                f"of source[{indices[odd]}] has {shapes[odd]}. Stacking rows needs one shape: "
                f"pad or crop the records in the source{hint if documents else ''}."
            )
        dtypes = [getattr(value, "dtype", None) for value in column]
        odd = next((k for k, d in enumerate(dtypes) if d is not None and d != dtypes[0]), None)
        if odd is not None and dtypes[0] is not None:
            raise ValueError(
                f"Records differ in dtype: {name} is {dtypes[0]}, but the same leaf of "
                f"source[{indices[odd]}] is {dtypes[odd]}. Stacking would silently convert "
                "one of them: give every record the same dtype in the source."
            )
        odd = next((k for k, v in enumerate(column) if _beyond_int64(v)), None)
        if odd is not None:
            path = name[len(f"source[{indices[0]}]") :]
            raise LeafValueError(
                f"source[{indices[odd]}]{path} is the python int {column[odd]}, which int64 "
                "does not hold: the rows would stack into floats (losing digits) or objects. "
                "Store it as a float, or split it into smaller numbers.",
                leaf=f"batch{path}",
            )
        batch.append(np.stack(column))
    return jax.tree_util.tree_unflatten(treedef, batch)


@dataclasses.dataclass(frozen=True)
class EpochRows:
    """Rows of the epoch whose basis is `basis` (JSON), of a source that changes by epoch
    (see `datarax.pipeline._epochs`)."""

    basis: str
    rows: Rows


def read_rows(source: ArraySource | RandomAccessSource, rows: Rows | EpochRows) -> Any:
    """The records `rows` of `source` as one batch of read-only arrays, in `rows` order.

    `rows` of an epoch of a source that changes by epoch (`datarax.pipeline._epochs`) are
    read from that epoch's records.

    Raises:
        StageStopIterationError: the source's ``__getitem__`` raised StopIteration.
    """
    if isinstance(rows, EpochRows):
        source, rows = source.for_epoch(json.loads(rows.basis)), rows.rows  # type: ignore[union-attr]
    if isinstance(source, ArraySource):
        return source[rows]  # read-only already
    indices = _indices(rows, len(source))
    getitems: Callable[[list[int]], Iterable[Any]] | None = getattr(source, "__getitems__", None)
    try:
        records = list(getitems(indices)) if callable(getitems) else [source[i] for i in indices]
    except StopIteration as error:
        raise stop_iteration_error("the source's __getitem__", error) from error
    return jax.tree_util.tree_map(_read_only, _collate(records, indices))
