"""A snapshot of a batch, to show that a call left the caller's data as it was."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np


def snapshot(tree: Any) -> Any:
    """Everything about `tree` a library could change: container types and key order,
    and each array's dtype, shape, strides, bytes and writeable flag, or a jax array's
    identity and whether it was deleted (no pytree flattening, so trees JAX refuses can
    be compared too)."""
    if isinstance(tree, dict):
        return type(tree), [(key, snapshot(value)) for key, value in tree.items()]
    if isinstance(tree, (list, tuple)):
        return type(tree), [snapshot(value) for value in tree]
    if isinstance(tree, np.ndarray):
        return tree.dtype, tree.shape, tree.strides, tree.tobytes(), tree.flags.writeable
    if isinstance(tree, jax.Array):
        return id(tree), tree.is_deleted()
    return type(tree), repr(tree)  # repr: a NaN equals itself
