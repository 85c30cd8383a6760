"""Per-leaf text tables of a sharded pytree: shapes, specs, bytes per device, copies."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, Sharding
from rich.table import Table

from datarax._trees import flatten_with_path
from datarax._validate import check_str
from datarax.sharding._sharding_checks import check_sharding_type

from ._blocks import compact


def format_spec(sharding: Sharding) -> str:
    """A short text form of a leaf's placement, e.g. ``P('data', None)``.

    Raises:
        TypeError: `sharding` is not a `jax.sharding.Sharding`.

    Example:
        >>> mesh = jax.make_mesh((len(jax.devices()),), ("data",))
        >>> format_spec(NamedSharding(mesh, P("data", None)))
        "P('data', None)"
    """
    check_sharding_type(sharding)
    if isinstance(sharding, NamedSharding):
        return "P(" + ", ".join(repr(entry) for entry in sharding.spec) + ")"
    return type(sharding).__name__


@dataclasses.dataclass(frozen=True)
class LeafSummary:
    """One leaf's placement. Device fields are None for host (numpy) leaves.

    `device_bytes` maps the id of every device that holds part of the leaf to the
    bytes it holds; `bytes_per_device` is the most any of them holds (JAX gives all
    devices of one sharding equal shards, so it is also the least). Devices outside
    the leaf's sharding hold none of it.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    spec: str
    shard_shape: tuple[int, ...] | None
    bytes_per_device: int | None
    replicas: int | None
    num_devices: int | None
    device_bytes: Mapping[int, int] | None


def _dtype_of(leaf: Any) -> np.dtype:
    """The dtype of `leaf` as numpy sees it; object for what is neither array nor number."""
    try:
        return np.dtype(leaf.dtype) if hasattr(leaf, "dtype") else np.asarray(leaf).dtype
    except (TypeError, ValueError):
        return np.dtype(object)


def leaf_summaries(tree: Any, root: str = "batch") -> list[LeafSummary]:
    """Per leaf of `tree`: global shape, spec, shard shape, bytes per device, replicas.

    A leaf that is not on devices (a numpy array, a number, a string or any other
    object) is listed as a host leaf, with the dtype numpy gives it.

    Raises:
        TypeError: `root` is not a string, or a dict's keys cannot be sorted.
        ValueError: `tree` contains itself.

    Example:
        >>> mesh = jax.make_mesh((len(jax.devices()),), ("data",))
        >>> x = jax.device_put(np.zeros((16, 3), np.float32), NamedSharding(mesh, P("data")))
        >>> leaf_summaries({"x": x})[0].bytes_per_device == 16 // len(jax.devices()) * 3 * 4
        True
    """
    root = str(check_str("root", root))
    summaries = []
    for path, leaf in flatten_with_path(tree, root)[0]:
        name = root + jax.tree_util.keystr(tuple(path))
        shape = tuple(np.shape(leaf))
        dtype = _dtype_of(leaf)
        sharding = getattr(leaf, "sharding", None)
        if not isinstance(sharding, Sharding):
            host = LeafSummary(name, shape, dtype.name, "host", None, None, None, None, None)
            summaries.append(host)
            continue
        placed = {
            device.id: tuple(s.indices(n)[:2] for s, n in zip(index, shape, strict=True))
            for device, index in sharding.devices_indices_map(shape).items()
        }
        device_bytes = {
            device: math.prod(stop - start for start, stop in spans) * dtype.itemsize
            for device, spans in sorted(placed.items())
        }
        copies = len(placed) // len(set(placed.values()))
        summaries.append(
            LeafSummary(
                name,
                shape,
                dtype.name,
                format_spec(sharding),
                tuple(sharding.shard_shape(shape)),
                max(device_bytes.values()),
                copies,
                len(placed),
                device_bytes,
            )
        )
    return summaries


_COLUMNS = ["leaf", "global shape", "dtype", "spec", "shard shape", "bytes/device", "copies"]
_COLUMNS += ["devices"]


def device_totals(summaries: list[LeafSummary]) -> dict[int, int]:
    """Bytes each device holds over all leaves, for every device that holds any leaf."""
    totals: dict[int, int] = {}
    for leaf in summaries:
        for device, nbytes in (leaf.device_bytes or {}).items():
            totals[device] = totals.get(device, 0) + nbytes
    return dict(sorted(totals.items()))


def _holding(totals: dict[int, int]) -> str:
    """``each of the 8 devices holds 8 bytes``, or who holds how much when that differs."""
    if not totals:
        return "no leaf is on a device"
    by_amount: dict[int, list[int]] = {}
    for device, nbytes in totals.items():
        by_amount.setdefault(nbytes, []).append(device)
    if len(by_amount) == 1:
        (nbytes,) = by_amount
        many = len(totals) > 1
        who = f"each of the {len(totals)} devices" if many else f"device {compact(list(totals))}"
        return f"{who} holds {nbytes:,} bytes"
    if len(by_amount) > 3:
        most = max(totals, key=lambda device: totals[device])
        return (
            f"devices hold {min(totals.values()):,} to {totals[most]:,} bytes "
            f"(the most on device {most})"
        )
    parts = []
    for nbytes, devices in sorted(by_amount.items(), reverse=True):
        if len(devices) == 1:
            parts.append(f"device {devices[0]} holds {nbytes:,} bytes")
        else:
            parts.append(f"devices {compact(devices)} hold {nbytes:,} bytes each")
    return "; ".join(parts)


def _rows(tree: Any, root: str) -> tuple[list[tuple[str, ...]], str]:
    """The table cells (strings) per leaf, and the line on what each device holds."""
    rows = []
    summaries = leaf_summaries(tree, root)
    for leaf in summaries:
        placement = ["-"] * 4
        if leaf.bytes_per_device is not None:
            placement = [str(leaf.shard_shape), f"{leaf.bytes_per_device:,}"]
            placement += [str(leaf.replicas), str(leaf.num_devices)]
        rows.append((leaf.name, str(leaf.shape), leaf.dtype, leaf.spec, *placement))
    return rows, _holding(device_totals(summaries))


def summarize(tree: Any, root: str = "batch") -> str:
    """A text table of where every leaf of `tree` lives, one line per leaf.

    "bytes/device" is what each device of the leaf's sharding holds of it; "copies"
    says how many devices hold each block (1: split with no copies; equal to
    "devices": fully replicated). The last line adds up what every device holds over
    all leaves, and names the devices when they hold different amounts.

    Example:
        >>> mesh = jax.make_mesh((len(jax.devices()),), ("data",))
        >>> x = jax.device_put(np.zeros((16,), np.int32), NamedSharding(mesh, P("data")))
        >>> print(summarize({"label": x}))  # doctest: +ELLIPSIS
        leaf            global shape  dtype  spec       shard shape  bytes/device  copies  devices
        batch['label']  (16,)         int32  P('data')  (2,)         8             1       8
        each of the 8 devices holds 8 bytes
    """
    rows, holding = _rows(tree, root)
    widths = [max(len(r[i]) for r in [_COLUMNS, *rows]) for i in range(len(_COLUMNS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    header = "  ".join(c.ljust(w) for c, w in zip(_COLUMNS, widths, strict=True)).rstrip()
    return "\n".join([header, *lines, holding])


def summary_table(tree: Any, root: str = "batch") -> Table:
    """The `summarize` table as a `rich.table.Table` (print it with ``rich.print``).

    Example:
        >>> mesh = jax.make_mesh((len(jax.devices()),), ("data",))
        >>> x = jax.device_put(np.zeros((16,), np.int32), NamedSharding(mesh, P("data")))
        >>> summary_table({"label": x}).row_count
        1
    """
    rows, holding = _rows(tree, root)
    table = Table(title="Where each leaf lives", caption=holding)
    for number, column in enumerate(_COLUMNS):
        table.add_column(column, justify="right" if number >= 5 else "left")
    for row in rows:
        table.add_row(*row)
    return table
