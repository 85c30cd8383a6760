"""Global arrays from per-host data, after checking that every host agrees.

Each process of a multi-host job passes its own rows; `make_global` checks, across
processes, that they all pass the same tree structure, per-host shapes, dtypes and
sharding, and then builds global `jax.Array`s with
``jax.make_array_from_process_local_data``. The check and the plan (one sharding and
one global shape per leaf) are computed once per batch signature; later calls with
the same signature cost a flatten, a dictionary lookup and the copies to devices, or,
with ``every_batch``, also one exchange of the signature through the coordinator.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding, Sharding

from datarax.sharding._checks import (
    check_leading_dims,
    check_leaf_kind,
    check_sharding_type,
    check_spec_against_mesh,
    leaf_name,
    named_leaf_sharding,
    spec_axis_names,
)
from datarax.sharding.array_sharder import ArraySharder

EXCHANGE_TIMEOUT_S = 120
_KEY_PREFIX = "datarax/shard-signature"
_PLAN_CACHE_SIZE = 256
_exchanges_done = [0]
_SINGLE_HOST = ArraySharder()

Plan = tuple[tuple[Sharding, ...], tuple[tuple[int, ...] | None, ...]]
_plans: dict[tuple[Any, ...], tuple[Plan, str]] = {}  # signature -> (plan, its JSON text)


def host_signature(batch: Any, sharding: Sharding) -> dict[str, Any]:
    """What every host must agree on: structure, leaf names, shapes, dtypes, sharding."""
    path_leaves, treedef = jax.tree_util.tree_flatten_with_path(batch)
    leaves = []
    for path, leaf in path_leaves:
        array_like = isinstance(leaf, (np.ndarray, jax.Array, np.generic))
        shape = (
            list(np.shape(leaf)) if array_like or isinstance(leaf, (int, float, complex)) else None
        )
        dtype = str(leaf.dtype) if array_like else type(leaf).__name__
        leaves.append([leaf_name(path), shape, dtype])
    return {"tree": str(treedef), "leaves": leaves, "sharding": _describe_sharding(sharding)}


def _describe_sharding(sharding: Sharding) -> str:
    if isinstance(sharding, NamedSharding):
        return f"NamedSharding(mesh={dict(sharding.mesh.shape)}, spec={tuple(sharding.spec)})"
    return type(sharding).__name__


def _kv_client() -> Any:
    from jax._src import distributed  # the coordinator's key-value store has no public handle

    return distributed.global_state.client


def exchange(text: str, timeout_s: float = EXCHANGE_TIMEOUT_S) -> list[str]:
    """Every process's `text`, in process order (a collective: all must call it).

    Uses the coordinator's key-value store, so a process that never arrives gives an
    error after `timeout_s` instead of a hang; without a coordinator client it falls
    back to ``multihost_utils.process_allgather``.

    Raises:
        RuntimeError: a process did not arrive within `timeout_s`.
    """
    count, me = jax.process_count(), jax.process_index()
    if count == 1:
        return [text]
    client = _kv_client()
    if client is None:
        return exchange_with_allgather(text)
    round_index = _exchanges_done[0]
    _exchanges_done[0] += 1
    client.key_value_set(f"{_KEY_PREFIX}/{round_index}/{me}", text)
    texts = []
    for process in range(count):
        if process == me:
            texts.append(text)
            continue
        try:
            texts.append(
                client.blocking_key_value_get(
                    f"{_KEY_PREFIX}/{round_index}/{process}", int(timeout_s * 1000)
                )
            )
        except Exception as error:  # the client raises its own runtime error type
            raise RuntimeError(
                f"Process {process} did not reach shard() check #{round_index} within "
                f"{timeout_s:g} s (this is process {me}). Every process must call shard() "
                "the same number of times, in the same order, with batches of the same "
                f"structure and per-host shapes. ({type(error).__name__}: {error})"
            ) from None
    if round_index:  # every peer has published this round, so all have read the last one
        client.key_value_delete(f"{_KEY_PREFIX}/{round_index - 1}/{me}")
    return texts


def exchange_with_allgather(text: str) -> list[str]:
    """`exchange` through an XLA all-gather (no timeout); used without a coordinator."""
    data = np.frombuffer(text.encode(), dtype=np.uint8)
    lengths = np.asarray(multihost_utils.process_allgather(np.array([data.size], np.int32)))
    padded = np.zeros(int(lengths.max()), np.uint8)
    padded[: data.size] = data
    rows = np.asarray(multihost_utils.process_allgather(padded))
    return [bytes(row[:n]).decode() for row, n in zip(rows, lengths.ravel(), strict=True)]


def check_hosts_agree(signatures: Sequence[dict[str, Any]]) -> None:
    """Raises ValueError, naming the leaf and each host's value, when hosts differ."""
    first = signatures[0]
    if all(sig == first for sig in signatures[1:]):
        return
    advice = (
        " Every host must pass a batch with the same structure, per-host shapes and "
        "dtypes, and the same sharding; give every host the same per-host batch size "
        "(JaxProcessSharder(drop_remainder=True) gives equal slices)."
    )

    def listed(values: Sequence[Any]) -> str:
        return ", ".join(f"{v} on process {p}" for p, v in enumerate(values))

    if len({sig["tree"] for sig in signatures}) > 1:
        trees = listed([sig["tree"] for sig in signatures])
        raise ValueError(f"Hosts passed batches of different structure: {trees}." + advice)
    for position, (name, _, _) in enumerate(first["leaves"]):
        described = [
            f"shape {tuple(s['leaves'][position][1] or ())} ({s['leaves'][position][2]})"
            for s in signatures
        ]
        if len(set(described)) > 1:
            raise ValueError(f"Hosts disagree on {name}: {listed(described)}." + advice)
    shardings = listed([sig["sharding"] for sig in signatures])
    raise ValueError(f"Hosts passed different shardings: {shardings}." + advice)


def _check_with_every_host(signature_text: str) -> None:
    """Exchanges this host's signature (JSON) and raises if any host's differs."""
    texts = exchange(signature_text)
    if any(text != signature_text for text in texts):
        check_hosts_agree([json.loads(text) for text in texts])


def _blocks_per_dim(sharding: NamedSharding, rank: int) -> list[tuple[int, int]]:
    """Per dimension: (blocks in the whole array, distinct blocks this process holds)."""
    mesh = sharding.mesh
    axis_names = tuple(mesh.axis_names)
    me = jax.process_index()
    mine = [idx for idx, device in np.ndenumerate(mesh.devices) if device.process_index == me]
    result = []
    for dim in range(rank):
        names = spec_axis_names(sharding.spec[dim]) if dim < len(sharding.spec) else ()
        total = math.prod(mesh.shape[name] for name in names)
        held = set()
        for idx in mine:
            block = 0
            for name in names:
                block = block * mesh.shape[name] + idx[axis_names.index(name)]
            held.add(block)
        result.append((total, max(len(held), 1)))
    return result


def _global_shape(name: str, shape: tuple[int, ...], sharding: NamedSharding) -> tuple[int, ...]:
    """The global shape of a leaf whose per-host part has `shape`; checks divisibility."""
    global_shape = []
    for dim, (total, held) in enumerate(_blocks_per_dim(sharding, len(shape))):
        axes = sharding.spec[dim] if dim < len(sharding.spec) else None
        if total % held:
            raise ValueError(
                f"The mesh gives this host {held} of the {total} blocks of mesh axis "
                f"{axes!r}, which do not tile the axis evenly. Build the mesh with "
                "jax.make_mesh, which gives every host the same number of blocks."
            )
        if shape[dim] % held:
            what = f"{shape[dim]} rows" if dim == 0 else f"size {shape[dim]} in dimension {dim}"
            raise ValueError(
                f"{name} has {what} on this host (shape {shape}), which cannot be split "
                f"evenly over this host's {held} blocks along mesh axis {axes!r} ({total} "
                f"devices in all, so the global size must be a multiple of {total}). Use a "
                f"per-host batch size that is a multiple of {held}, pad the batch and carry "
                "a mask (datarax.sharding.pad_to_multiple), or drop the remainder in the "
                "pipeline (drop_remainder=True)."
            )
        global_shape.append(shape[dim] // held * total)
    return tuple(global_shape)


def _plan(batch: Any, sharding: Sharding) -> Plan:
    """Validates `batch` (already known to match on every host); one entry per leaf."""
    path_leaves = jax.tree_util.tree_flatten_with_path(batch)[0]
    names = [leaf_name(path) for path, _ in path_leaves]
    for name, (_, leaf) in zip(names, path_leaves, strict=True):
        check_leaf_kind(name, leaf)
    shapes = [tuple(np.shape(leaf)) for _, leaf in path_leaves]
    if not isinstance(sharding, NamedSharding):
        return (sharding,) * len(shapes), (None,) * len(shapes)
    check_spec_against_mesh(sharding.spec, dict(sharding.mesh.shape))
    if len(sharding.spec) and spec_axis_names(sharding.spec[0]):
        check_leading_dims([(n, s) for n, s in zip(names, shapes, strict=True) if s])
    shardings: list[Sharding] = []
    global_shapes: list[tuple[int, ...] | None] = []
    for name, shape in zip(names, shapes, strict=True):
        if len(sharding.spec) > len(shape):
            named_leaf_sharding(name, shape, sharding)  # raises the rank error
        global_shape = _global_shape(name, shape, sharding)
        shardings.append(named_leaf_sharding(name, global_shape, sharding))
        global_shapes.append(global_shape)
    return tuple(shardings), tuple(global_shapes)


def single_host_shard(batch: Any, sharding: Sharding) -> Any:
    """On one process every device is local: exactly what `ArraySharder` does."""
    return _SINGLE_HOST.shard(batch, sharding)


def make_global(batch: Any, sharding: Sharding, every_batch: bool = False) -> Any:
    """Builds global `jax.Array`s from this process's part of `batch` (all must call).

    Hosts compare batch signatures the first time this process sees a signature, or
    on every call with `every_batch`. Only the second catches a host whose batch
    changes to a signature that another host has already seen (and so skips).

    Raises:
        TypeError: `sharding` is not a Sharding, or a leaf cannot be placed.
        ValueError: hosts disagree on the batch, or a leaf does not fit the sharding.
    """
    check_sharding_type(sharding)
    leaves, treedef = jax.tree_util.tree_flatten(batch)
    for leaf in leaves:
        if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
            raise TypeError(
                "shard() takes this host's data, but the batch already holds a global "
                f"jax.Array (shape {leaf.shape}, spanning processes). Pass it to your "
                "jitted function as it is, or reshard it with jax.device_put."
            )
    key = (
        treedef,
        tuple((type(leaf), np.shape(leaf), getattr(leaf, "dtype", None)) for leaf in leaves),
        sharding,
    )
    known = _plans.get(key)
    if known is None:
        text = json.dumps(host_signature(batch, sharding), sort_keys=True)
        _check_with_every_host(text)
        known = (_plan(batch, sharding), text)
        if len(_plans) >= _PLAN_CACHE_SIZE:
            _plans.clear()
        _plans[key] = known
    elif every_batch:
        _check_with_every_host(known[1])
    if not leaves:
        return batch
    shardings, global_shapes = known[0]
    placed = [
        jax.make_array_from_process_local_data(
            s, leaf if np.ndim(leaf) else np.asarray(leaf), shape
        )
        for leaf, s, shape in zip(leaves, shardings, global_shapes, strict=True)
    ]
    return jax.tree_util.tree_unflatten(treedef, placed)
