"""`ArraySharder`: place a host or device batch onto a `jax.sharding.Sharding`."""

from __future__ import annotations

from typing import Any

import jax
from jax.sharding import Sharding

from datarax._compat import on_auto_mesh
from datarax._deprecated import ArraySharderAliases
from datarax._trees import check_keys_sortable
from datarax.sharding._base import SharderModule
from datarax.sharding._flat_transfer import SendFlat, place, sending_plan
from datarax.sharding._sharding_checks import leaf_shardings
from datarax.sharding._signature import PlanCache


class _Placement:
    """A batch signature's plan: the `jax.device_put` target, and how its leaves cross
    for each ``send_flat`` asked for so far."""

    def __init__(self, shardings: Sharding | list[Sharding]):
        self.shardings = shardings
        self.ways: dict[SendFlat, Any] = {}


_plans: PlanCache[_Placement] = PlanCache("placement plans", 1024)


def plan_shardings(batch: Any, sharding: Sharding) -> tuple[list[Any], Any, _Placement]:
    """Flattens `batch` and returns (leaves, treedef, its placement plan).

    The plan's target is one sharding when every leaf gets the same one (the usual
    case, and measurably faster to place than a list), else one validated sharding per
    leaf. Validation, of the sharding and of every leaf, runs once per batch signature
    (`batch_signature`); later calls with the same signature cost a flatten and one
    dictionary lookup.
    """
    try:
        leaves, treedef = jax.tree_util.tree_flatten(batch)
    except (TypeError, ValueError):
        check_keys_sortable(batch)
        raise

    def make() -> _Placement:
        per_leaf = leaf_shardings(batch, sharding)
        shared = all(leaf is per_leaf[0] for leaf in per_leaf)
        return _Placement(per_leaf[0] if per_leaf and shared else list(per_leaf))

    return leaves, treedef, _plans.plan(treedef, leaves, sharding, make)[1]


class ArraySharder(SharderModule, ArraySharderAliases):
    """Places a batch (any pytree of arrays and numbers) onto devices.

    Host (numpy) leaves are copied straight into their shards on each device, never
    staged through one device. Jax leaves are resharded, on Auto and Explicit meshes
    alike and to any `jax.sharding.Sharding`. None leaves pass through. A
    PartitionSpec shorter than a leaf's rank shards the leading axes, so
    ``P("data")`` serves images and labels alike; numbers and 0-d arrays are
    replicated.

    Like ``jax.device_put``, placing numpy data on CPU devices may share its memory
    instead of copying it: don't modify a host batch in place after sharding it.

    Example:
        >>> mesh = jax.make_mesh((len(jax.devices()),), ("data",))
        >>> sharding = NamedSharding(mesh, P("data"))
        >>> batch = {"image": np.zeros((16, 4, 4, 3), np.uint8), "label": np.arange(16)}
        >>> sharded = ArraySharder().shard(batch, sharding)
        >>> sharded["image"].addressable_shards[0].data.shape[0] == 16 // len(jax.devices())
        True
    """

    def shard(self, batch: Any, sharding: Sharding, *, send_flat: SendFlat = "auto") -> Any:
        """Returns `batch` with every leaf a `jax.Array` placed with `sharding`.

        Args:
            batch: a pytree whose leaves are numpy arrays, jax arrays or numbers.
            sharding: where to put them, usually ``NamedSharding(mesh, P("data"))``.
            send_flat: how host leaves cross to TPUs. ``"auto"`` (the default): a leaf
                of rank 3 or more that can crosses as one ``(rows, rest)`` array and is
                reshaped there, and a large leaf bound for one chip crosses in pieces
                joined there, which copies an image batch several times as fast on a
                TPU v5e; elsewhere leaves are placed as they are. True: the same, and a
                leaf of rank 3 or more that cannot cross flat is an error, on every
                platform. False: every leaf as it is. The arrays are the same either way
                (`datarax.sharding._flat_transfer`, docs/benchmarks/tpu_copy.md).

        Returns:
            A pytree of the same structure with `jax.Array` leaves.

        Raises:
            TypeError: `sharding` is not a Sharding, a dict's keys cannot be sorted, or
                a leaf cannot be placed (a string, an object, a dtype the devices do not
                take, a deleted array).
            ValueError: a leaf's shape does not fit the sharding (the message names
                the leaf, its shape, the mesh axis and the ways out), a python int
                does not fit JAX's integer type, or, with `send_flat`, the sharding of a
                leaf of rank 3 or more splits a dimension after its first.
        """
        if send_flat != "auto" and not isinstance(send_flat, bool):
            raise TypeError(
                f"send_flat must be True, False or 'auto', got {type(send_flat).__name__}: "
                f"{send_flat!r:.60}."
            )
        leaves, treedef, plan = plan_shardings(batch, sharding)
        if not leaves:
            return batch
        shardings = plan.shardings
        if send_flat not in plan.ways:
            plan.ways[send_flat] = sending_plan(batch, leaves, shardings, send_flat)
        ways = plan.ways[send_flat]
        try:
            placed = place(leaves, shardings, ways)
        except ValueError:
            placed = place([on_auto_mesh(leaf) for leaf in leaves], shardings, ways)
        except OverflowError:  # a python int too large, in a batch whose plan was cached
            leaf_shardings(batch, sharding)  # raises the ValueError that names it
            raise
        return jax.tree_util.tree_unflatten(treedef, placed)

    def shard_with_info(
        self, batch: Any, sharding: Sharding, info: dict[str, Any] | None = None
    ) -> Any:
        """`shard`, recording the batch's structure and shapes before and after, and each
        leaf's sharding, in `info` (a dict, filled in place) under
        ``"batch_pre_sharding"`` and ``"batch_post_sharding"``.

        Example:
            >>> sharding = NamedSharding(jax.make_mesh((len(jax.devices()),), ("data",)), P("data"))
            >>> info = {}
            >>> _ = ArraySharder().shard_with_info({"x": np.zeros((8, 2))}, sharding, info)
            >>> info["batch_post_sharding"]["shapes"]
            {'x': (8, 2)}
        """
        if info is None:
            info = {}
        if not isinstance(info, dict):
            raise TypeError(f"info must be a dict to fill in (or None), got {type(info).__name__}.")

        def shapes(tree: Any) -> Any:
            return jax.tree_util.tree_map(lambda leaf: getattr(leaf, "shape", None), tree)

        info["batch_pre_sharding"] = {
            "structure": jax.tree_util.tree_structure(batch),
            "shapes": shapes(batch),
        }
        placed = self.shard(batch, sharding)
        info["batch_post_sharding"] = {
            "structure": jax.tree_util.tree_structure(placed),
            "shapes": shapes(placed),
            "shardings": jax.tree_util.tree_map(lambda leaf: leaf.sharding, placed),
        }
        return placed
