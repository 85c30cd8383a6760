"""What the playground shows for one choice of mesh, hosts and spec, built with JAX itself.

`build_view` places a real `jax.Array` with `ArraySharder` when the mesh fits the
devices present; a bigger mesh is laid out on stand-in devices and read off a
`jax.ShapeDtypeStruct` and `devices_indices_map` instead. Either way every shard,
row and host comes from JAX's placement; nothing here re-derives it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from datarax.sharding import ArraySharder, RowLedger, pretend_hosts
from datarax_course._checks import check_spec_against_mesh, named_leaf_sharding

from . import _playground_code

MAX_AXES, MAX_RANK, MAX_DEVICES = 3, 4, 64
MAX_AXIS_SIZE, MAX_HOSTS, MAX_BATCH, MAX_DIM = 16, 16, 512, 64
ORDERS = ("in order", "interleaved")
AXIS_TYPES = ("Auto", "Explicit")
DTYPES = ("float32", "bfloat16", "int32", "uint8")
Entry = tuple[int, ...]  # one spec entry: positions of mesh axes; () is None


@dataclasses.dataclass(frozen=True)
class Settings:
    """Every choice the playground's controls make; `spec` holds mesh axis positions."""

    mesh_shape: tuple[int, ...]
    axis_names: tuple[str, ...]
    spec: tuple[Entry, ...]  # one entry per dimension of the leaf
    batch_size: int
    feature_shape: tuple[int, ...]  # dimensions 1+ of the leaf
    hosts: int
    device_order: str
    axis_types: str
    dtype: str

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.batch_size, *self.feature_shape)

    def partition_spec(self) -> PartitionSpec:
        """The spec by axis names; positions past the mesh's axes are dropped."""
        entries: list[Any] = []
        for entry in self.spec:
            names = [self.axis_names[i] for i in entry if i < len(self.axis_names)]
            entries.append(None if not names else names[0] if len(names) == 1 else tuple(names))
        return PartitionSpec(*entries)


@dataclasses.dataclass(frozen=True)
class DeviceRow:
    """One device's part of the leaf: where it sits in the mesh and what it holds."""

    device: int
    host: int
    position: tuple[int, ...]
    index: tuple[tuple[int, int], ...]  # (start, stop) per dimension
    shard_shape: tuple[int, ...]
    nbytes: int


@dataclasses.dataclass(frozen=True)
class HostRow:
    """One host's rows of the global batch and the hosts that hold some of them too."""

    host: int
    devices: tuple[int, ...]
    blocks: tuple[tuple[int, int], ...]
    count: int
    also_on: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class View:
    """Everything the playground shows for one `Settings`."""

    settings: Settings
    sharding: NamedSharding
    array: Any  # a placed jax.Array, or a jax.ShapeDtypeStruct for a mesh too big to place
    real: bool
    devices_present: int
    device_rows: tuple[DeviceRow, ...]
    host_rows: tuple[HostRow, ...]
    code: str
    ledger: RowLedger

    @property
    def basis(self) -> str:
        """One sentence: what the views were computed from."""
        needed = math.prod(self.settings.mesh_shape)
        if self.real:
            return (
                f"Computed from a real jax.Array placed on {needed} of the "
                f"{self.devices_present} devices with ArraySharder().shard."
            )
        return (
            f"This mesh needs {needed} devices and this runtime has {self.devices_present}, "
            "so nothing is placed: the views come from jax.ShapeDtypeStruct and "
            "devices_indices_map on stand-in devices (the same JAX placement rules)."
        )


@dataclasses.dataclass(frozen=True)
class _StandIn:
    """A device that does not exist here, for laying out a mesh bigger than the runtime."""

    id: int
    platform: str
    device_kind: str  # jax 0.12 reads it to build a mesh's abstract devices
    process_index: int = 0


def check_names(names: tuple[str, ...]) -> None:
    """Raises ValueError unless the axis names are non-empty, distinct identifiers."""
    for name in names:
        if not name.isidentifier():
            raise ValueError(
                f"Mesh axis name {name!r} is not a Python identifier; use a short name "
                "such as 'data' or 'model' (letters, digits and _, not starting with a digit)."
            )
    if len(set(names)) != len(names):
        raise ValueError(
            f"Mesh axis names must differ from each other, got {names}; rename one, "
            "e.g. ('data', 'model')."
        )


def build_view(settings: Settings) -> View:
    """Places the leaf (or lays it out, for a mesh bigger than the runtime) and reads it.

    Raises:
        ValueError: JAX or the library rejects the combination; the message says why.
    """
    check_names(settings.axis_names)
    count = math.prod(settings.mesh_shape)
    if count > MAX_DEVICES:
        raise ValueError(
            f"The mesh {settings.mesh_shape} has {count} devices; the playground draws "
            f"meshes of up to {MAX_DEVICES}. Make an axis smaller."
        )
    present = jax.devices()
    real = count <= len(present)
    platform, kind = str(present[0].platform), str(present[0].device_kind)
    machine = present[:count] if real else [_StandIn(i, platform, kind) for i in range(count)]
    host_of = pretend_hosts(settings.hosts, machine)
    per_host = count // settings.hosts
    order = list(range(count))
    if settings.device_order == "interleaved":
        order = [h * per_host + k for k in range(per_host) for h in range(settings.hosts)]
    grid = np.array([machine[i] for i in order], dtype=object).reshape(settings.mesh_shape)
    types = (getattr(AxisType, settings.axis_types),) * len(settings.mesh_shape)
    mesh = Mesh(grid, settings.axis_names, axis_types=types)
    spec = settings.partition_spec()
    check_spec_against_mesh(spec, dict(zip(settings.axis_names, settings.mesh_shape, strict=True)))
    sharding = NamedSharding(mesh, spec)
    dtype = np.dtype(jax.numpy.dtype(settings.dtype))
    code = _playground_code.layout_code(settings, order, len(present))
    if real:
        array = ArraySharder().shard(np.zeros(settings.shape, dtype), sharding)
        index_of = {shard.device.id: shard.index for shard in array.addressable_shards}
    else:
        named_leaf_sharding("batch", settings.shape, sharding)  # the library's own checks
        array = jax.ShapeDtypeStruct(settings.shape, dtype, sharding=sharding)
        index_of = {d.id: i for d, i in sharding.devices_indices_map(settings.shape).items()}
    ledger = RowLedger(sharding, settings.batch_size, host_of=host_of)  # a plan: any devices
    positions = {device.id: tuple(int(p) for p in at) for at, device in np.ndenumerate(grid)}
    device_rows = []
    for device_id in sorted(index_of):
        spans = tuple(
            s.indices(n)[:2] for s, n in zip(index_of[device_id], settings.shape, strict=True)
        )
        shard_shape = tuple(stop - start for start, stop in spans)
        nbytes = math.prod(shard_shape) * dtype.itemsize
        row = DeviceRow(
            device_id, host_of[device_id], positions[device_id], spans, shard_shape, nbytes
        )
        device_rows.append(row)
    host_rows = _hosts_from_ledger(ledger)
    return View(
        settings, sharding, array, real, len(present), tuple(device_rows), host_rows, code, ledger
    )


def _hosts_from_ledger(ledger: RowLedger) -> tuple[HostRow, ...]:
    return tuple(
        HostRow(
            host,
            tuple(d.id for d in ledger.devices_of_host(host)),
            tuple(ledger.blocks_of_host(host)),
            ledger.row_count(host),
            ledger.hosts_sharing_with(host),
        )
        for host in ledger.hosts
    )
