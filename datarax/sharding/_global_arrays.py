"""Global arrays from each host's part of a batch, after checking that the hosts agree.

Every process passes the part of the batch its devices hold under the sharding (as
``shard_data(data, sharding=...)`` returns it). Before anything is placed, the hosts
exchange one small message through the coordinator and check, on every host, that

- they pass the same tree structure, dtypes and sharding;
- their row counts make the same global batch (a host that passes more or fewer
  rows than its devices hold under the sharding is named);
- hosts that hold the same part of a leaf (replicas that span hosts, 0-d leaves
  included) passed identical data, by comparing digests of those parts.

The check runs on the first batch of each signature that one sharder (or pipeline)
passes, kept in that caller's `CheckedSignatures`, or on every call with
``every_batch`` (and always when some process holds no part of the batch). A second
sharder with the same shapes checks its own first batch again. Then each
leaf becomes one global `jax.Array` (``jax.make_array_from_callback``), each device's
block cut from this host's data at a place worked out once per batch signature.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
from collections.abc import Hashable
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, Sharding

from datarax._caches import BoundedCache
from datarax.sharding._checks import (
    check_leaf_kind,
    check_sharding_type,
    check_spec_against_mesh,
    describe_axes,
    leaf_name,
    named_leaf_sharding,
    spec_axis_names,
)
from datarax.sharding._exchange import crossing_hosts, exchange
from datarax.sharding._placement import (
    Spans,
    device_spans,
    host_ids,
    local_index,
    local_to_global_shape,
)

_FIX = (
    "Every process must pass exactly the part of the batch its devices hold under the "
    "sharding: take it with JaxProcessSharder().shard_data(data, sharding=sharding) from "
    "the same global batch on every host."
)


@dataclasses.dataclass(frozen=True)
class _Leaf:
    """One leaf's plan: its sharding and global shape, or the error it gave here."""

    name: str
    sharding: Sharding
    dtype: str
    global_shape: tuple[int, ...] | None  # None: this host holds none of it, or error
    error: tuple[str, str] | None  # (exception type, message) found on this host
    regions: dict[Spans, tuple[slice, ...]]  # each block held here: where in this host's data
    shared: tuple[tuple[str, tuple[slice, ...]], ...]  # blocks other hosts hold too


_plans: BoundedCache[tuple[list[_Leaf], bool]] = BoundedCache("global array plans", 256)


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


def _describe_sharding(sharding: Sharding) -> str:
    if isinstance(sharding, NamedSharding):
        return f"NamedSharding(mesh={dict(sharding.mesh.shape)}, spec={tuple(sharding.spec)})"
    return type(sharding).__name__


def _spans(index: tuple[slice, ...], shape: tuple[int, ...]) -> Spans:
    return tuple(part.indices(size)[:2] for part, size in zip(index, shape, strict=True))


def _regions(
    sharding: Sharding, global_shape: tuple[int, ...]
) -> tuple[dict[Spans, tuple[slice, ...]], tuple[tuple[str, tuple[slice, ...]], ...]]:
    """Where each block of a leaf that this host's devices hold lies in this host's
    data, and those of the blocks that other hosts hold too, keyed 'start:stop,...'."""
    me = jax.process_index()
    spans_of = device_spans(sharding, global_shape)
    holders: dict[Spans, set[int]] = {}
    for spans, host in zip(spans_of.values(), host_ids(spans_of), strict=True):
        holders.setdefault(spans, set()).add(host)
    mine = local_index(sharding, global_shape)
    regions: dict[Spans, tuple[slice, ...]] = {}
    for spans, hosts in holders.items():
        if me not in hosts:
            continue
        region = []
        for (start, stop), held in zip(spans, mine, strict=True):
            if isinstance(held, slice):
                offset = start - (held.start or 0)
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
    shape = tuple(np.shape(leaf))
    leaf_sharding, dtype = sharding, "?"
    try:
        mine = [d for d in sharding.device_set if d.process_index == jax.process_index()]
        check_leaf_kind(name, leaf, mine[0] if mine else None)
        dtype = str(jax.dtypes.canonicalize_dtype(np.result_type(leaf)))
        if isinstance(sharding, NamedSharding):
            if len(sharding.spec) > len(shape) and shape:
                named_leaf_sharding(name, shape, sharding)  # raises the rank error
            leaf_sharding = named_leaf_sharding(name, (), sharding) if not shape else sharding
        if not any(d.process_index == jax.process_index() for d in leaf_sharding.device_set):
            return _Leaf(name, leaf_sharding, dtype, None, None, {}, ())
        try:
            global_shape = local_to_global_shape(leaf_sharding, shape)
        except ValueError as error:
            raise ValueError(f"{name} (shape {shape} on this host): {error}") from None
        if isinstance(leaf_sharding, NamedSharding):
            named_leaf_sharding(name, global_shape, leaf_sharding)
        regions, shared = _regions(leaf_sharding, global_shape)
    except (TypeError, ValueError) as error:
        error_text = (type(error).__name__, str(error))
        return _Leaf(name, leaf_sharding, dtype, None, error_text, {}, ())
    return _Leaf(name, leaf_sharding, dtype, global_shape, None, regions, shared)


def _digest(data: Any, region: tuple[slice, ...]) -> str:
    part = np.ascontiguousarray(np.asarray(data)[region])
    return hashlib.sha1(part.reshape(-1).view(np.uint8).data, usedforsecurity=False).hexdigest()


def _spanning_axes(sharding: Sharding, rank: int) -> list[str]:
    """The mesh axes that replicate a rank-`rank` leaf across hosts."""
    if not isinstance(sharding, NamedSharding):
        return []
    used = {name for entry in tuple(sharding.spec)[:rank] for name in spec_axis_names(entry)}
    hosts = np.vectorize(lambda device: device.process_index)(sharding.mesh.devices)
    return [
        name
        for axis, name in enumerate(sharding.mesh.axis_names)
        if name not in used and (hosts != hosts.take([0], axis=axis)).any()
    ]


def _listed(values: list[Any]) -> str:
    return ", ".join(f"{v} on process {p}" for p, v in enumerate(values))


def _check_leaf(position: int, leaf: _Leaf, messages: list[dict[str, Any]]) -> None:
    entries = [m["leaves"][position] for m in messages]
    for process, entry in enumerate(entries):
        if entry["error"] is not None:
            kind, text = entry["error"]
            prefix = "" if process == jax.process_index() else f"On process {process}: "
            raise (TypeError if kind == "TypeError" else ValueError)(prefix + text)
    if len({entry["dtype"] for entry in entries}) > 1:
        dtypes = _listed([entry["dtype"] for entry in entries])
        raise ValueError(f"Hosts disagree on the dtype of {leaf.name}: {dtypes}. {_FIX}")
    sizes = {tuple(e["global"]) for e in entries if e["global"] is not None}
    if len(sizes) > 1:
        each = _listed(
            [
                f"shape {tuple(e['local'])}, making {tuple(e['global'])}"
                if e["global"]
                else f"shape {tuple(e['local'])}, holding none"
                for e in entries
            ]
        )
        raise ValueError(
            f"Hosts passed row counts of {leaf.name} that make different global arrays "
            f"under this sharding: {each}. {_FIX}"
        )
    digests: dict[str, dict[int, str]] = {}
    for process, message in enumerate(messages):
        for key, digest in message["digests"][position].items():
            digests.setdefault(key, {})[process] = digest
    for key, by_process in sorted(digests.items()):
        if len(set(by_process.values())) > 1:
            shape = next(iter(sizes))
            axes = _spanning_axes(leaf.sharding, len(shape))
            across = f" ({describe_axes(axes)} spans them)" if axes else ""
            if shape:
                start, stop = (int(n) for n in key.split(",")[0].split(":"))
                part = (
                    f"rows {start}-{stop - 1} of {leaf.name} (of the {shape[0]}-row global "
                    "batch their row counts make)"
                )
            else:
                part = f"{leaf.name} (a 0-d leaf, replicated on every device)"
            raise ValueError(
                f"Processes {sorted(by_process)} all hold {part} under this sharding{across}, "
                f"but passed different data for it. {_FIX}"
            )


def _check_agreement(messages: list[dict[str, Any]], plan: list[_Leaf]) -> None:
    """Raises the same error on every host when the hosts' messages disagree."""
    for field, what in (("tree", "structure"), ("sharding", "shardings")):
        if len({m[field] for m in messages}) > 1:
            values = _listed([m[field] for m in messages])
            raise ValueError(f"Hosts passed batches of different {what}: {values}. {_FIX}")
    for position, leaf in enumerate(plan):
        _check_leaf(position, leaf, messages)


def make_global(
    batch: Any,
    sharding: Sharding,
    checked: CheckedSignatures | None = None,
    every_batch: bool = False,
) -> Any:
    """Builds global `jax.Array`s from this process's part of `batch` (all must call).

    The hosts check the batch together unless `checked` (the caller's marks; None:
    none) holds its signature; `every_batch` checks every batch.

    Raises:
        TypeError: `sharding` is not a Sharding, or a leaf cannot be placed.
        ValueError: hosts disagree on the batch, pass row counts that do not make one
            global batch, pass different data for replicated parts, or a leaf does not
            fit the sharding. Raised on every host.
    """
    check_sharding_type(sharding)
    crossing_hosts()
    leaves, treedef = jax.tree_util.tree_flatten(batch)
    for leaf in leaves:
        if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
            raise TypeError(
                "shard() takes this host's data, but the batch already holds a global "
                f"jax.Array (shape {leaf.shape}, spanning processes). Pass it to your "
                "jitted function as it is, or reshard it with jax.device_put."
            )
    key = (  # deleted jax leaves are a signature of their own, never served a live plan
        treedef,
        tuple(
            (
                type(leaf),
                np.shape(leaf),
                getattr(leaf, "dtype", None),
                isinstance(leaf, jax.Array) and leaf.is_deleted(),
            )
            for leaf in leaves
        ),
        sharding,
    )
    known = _plans.get(key)
    if known is None:
        if isinstance(sharding, NamedSharding):
            check_spec_against_mesh(sharding.spec, dict(sharding.mesh.shape))
        path_leaves = jax.tree_util.tree_flatten_with_path(batch)[0]
        plan = [_plan_leaf(leaf_name(path), leaf, sharding) for path, leaf in path_leaves]
        holders = {d.process_index for d in sharding.device_set}
        known = (plan, len(holders) < jax.process_count())
        _plans.put(key, known)
    plan, always = known
    global_shapes = [leaf.global_shape for leaf in plan]
    if every_batch or always or checked is None or key not in checked:
        message = {
            "tree": str(treedef),
            "sharding": _describe_sharding(sharding),
            "leaves": [
                {
                    "dtype": p.dtype,
                    "local": np.shape(leaf),
                    "global": p.global_shape,
                    "error": p.error,
                }
                for p, leaf in zip(plan, leaves, strict=True)
            ],
            "digests": [
                {part_key: _digest(leaf, region) for part_key, region in p.shared}
                for p, leaf in zip(plan, leaves, strict=True)
            ],
        }
        texts = exchange(json.dumps(message, sort_keys=True), "shard()")
        messages = [json.loads(text) for text in texts]
        _check_agreement(messages, plan)
        if checked is not None:
            checked.add(key)
        global_shapes = [
            next(
                (
                    tuple(m["leaves"][i]["global"])
                    for m in messages
                    if m["leaves"][i]["global"] is not None
                ),
                None,
            )
            for i in range(len(plan))
        ]
    placed = []
    for leaf, p, shape in zip(leaves, plan, global_shapes, strict=True):
        assert shape is not None  # agreement found a host that holds the leaf
        if p.global_shape is None:  # none of this host's devices holds any of it
            placed.append(
                jax.make_array_from_single_device_arrays(shape, p.sharding, [], dtype=p.dtype)
            )
        else:
            placed.append(jax.make_array_from_callback(shape, p.sharding, _blocks(leaf, p)))
    return jax.tree_util.tree_unflatten(treedef, placed)


def _blocks(leaf: Any, plan: _Leaf) -> Any:
    """The callback that gives `jax.make_array_from_callback` each device's block of
    `leaf` (this host's data), looked up in the leaf's plan."""
    host = leaf if np.ndim(leaf) else np.asarray(leaf)
    regions, shape = plan.regions, plan.global_shape
    assert shape is not None
    return lambda index: host[regions[_spans(index, shape)]] if shape else host
