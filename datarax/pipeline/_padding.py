"""The padded last batch: every row of the source once an epoch, every batch one shape.

With ``Pipeline(..., drop_remainder=False, pad_remainder=True)`` the last batch of an
epoch, which holds ``r < B`` rows of the source, is filled up to B rows with repeats of
its own rows, by one rule: position p of that batch holds the row at position ``p % r``
of the batch (so the rows that fill it are real rows of the epoch, and stages never see
zeros or an empty batch). The rule is on the global batch, so the rows of a padded
batch are the same whatever the number of hosts, and each host reads only its part.
Every batch then gets a boolean leaf ``"row_mask"``: True on the rows of the source,
False on the filling.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from datarax.pipeline._order import Pick
from datarax.pipeline._permutation import Permutation
from datarax.pipeline._sources import Rows

ROW_MASK = "row_mask"


class RowOrder(Protocol):
    """An epoch order: the source rows at a slice or an array of epoch positions."""

    def __getitem__(self, positions: slice | np.ndarray) -> np.ndarray: ...


class Repeating:
    """The order of a padded batch: epoch position ``start + p``, for p in [0, B), holds
    the row at epoch position ``start + p % real`` of `order` (None: rows in order).

    Example:
        >>> Repeating(None, start=8, real=3)[slice(8, 14)].tolist()
        [8, 9, 10, 8, 9, 10]
    """

    def __init__(self, order: Permutation | None, start: int, real: int):
        self._order, self._start, self._real = order, start, real

    def __getitem__(self, positions: slice | np.ndarray) -> np.ndarray:
        if isinstance(positions, slice):
            positions = np.arange(positions.start, positions.stop)
        wrapped = self._start + (np.asarray(positions) - self._start) % self._real
        return wrapped if self._order is None else self._order[wrapped]


Picks = Callable[[RowOrder | None, int, int], Rows]  # (order, start, stop) -> rows read here


def padded_rows(pick: Picks | None, batch_size: int) -> Pick:
    """`pick` (the rows this host reads of ``order[start:stop]``; None: all of them) for
    batches that are always `batch_size` rows, the last one filled by `Repeating`.

    Example:
        >>> rows = padded_rows(None, batch_size=4)
        >>> rows(None, 0, 4), rows(None, 8, 10).tolist()
        (slice(0, 4, None), [8, 9, 8, 9])
    """

    def rows(order: Permutation | None, start: int, stop: int) -> Rows:
        padded: RowOrder | None = order
        if stop - start < batch_size:
            padded, stop = Repeating(order, start, stop - start), start + batch_size
        if pick is not None:
            return pick(padded, start, stop)
        return slice(start, stop) if padded is None else padded[slice(start, stop)]

    return rows


def host_row_mask(batch_size: int, real: int) -> np.ndarray:
    """The ``"row_mask"`` of a host batch of `batch_size` rows whose first `real` are
    the source's.

    Example:
        >>> host_row_mask(4, 3).tolist()
        [True, True, True, False]
    """
    return np.arange(batch_size) < real


def with_row_mask(batch: Any, mask: Any) -> Any:
    """A shallow copy of the dict `batch` with `mask` as its ``"row_mask"``.

    Raises:
        TypeError: `batch` is not a dict.
        ValueError: `batch` has a ``"row_mask"`` already.

    Example:
        >>> sorted(with_row_mask({"x": np.zeros(2)}, np.array([True, False])))
        ['row_mask', 'x']
    """
    if not isinstance(batch, dict):
        raise TypeError(
            f"pad_remainder=True adds a {ROW_MASK!r} leaf to every batch, so a batch must "
            f"be a dict after the stages; got {type(batch).__name__}. Return a dict from "
            "the last stage (e.g. {'x': ...}), or pass pad_remainder=False."
        )
    if ROW_MASK in batch:
        raise ValueError(
            f"pad_remainder=True adds a {ROW_MASK!r} leaf to every batch, but this batch "
            f"has one already (keys {sorted(map(str, batch))}). Rename that key in the "
            "source or the stages, or pass pad_remainder=False."
        )
    marked = copy.copy(batch)
    marked[ROW_MASK] = mask
    return marked
