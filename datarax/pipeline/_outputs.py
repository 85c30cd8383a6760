"""A stage's output arrays, made where they travel: in a worker, in the shared memory
that carries the batch back to the pipeline's process.

`output_array` and `output_like` are ``np.empty`` and ``np.empty_like`` for the arrays a
host stage returns. In a pipeline's worker process (``workers=N``) each is made in the
shared-memory slot that the pipeline's process lent with the task, so the batch crosses
with no copy: the stage writes its result where the pipeline's process reads it. Anywhere
else (``workers=0``, code outside a stage, no pipeline at all) they are plain numpy
arrays, so the same stage runs either way and gives the same values.

When it helps, in one rule: an array made with it that the stage returns as a leaf of its
batch (whole, or as a C-contiguous view of it) is not copied; every other array the stage
returns is copied into the slot once, as without it. The saving is one copy of those
bytes per batch, in the worker (``time_report().copied_mb`` shows the megabytes a batch
still copied). What it does not do:

- An array larger than what is left of the slot is a plain array, copied once: the
  first batches of a pipeline (before it knows their size, no slot is lent) and a batch
  larger than the recent ones. The next slots are sized for the whole batch, so from
  then on it is made in place.
- An array made with it but not returned (a scratch buffer) takes room in the slot for
  nothing: make those with ``np.empty``.
- In a worker, the array belongs to the batch once the stage returns it: a stage that
  keeps it (to reuse next time) would see it change when the slot is lent again.
"""

from __future__ import annotations

import contextlib
import math
import operator
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from datarax.errors import OutputArrayError

# Makes an array of (shape, dtype) in a slot; None when the slot has no room left.
Area = Callable[[tuple[int, ...], np.dtype], "np.ndarray | None"]
_area: Area | None = None  # set in a worker while it makes a batch


@contextlib.contextmanager
def lending(area: Area | None) -> Iterator[None]:
    """`output_array` makes its arrays with `area` inside this block (a worker's batch)."""
    global _area
    previous, _area = _area, area
    try:
        yield
    finally:
        _area = previous


def _shape(shape: int | Sequence[int]) -> tuple[int, ...]:
    if isinstance(shape, Sequence):
        return tuple(operator.index(size) for size in shape)
    return (operator.index(shape),)


def output_array(shape: int | Sequence[int], dtype: DTypeLike) -> np.ndarray:
    """An uninitialized C-ordered array for a host stage to fill and return: made in the
    slot that carries the batch back when the stage runs in a pipeline's worker, a plain
    ``np.empty(shape, dtype)`` anywhere else (see the module's docstring for the rule).

    Raises:
        OutputArrayError: `dtype` holds Python objects, which shared memory cannot carry
            (make such a leaf with ``np.empty``: it is pickled).

    Example:
        >>> def flip(batch):
        ...     images = output_like(batch["image"])
        ...     images[...] = batch["image"][:, :, ::-1]
        ...     return {"image": images, "label": batch["label"]}
        >>> source = {"image": np.arange(12).reshape(3, 2, 2), "label": np.arange(3)}
        >>> [b["image"][0].tolist() for b in Pipeline(source=source, stages=[flip], batch_size=1)]
        [[[1, 0], [3, 2]], [[5, 4], [7, 6]], [[9, 8], [11, 10]]]
        >>> output_array((2, 3), np.uint8).shape  # outside a stage: a plain array
        (2, 3)
    """
    dims, kind = _shape(shape), np.dtype(dtype)
    if kind.hasobject:
        raise OutputArrayError(
            f"output_array({dims}, {kind}) asks for an array of Python objects, which "
            "shared memory cannot carry between processes (each element is a reference "
            f"into one process's memory; {math.prod(dims)} of them here). Make that leaf "
            "with np.empty: it is pickled, as every object leaf is.",
            dtype=str(kind),
        )
    area = _area
    made = area(dims, kind) if area is not None and min(dims, default=1) > 0 else None
    return np.empty(dims, kind) if made is None else made


def output_like(array: Any) -> np.ndarray:
    """`output_array` with the shape and dtype of `array` (a numpy or jax array, or
    anything with ``shape`` and ``dtype``), always C-ordered.

    Raises:
        OutputArrayError: `array`'s dtype holds Python objects.

    Example:
        >>> output_like(np.zeros((4, 2), np.float32)).dtype
        dtype('float32')
    """
    return output_array(array.shape, array.dtype)
