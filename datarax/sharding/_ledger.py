"""Which global rows each device and each host holds under a sharding.

A `RowLedger` answers, for a `jax.sharding.Sharding` and a global batch of
`num_rows` rows: which rows each device holds, which rows each host (JAX process)
must read, which hosts hold the same rows (replicas that span hosts) and where a
given row lives. It is read off ``Sharding.devices_indices_map``, so it is JAX's own
placement, for any mesh, spec and device order.

`global_to_local_shape` and `local_to_global_shape` convert a leaf's shape between
the global array and one host's part of it, and `local_index` says which part of a
global array that is, in every dimension.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec, Sharding

from datarax._validate import check_int
from datarax.sharding._placement import (
    HostOf,
    blocks_to_index,
    describe_sharding,
    device_spans,
    host_ids,
    merge_spans,
)
from datarax.sharding._sharding_checks import check_sharding, ways_out


def pretend_hosts(num_hosts: int, devices: Any = None) -> dict[int, int]:
    """A device-to-host assignment that splits `devices` into `num_hosts` equal groups.

    Consecutive devices (in the order given, by default ``jax.devices()``) form one
    host, the way a pod's hosts each drive a few neighbouring chips. Pass it as
    ``RowLedger(..., host_of=pretend_hosts(n))`` to plan a pod with simulated devices.

    Raises:
        TypeError: `num_hosts` is not an int, or `devices` holds something that is not a
            device.
        ValueError: `devices` is empty or lists a device twice, or `num_hosts` does not
            divide the number of devices.

    Example:
        >>> pretend_hosts(4)
        {0: 0, 1: 0, 2: 1, 3: 1, 4: 2, 5: 2, 6: 3, 7: 3}
    """
    try:
        devices = list(jax.devices() if devices is None else devices)
    except TypeError:
        raise TypeError(
            f"devices must be a list of devices or None (jax.devices()), got "
            f"{type(devices).__name__}: {devices!r:.100}."
        ) from None
    num_hosts = check_int("num_hosts", num_hosts)
    for number, device in enumerate(devices):
        device_id = getattr(device, "id", None)
        if isinstance(device_id, bool) or not isinstance(device_id, int):
            raise TypeError(
                f"devices[{number}] must be a device (with an int id, as jax.devices() "
                f"gives them), got {type(device).__name__}: {device!r:.100}."
            )
    if not devices:
        raise ValueError("devices is empty; pass the devices to split, or None for jax.devices().")
    ids = [device.id for device in devices]
    if len(set(ids)) != len(ids):
        repeated = sorted({i for i in ids if ids.count(i) > 1})
        raise ValueError(
            f"devices lists device {', '.join(map(str, repeated))} more than once; each "
            "device belongs to one host, so list each once."
        )
    if len(devices) % num_hosts:
        raise ValueError(
            f"{len(devices)} devices cannot be split into {num_hosts} hosts of equal size; "
            f"use a number of hosts that divides {len(devices)}."
        )
    per_host = len(devices) // num_hosts
    return {device.id: position // per_host for position, device in enumerate(devices)}


def _row_sharding(sharding: Sharding) -> Sharding:
    """The sharding of a rank-1 leaf (the rows) under `sharding`."""
    if isinstance(sharding, NamedSharding) and len(sharding.spec) > 1:
        return NamedSharding(sharding.mesh, PartitionSpec(sharding.spec[0]))
    return sharding


def rows_text(rows: list[tuple[int, int]]) -> str:
    """``[(0, 8), (16, 24)]`` -> ``"0-7, 16-23"`` (stops are exclusive; ``[(5, 6)]`` ->
    ``"5"``), in the tables here and on the bars of `datarax.viz.plot_ledger`."""
    return ", ".join(f"{a}-{b - 1}" if b - a > 1 else f"{a}" for a, b in rows) or "-"


class RowLedger:
    """Which global rows every device and every host holds under `sharding`.

    Args:
        sharding: the sharding of the global batch (its first dimension is the rows).
        num_rows: the global batch size.
        host_of: which host each device belongs to: None for the devices' own
            ``process_index``, or a mapping ``{device id: host}`` or a function
            ``device -> host`` to let simulated devices play the hosts of a pod
            (see `pretend_hosts`). With `host_of` the ledger is a plan, so its
            devices need not be this runtime's (the playground plans meshes larger
            than the machine); without it they must be.

    Raises:
        TypeError: `sharding` is not a Sharding, or `host_of` is not usable.
        ValueError: `num_rows` does not split the way the sharding needs.
        MeshError: the mesh lists a device twice, or (without `host_of`) the sharding
            uses devices that no started backend lists.

    Example:
        >>> mesh = jax.make_mesh((4, 2), ("data", "model"))
        >>> ledger = RowLedger(NamedSharding(mesh, P("data")), 16, host_of=pretend_hosts(2))
        >>> ledger.blocks_of_host(1), ledger.row_count(1)
        ([(8, 16)], 8)
        >>> ledger.hosts_of_row(3)
        (0,)
    """

    def __init__(self, sharding: Sharding, num_rows: int, *, host_of: HostOf = None):
        # A plan (host_of given) may use any devices; the devices' own hosts, only live ones.
        self.sharding = check_sharding(sharding, live_devices=host_of is None)
        self.num_rows = check_int("num_rows", num_rows, minimum=0)
        rows = _row_sharding(sharding)
        try:
            rows.shard_shape((self.num_rows,))
        except ValueError:
            parts = _partitions(rows, 0)
            raise ValueError(
                f"A global batch of {self.num_rows} rows cannot be split into the "
                f"{parts} equal row blocks this sharding needs. " + ways_out(0, parts)
            ) from None
        spans = device_spans(rows, (self.num_rows,))
        devices = sorted(spans, key=lambda device: device.id)
        self.devices: tuple[Any, ...] = tuple(devices)
        self._positions = {device.id: position for position, device in enumerate(devices)}
        self._rows = [spans[device][0] for device in devices]  # (start, stop), Python ints
        self._hosts = host_ids(devices, host_of)  # Python ints: exact for any host id
        self.hosts: tuple[int, ...] = tuple(sorted(set(self._hosts)))
        self._by_host: dict[int, list[int]] = {}
        for position in sorted(range(len(devices)), key=lambda p: self._rows[p][0]):
            self._by_host.setdefault(self._hosts[position], []).append(position)

    def _position(self, device: Any) -> int:
        device_id = check_int(
            "device", getattr(device, "id", device), minimum=0, meaning="a jax.Device or its id"
        )
        if device_id not in self._positions:
            raise ValueError(f"device {device_id!r} holds no part of this sharding.")
        return self._positions[device_id]

    def _host_positions(self, host: int) -> list[int]:
        return self._by_host.get(check_int("host", host, minimum=0), [])

    def host_of_device(self, device: Any) -> int:
        """The host that drives `device` (a `jax.Device` or its id)."""
        return self._hosts[self._position(device)]

    def rows_of_device(self, device: Any) -> range:
        """The global rows `device` (a `jax.Device` or its id) holds."""
        return range(*self._rows[self._position(device)])

    def devices_of_host(self, host: int) -> tuple[Any, ...]:
        """The devices of `host` that hold part of the batch, by id."""
        return tuple(self.devices[p] for p in sorted(self._host_positions(host)))

    def blocks_of_host(self, host: int) -> list[tuple[int, int]]:
        """The rows `host` must read, as sorted, disjoint ``(start, stop)`` ranges."""
        return merge_spans(self._rows[p] for p in self._host_positions(host))

    def rows_of_host(self, host: int) -> np.ndarray:
        """The global rows `host` must read, in increasing order (empty if none)."""
        index = blocks_to_index(self.blocks_of_host(host))
        if isinstance(index, slice):
            return np.arange(index.start, index.stop, dtype=np.int64)
        return index

    def row_count(self, host: int) -> int:
        """How many rows `host` must read."""
        return sum(b - a for a, b in self.blocks_of_host(host))

    def devices_of_row(self, row: int) -> tuple[Any, ...]:
        """The devices that hold global row `row`."""
        row = check_int("row", row, minimum=0)
        if row >= self.num_rows:
            raise ValueError(f"row must be in [0, {self.num_rows - 1}], got {row}.")
        return tuple(
            device
            for device, (start, stop) in zip(self.devices, self._rows, strict=True)
            if start <= row < stop
        )

    def hosts_of_row(self, row: int) -> tuple[int, ...]:
        """The hosts whose devices hold global row `row`."""
        return tuple(sorted({self.host_of_device(d) for d in self.devices_of_row(row)}))

    def shared_blocks(self) -> dict[tuple[int, int], tuple[int, ...]]:
        """Row blocks held by more than one host, with those hosts (replicas across hosts)."""
        return dict(self._shared)

    @functools.cached_property
    def _shared(self) -> dict[tuple[int, int], tuple[int, ...]]:
        holders: dict[tuple[int, int], set[int]] = {}
        for block, host in zip(self._rows, self._hosts, strict=True):
            holders.setdefault(block, set()).add(host)
        return {block: tuple(sorted(h)) for block, h in sorted(holders.items()) if len(h) > 1}

    def hosts_sharing_with(self, host: int) -> tuple[int, ...]:
        """The other hosts that hold some of the rows `host` holds (replicas across hosts)."""
        blocks = self.blocks_of_host(host)
        others = {
            other
            for block, holders in self._shared.items()
            if host in holders and any(a <= block[0] < b for a, b in blocks)
            for other in holders
        }
        return tuple(sorted(others - {host}))

    def table(self) -> str:
        """One line per host: its devices, its rows, how many, and who holds them too."""
        lines = [("host", "devices", "rows", "count", "same rows also on hosts")]
        for host in self.hosts:
            blocks = self.blocks_of_host(host)
            devices = ",".join(str(d.id) for d in self.devices_of_host(host))
            also = ",".join(map(str, self.hosts_sharing_with(host))) or "-"
            lines.append((str(host), devices, rows_text(blocks), str(self.row_count(host)), also))
        widths = [max(len(line[i]) for line in lines) for i in range(5)]
        return "\n".join(
            "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
            for line in lines
        )

    def device_table(self) -> str:
        """One line per device: its host and its rows."""
        lines = ["device  host  rows"]
        for device, block, host in zip(self.devices, self._rows, self._hosts, strict=True):
            lines.append(f"{device.id:<6}  {host:<4}  {rows_text([block])}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return (
            f"{self.num_rows} rows over {len(self.devices)} devices on {len(self.hosts)} "
            f"host(s), {describe_sharding(self.sharding)}\n{self.table()}"
        )

    def __repr__(self) -> str:
        return (
            f"RowLedger(num_rows={self.num_rows}, devices={len(self.devices)}, "
            f"hosts={len(self.hosts)}, sharding={describe_sharding(self.sharding)})"
        )


def _partitions(sharding: Sharding, dim: int) -> int:
    """How many blocks dimension `dim` is split into (read off a probe shape)."""
    probe = (len(sharding.device_set),) * (dim + 1)
    try:
        starts = {index[dim].start or 0 for index in sharding.devices_indices_map(probe).values()}
    except ValueError:
        return 1
    return len(starts)
