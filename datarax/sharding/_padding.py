"""Pad a batch to a multiple of the device count, with a mask that marks real rows."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from datarax._trees import check_leaf_kind, check_rows_agree, flatten_with_names
from datarax._validate import check_int

MAX_MULTIPLE = 2**20  # more devices than any mesh has; padding is bounded by it


def pad_to_multiple(batch: Any, multiple: int) -> tuple[Any, np.ndarray]:
    """Pads every leaf of `batch` along axis 0 to a multiple of `multiple` rows.

    Padding rows are zeros. The returned boolean mask is True for the original rows
    and False for padding, so metrics computed as ``sum(x * mask) / sum(mask)`` are
    exactly those of the unpadded batch. The input is not modified.

    Args:
        batch: a pytree of arrays that all have the same number of rows.
        multiple: the row count to round up to, usually the size of the data axis.

    Returns:
        ``(padded_batch, mask)`` with ``mask.shape == (padded_rows,)``.

    Raises:
        TypeError: `multiple` is not an int, a leaf cannot be placed on devices, or a
            dict's keys cannot be sorted.
        ValueError: `multiple` is not in [1, 2**20], a leaf is 0-d or the leaves
            differ in their number of rows.

    Example:
        >>> padded, mask = pad_to_multiple({"x": np.arange(5)}, 4)
        >>> padded["x"]
        array([0, 1, 2, 3, 4, 0, 0, 0])
        >>> mask
        array([ True,  True,  True,  True,  True, False, False, False])
    """
    multiple = check_int(
        "multiple",
        multiple,
        maximum=MAX_MULTIPLE,
        meaning="the row count to round up to, usually a device count",
    )
    named_shapes = []
    for name, leaf in flatten_with_names(batch)[0]:
        check_leaf_kind(name, leaf)
        if np.ndim(leaf) == 0:
            raise ValueError(
                f"{name} is 0-d; pad_to_multiple pads rows, so every leaf needs axis 0."
            )
        named_shapes.append((name, tuple(np.shape(leaf))))
    check_rows_agree([(name, shape[0]) for name, shape in named_shapes])
    rows = named_shapes[0][1][0] if named_shapes else 0
    padded_rows = -(-rows // multiple) * multiple

    def pad(leaf: Any) -> np.ndarray:
        host = np.asarray(leaf)
        widths = [(0, padded_rows - rows)] + [(0, 0)] * (host.ndim - 1)
        return np.pad(host, widths)

    mask = np.arange(padded_rows) < rows
    return jax.tree_util.tree_map(pad, batch), mask
