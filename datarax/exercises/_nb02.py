"""Checkers for tutorial 02 (sharding a batch): bytes and copies of a placement, and
which devices hold a given element on a 2-D mesh.

The cases use the devices at hand, on meshes from `jax.make_mesh` and on meshes whose
devices are not in `jax.devices()` order; the right answers come from
``NamedSharding.shard_shape`` and ``devices_indices_map``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from datarax.exercises._core import Feedback, call, exercise, right, wrong
from datarax.exercises._nb01 import mesh_2d, spec_text


def _meshes() -> Iterator[tuple[str, Mesh]]:
    """1-D and 2-D ("data", "model") meshes of the devices at hand, in several orders."""
    devices = jax.devices()
    count = len(devices)
    yield f"a ({count},) mesh", jax.make_mesh((count,), ("data",))
    made = jax.make_mesh((count // 2, 2), ("data", "model")) if count % 2 == 0 else None
    if made is not None:
        yield f"a {made.devices.shape} mesh", made
        wide = Mesh(np.asarray(made.devices).reshape(2, -1), ("data", "model"))
        yield f"a {wide.devices.shape} mesh", wide
    shuffled = [devices[i] for i in np.random.default_rng(count).permutation(count)]
    mixed = mesh_2d(shuffled)
    order = ", ".join(str(d.id) for d in shuffled)
    yield f"a {mixed.devices.shape} mesh of devices {order}", mixed


def _specs(mesh: Mesh) -> list[PartitionSpec]:
    if len(mesh.axis_names) == 1:
        return [PartitionSpec("data"), PartitionSpec(), PartitionSpec(None, "data")]
    return [
        PartitionSpec("data"),
        PartitionSpec("model"),
        PartitionSpec(),
        PartitionSpec("data", "model"),
        PartitionSpec("model", "data"),
        PartitionSpec(None, "model"),
        PartitionSpec(("data", "model")),
        PartitionSpec(("model", "data"), None),
    ]


def _memory_cases() -> Iterator[tuple[str, tuple[int, ...], Any, Mesh, PartitionSpec]]:
    count = len(jax.devices())
    shapes = [((8 * count, 6 * count), np.float32), ((4 * count, 2 * count, 3), np.uint8)]
    for where, mesh in _meshes():
        for spec in _specs(mesh):
            for shape, dtype in shapes:
                yield where, shape, np.dtype(dtype), mesh, spec


@exercise(
    "02.memory",
    hint="a dimension is divided by the sizes of the mesh axes its spec entry names (a "
    "tuple names several). What do the mesh axes that no entry names do?",
)
def _memory(answer: Any) -> Feedback:
    tried = 0
    for where, shape, dtype, mesh, spec in _memory_cases():
        sharding = NamedSharding(mesh, spec)
        per_device = math.prod(sharding.shard_shape(shape)) * dtype.itemsize
        copies = mesh.size * per_device // (math.prod(shape) * dtype.itemsize)
        expected = (per_device, copies, per_device * mesh.size)
        got = call(answer, shape, dtype, mesh, spec)
        shape_hint = f"return three whole numbers (bytes per device, copies, total); got {got!r}."
        try:
            found = tuple(int(part) for part in got)
        except (TypeError, ValueError):
            return wrong(shape_hint)
        if len(found) != 3:
            return wrong(shape_hint)
        case = f"a {shape} {dtype.name} array with {spec_text(spec)} on {where}"
        for name, mine, right_value in zip(
            ("bytes per device", "copies", "total bytes"), found, expected, strict=True
        ):
            if mine != right_value:
                return wrong(
                    f"for {case}, {name} is {right_value:,}, but your function returned "
                    f"{mine:,}. Each device holds a block of shape "
                    f"{sharding.shard_shape(shape)}."
                )
        tried += 1
    return right(f"bytes, copies and totals match JAX's shard shapes in all {tried} cases.")


def _holder_cases() -> Iterator[tuple[str, Mesh, PartitionSpec, tuple[int, int], tuple[int, int]]]:
    count = len(jax.devices())
    shape = (2 * count, 2 * count)
    spots = [(0, 0), (2 * count - 1, 1), (count + 1, count - 1), (3, 2 * count - 2)]
    for where, mesh in _meshes():
        if len(mesh.axis_names) == 2:
            for spec in _specs(mesh):
                for index in spots:
                    yield where, mesh, spec, shape, index


def holders(mesh: Mesh, spec: PartitionSpec, shape: tuple[int, ...], index: Any) -> set[int]:
    """The ids of the devices that hold element `index` of an array of `shape`."""
    placed = NamedSharding(mesh, spec).devices_indices_map(shape)
    found = set()
    for device, slices in placed.items():
        inside = (
            pos in range(*part.indices(size))
            for pos, part, size in zip(index, slices, shape, strict=True)
        )
        if all(inside):
            found.add(device.id)
    return found


@exercise(
    "02.devices_holding",
    hint="find each dimension's block number (index // block size); a mesh axis the spec "
    "names sits at that block's coordinate, one it leaves out at every coordinate. Read the "
    "ids from mesh.devices.",
)
def _devices_holding(answer: Any) -> Feedback:
    tried = 0
    for where, mesh, spec, shape, index in _holder_cases():
        expected = holders(mesh, spec, shape, index)
        got = call(answer, mesh, spec, shape, index)
        try:
            found = {int(getattr(d, "id", d)) for d in got}
        except (TypeError, ValueError):
            return wrong(f"return a set of device ids; got {got!r}.")
        if found != expected:
            layout = np.vectorize(lambda d: d.id)(mesh.devices).tolist()
            return wrong(
                f"element {index} of a {shape} array with {spec_text(spec)} on {where} "
                f"(mesh.devices ids, by row: {layout}) is held by devices {sorted(expected)}, "
                f"but your function returned {sorted(found)}."
            )
        tried += 1
    return right(
        f"all {tried} elements are found on the right devices, on meshes in any device order."
    )
