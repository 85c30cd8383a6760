"""Global arrays from each host's part of a batch: plan, agree, assemble.

Every process passes the part of the batch its devices hold under the sharding (as
``shard_data(data, sharding=...)`` returns it), and `make_global` turns it into global
`jax.Array`s in three steps:

1. **Plan**, once per batch signature on each host: each leaf's sharding, the global
   shape its local shape makes and where each block its devices hold lies in this
   host's data (noting those that other hosts hold too), or the error the leaf gives.
2. **Agree**: the hosts exchange one small message through the coordinator and check,
   on every host, that they pass the same tree structure, dtypes and sharding; that
   their row counts make the same global batch (a host that passes more or fewer rows
   than its devices hold under the sharding is named); and that hosts that hold the
   same part of a leaf (replicas that span hosts, 0-d leaves included) passed
   identical data, by comparing digests of those parts (`_batch_agreement`). A
   disagreement is a `HostMismatchError` on every host, and an error found on one host
   is raised on all.
3. **Assemble** each leaf with ``jax.make_array_from_callback``, each device's block
   cut from this host's data (in `local_index` order, as ``shard_data`` gives it) at
   the place the plan found. ``jax.make_array_from_process_local_data`` takes the same
   data and gives the same arrays, but works those places out again on every call
   (``_array_from_process_local_data`` in ``jax/_src/array.py``), which costs more than
   the copy for small leaves.

The hosts agree on the first batch of each signature that one sharder (or pipeline)
passes, kept in that caller's `CheckedSignatures`, or on every call with
``every_batch`` (and always when some process holds no part of the batch). A second
sharder with the same shapes checks its own first batch again.
"""

from __future__ import annotations

import collections
import dataclasses
import json
from collections.abc import Hashable
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, Sharding

from datarax._exchange import crossing_hosts, exchange
from datarax._trees import check_leaf_kind, flatten_with_names
from datarax.errors import LeafShapeError, LeafTypeError
from datarax.sharding._batch_agreement import check_agreement, digest, pickled
from datarax.sharding._placement import (
    Spans,
    describe_sharding,
    device_spans,
    host_global_shape,
    host_ids,
    host_index,
)
from datarax.sharding._sharding_checks import check_sharding, leaf_sharding, named_leaf_sharding
from datarax.sharding._signature import PlanCache
from datarax.sharding.array_sharder import ArraySharder

Region = tuple[slice, ...]  # where a block lies in this host's data
SINGLE_PROCESS = ArraySharder()  # places every global batch of a single process


@dataclasses.dataclass(frozen=True)
class _Leaf:
    """One leaf's plan: its sharding and global shape, or the error it gave here."""

    name: str
    sharding: Sharding
    dtype: str
    global_shape: tuple[int, ...] | None  # None: this host holds none of it, or error
    error: str | None  # the error found on this host, pickled for the others
    regions: dict[Spans, Region]  # each block held here: where in this host's data
    shared: tuple[tuple[str, Region], ...]  # blocks other hosts hold too, keyed 'a:b,...'


@dataclasses.dataclass(frozen=True)
class _Plan:
    """A batch signature's plan: its leaves, and what the hosts compare besides."""

    leaves: tuple[_Leaf, ...]
    tree: str
    sharding: str
    always: bool  # some process holds no part of the batch: agree on every batch


_plans: PlanCache[_Plan] = PlanCache("global array plans", 256)


class CheckedSignatures:
    """The batch signatures one sharder or pipeline has checked with the other hosts.

    Every host keeps its own, and they stay equal because every host passes the same
    batches in the same order: so they are marks, not a cache, and
    `datarax.clear_caches` leaves them alone. The oldest of more than `limit` are
    forgotten (on every host alike), so that signature is checked again.
    """

    def __init__(self, limit: int = 1024):
        self._keys: collections.OrderedDict[Hashable, None] = collections.OrderedDict()
        self._limit = limit

    def __contains__(self, key: Hashable) -> bool:
        return key in self._keys

    def add(self, key: Hashable) -> None:
        self._keys[key] = None
        while len(self._keys) > self._limit:
            self._keys.popitem(last=False)


def _regions(
    sharding: Sharding, global_shape: tuple[int, ...]
) -> tuple[dict[Spans, Region], tuple[tuple[str, Region], ...]]:
    """Where each block of a leaf that this host's devices hold lies in this host's data,
    and those of the blocks that other hosts hold too, keyed 'start:stop,...'."""
    me = jax.process_index()
    spans_of = device_spans(sharding, global_shape)
    holders: dict[Spans, set[int]] = {}
    for spans, host in zip(spans_of.values(), host_ids(spans_of), strict=True):
        holders.setdefault(spans, set()).add(host)
    mine = host_index(sharding, global_shape, me)
    regions: dict[Spans, Region] = {}
    for spans, hosts in holders.items():
        if me not in hosts:
            continue
        region = []
        for (start, stop), held in zip(spans, mine, strict=True):
            if isinstance(held, slice):
                offset = start - held.start
            else:
                offset = int(np.searchsorted(held, start))
            region.append(slice(offset, offset + stop - start))
        regions[spans] = tuple(region)
    shared = sorted(
        (",".join(f"{start}:{stop}" for start, stop in spans), region)
        for spans, region in regions.items()
        if len(holders[spans]) > 1
    )
    return regions, tuple(shared)


def _plan_leaf(name: str, leaf: Any, sharding: Sharding) -> _Leaf:
    """What this host knows of one leaf; an error it gives is kept, for every host."""
    shape = tuple(np.shape(leaf))
    me = jax.process_index()
    planned, dtype = sharding, "?"
    try:
        mine = [device for device in sharding.device_set if device.process_index == me]
        check_leaf_kind(name, leaf, mine[0] if mine else None)
        dtype = str(jax.dtypes.canonicalize_dtype(np.result_type(leaf)))
        if isinstance(sharding, NamedSharding) and (not shape or len(sharding.spec) > len(shape)):
            planned = named_leaf_sharding(name, shape, sharding)  # 0-d: replicated
        if not mine:
            return _Leaf(name, planned, dtype, None, None, {}, ())
        try:
            global_shape = host_global_shape(planned, shape, me)
        except LeafShapeError as error:
            raise LeafShapeError(
                f"{name} (shape {shape} on this host): {error}",
                leaf=name,
                shape=shape,
                dim=error.dim,
                parts=error.parts,
            ) from None
        planned = leaf_sharding(name, global_shape, planned)
        regions, shared = _regions(planned, global_shape)
    except (TypeError, ValueError) as error:
        return _Leaf(name, planned, dtype, None, pickled(error), {}, ())
    return _Leaf(name, planned, dtype, global_shape, None, regions, shared)


def _plan(batch: Any, sharding: Sharding) -> _Plan:
    """Step 1, once per batch signature: checks the sharding (the door of
    `JaxProcessSharder.shard` on many processes) and plans every leaf."""
    check_sharding(sharding)
    named, treedef = flatten_with_names(batch)
    holders = {device.process_index for device in sharding.device_set}
    return _Plan(
        leaves=tuple(_plan_leaf(name, leaf, sharding) for name, leaf in named),
        tree=str(treedef),
        sharding=describe_sharding(sharding),
        always=len(holders) < jax.process_count(),
    )


def _agree(plan: _Plan, leaves: list[Any]) -> list[tuple[int, ...] | None]:
    """Step 2: exchanges and compares what the hosts pass; every leaf's global shape.

    Raises:
        HostMismatchError: the hosts disagree (the same error on every host).
        TypeError, ValueError: a host found a leaf it cannot place (on every host).
    """
    message = {
        "tree": plan.tree,
        "sharding": plan.sharding,
        "leaves": [
            {"dtype": p.dtype, "local": np.shape(leaf), "global": p.global_shape, "error": p.error}
            for p, leaf in zip(plan.leaves, leaves, strict=True)
        ],
        "digests": [
            {key: digest(leaf, region) for key, region in p.shared}
            for p, leaf in zip(plan.leaves, leaves, strict=True)
        ],
    }
    messages = [json.loads(text) for text in exchange(json.dumps(message), "shard()")]
    check_agreement(messages, [(p.name, p.sharding) for p in plan.leaves])
    return [  # agreed: one global shape per leaf, from the hosts that hold it
        next(
            (
                tuple(m["leaves"][i]["global"])
                for m in messages
                if m["leaves"][i]["global"] is not None
            ),
            None,
        )
        for i in range(len(plan.leaves))
    ]


def _assemble(
    plan: _Plan, leaves: list[Any], shapes: list[tuple[int, ...] | None]
) -> list[jax.Array]:
    """Step 3: each leaf as a global array, from this host's data (or none of it)."""
    placed = []
    for leaf, planned, shape in zip(leaves, plan.leaves, shapes, strict=True):
        assert shape is not None  # the hosts agreed, so some host holds the leaf
        if planned.global_shape is None:  # none of this host's devices holds any of it
            placed.append(
                jax.make_array_from_single_device_arrays(
                    shape, planned.sharding, [], dtype=planned.dtype
                )
            )
        else:
            placed.append(
                jax.make_array_from_callback(shape, planned.sharding, _blocks(leaf, planned))
            )
    return placed


def _blocks(leaf: Any, planned: _Leaf) -> Any:
    """The callback that gives `jax.make_array_from_callback` each device's block of
    `leaf` (this host's data), looked up in the leaf's plan."""
    host = leaf if np.ndim(leaf) else np.asarray(leaf)
    regions, shape = planned.regions, planned.global_shape
    assert shape is not None
    if not shape:
        return lambda index: host

    def block(index: tuple[slice, ...]) -> Any:
        spans = tuple(part.indices(size)[:2] for part, size in zip(index, shape, strict=True))
        return host[regions[spans]]

    return block


def make_global(
    batch: Any,
    sharding: Sharding,
    checked: CheckedSignatures | None = None,
    every_batch: bool = False,
) -> Any:
    """Builds global `jax.Array`s from this process's part of `batch` (all must call).

    The sharding is checked when the plan of a batch signature is made. The hosts
    check the batch together unless `checked` (the caller's marks; None: none) holds
    its signature; `every_batch` checks every batch.

    Raises:
        TypeError: `sharding` is not a Sharding, a leaf cannot be placed, or the batch
            already holds a global array.
        HostMismatchError: hosts disagree on the batch, pass row counts that do not
            make one global batch, or pass different data for replicated parts.
            Raised on every host.
        ValueError: the sharding cannot be used, or a leaf does not fit it.
    """
    crossing_hosts()
    leaves, treedef = jax.tree_util.tree_flatten(batch)
    for position, leaf in enumerate(leaves):
        if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
            name = flatten_with_names(batch)[0][position][0]
            raise LeafTypeError(
                f"shard() takes this host's data, but {name} is already a global jax.Array "
                f"(shape {leaf.shape}, spanning processes). Pass it to your jitted function "
                "as it is, or reshard it with jax.device_put.",
                leaf=name,
            )
    key, plan = _plans.plan(treedef, leaves, sharding, lambda: _plan(batch, sharding))
    shapes = [p.global_shape for p in plan.leaves]
    if every_batch or plan.always or checked is None or key not in checked:
        shapes = _agree(plan, leaves)
        if checked is not None:
            checked.add(key)
    return jax.tree_util.tree_unflatten(treedef, _assemble(plan, leaves, shapes))
