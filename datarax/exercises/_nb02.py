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

from datarax.exercises._core import Ban, answer_key, call, exercise
from datarax.exercises._feedback import Feedback, right, wrong
from datarax.exercises._nb01 import mesh_2d, spec_text
from datarax.exercises._values import items, plain, reject, shown, whole
from datarax.sharding._placement import device_spans


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


# Placing nothing: the shard shapes and placements JAX would compute are off limits.
_NO_PLACING = (
    Ban(jax, "device_put", "jax.device_put"),
    Ban(NamedSharding, "shard_shape", "NamedSharding.shard_shape"),
    Ban(NamedSharding, "devices_indices_map", "NamedSharding.devices_indices_map"),
)


@exercise(
    "02.memory",
    idea="each dimension is divided by the sizes of the mesh axes its spec entry names; "
    "what do the mesh axes that no entry names do?",
    method="walk the spec's entries with the shape (a tuple entry names several axes, None "
    "none), divide each dimension by the product of mesh.shape[axis] over its axes, "
    "multiply by dtype.itemsize; the axes named nowhere each multiply the copies; the "
    "total is bytes per device x mesh.size.",
)
def _memory(answer: Any) -> Feedback:
    tried = 0
    for where, shape, dtype, mesh, spec in _memory_cases():
        sharding = NamedSharding(mesh, spec)
        per_device = math.prod(sharding.shard_shape(shape)) * dtype.itemsize
        copies = mesh.size * per_device // (math.prod(shape) * dtype.itemsize)
        expected = (per_device, copies, per_device * mesh.size)
        got = call(answer, shape, dtype, mesh, spec, bans=_NO_PLACING)
        three = "three whole numbers (bytes per device, copies, total)"
        parts = items(got, "memory's result", three, 3)
        found = [whole(part, "each of memory's numbers") for part in parts]
        case = f"a {shape} {dtype.name} array with {spec_text(spec)} on {where}"
        for name, mine, right_value in zip(
            ("bytes per device", "copies", "total bytes"), found, expected, strict=True
        ):
            if mine != right_value:
                return wrong(
                    f"for {case}, {name} is {right_value:,}, but your function returned "
                    f"{shown(mine)}. Each device holds a block of shape "
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


_NO_INDICES_MAP = (Ban(NamedSharding, "devices_indices_map", "devices_indices_map"),)


def _ids(value: Any) -> set[int]:
    """Device ids from a set (or list) of ids or of devices."""
    expected = "a set of device ids"
    kinds: tuple[Any, ...] = (set, frozenset, list, tuple)
    kind = next((kind for kind in kinds if isinstance(value, kind)), None)
    if kind is not None and kind.__len__(value) <= 4096:  # read through the built-in type
        value = [d.id if isinstance(d, jax.Device) else d for d in kind.__iter__(value)]
    ids = plain(value, "devices_holding's result", expected)
    if isinstance(ids, np.ndarray) and ids.ndim == 1:
        ids = list(ids)
    if not isinstance(ids, (set, list, tuple)):
        raise reject("devices_holding's result", ids, expected)
    return {whole(each, "each device id") for each in ids}


@answer_key
def holders(mesh: Mesh, spec: PartitionSpec, shape: tuple[int, ...], index: Any) -> set[int]:
    """The ids of the devices that hold element `index` of an array of `shape`."""
    blocks = device_spans(NamedSharding(mesh, spec), shape)
    return {
        device.id
        for device, block in blocks.items()
        if all(start <= pos < stop for pos, (start, stop) in zip(index, block, strict=True))
    }


@exercise(
    "02.devices_holding",
    idea="find which block of each dimension the element falls in, then which mesh "
    "coordinates hold that block.",
    method="a dimension's block number is index // block size; a mesh axis the spec names "
    "sits at that block's coordinate (the last axis of a tuple varies fastest), an axis it "
    "leaves out at every coordinate. Index mesh.devices with those coordinates and read "
    "the ids.",
)
def _devices_holding(answer: Any) -> Feedback:
    tried = 0
    for where, mesh, spec, shape, index in _holder_cases():
        expected = holders(mesh, spec, shape, index)
        got = call(answer, mesh, spec, shape, index, bans=_NO_INDICES_MAP)
        found = _ids(got)
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
