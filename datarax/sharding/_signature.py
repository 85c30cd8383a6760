"""The batch signature, and the placement plans made once per signature.

A plan (which sharding each leaf gets, what the hosts must agree on) depends only on
the batch's signature: its tree structure, each leaf's type, shape and dtype, whether
a jax leaf was deleted (or donated), and the sharding. `ArraySharder` and the builder
of global arrays both make their plan once per signature and look it up afterwards,
at the cost of a flatten and a dictionary lookup.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

import jax

from datarax._caches import BoundedCache

Plan = TypeVar("Plan")


def batch_signature(treedef: Any, leaves: list[Any], sharding: Any) -> Hashable:
    """What a placement plan depends on: structure, each leaf's type, shape, dtype and
    whether it is a deleted jax.Array, and the sharding.

    A deleted jax leaf is a signature of its own, so a plan made for live arrays never
    places a deleted one: making the plan names it.

    Example:
        >>> leaves, treedef = jax.tree_util.tree_flatten({"x": np.zeros((4, 2), np.float32)})
        >>> batch_signature(treedef, leaves, None)[1]
        ((<class 'numpy.ndarray'>, (4, 2), dtype('float32'), False),)
    """
    return (
        treedef,
        tuple(
            (
                type(leaf),
                getattr(leaf, "shape", None),
                getattr(leaf, "dtype", None),
                isinstance(leaf, jax.Array) and leaf.is_deleted(),
            )
            for leaf in leaves
        ),
        sharding,
    )


class PlanCache(Generic[Plan]):
    """Plans by batch signature, in a bounded cache that `datarax.clear_caches` empties."""

    def __init__(self, name: str, maxsize: int):
        self._plans: BoundedCache[Plan] = BoundedCache(name, maxsize)

    def plan(
        self, treedef: Any, leaves: list[Any], sharding: Any, make: Callable[[], Plan]
    ) -> tuple[Hashable, Plan]:
        """``(signature, plan)``: the stored plan, or ``make()``'s, stored.

        `make` validates the batch and the sharding, so a sharding that cannot be a key
        (unhashable, hence no `jax.sharding.Sharding`) reaches it and gets its error.
        """
        key = batch_signature(treedef, leaves, sharding)
        try:
            known = self._plans.get(key)
        except TypeError:
            known = None
        if known is None:
            known = make()
            self._plans.put(key, known)
        return key, known
