"""Checkers for tutorial 02 (sharding a batch): bytes and copies of a placement, and
which devices hold a given element on a 2-D mesh.

The cases use the devices at hand, on meshes in `jax.devices()` order and in other
orders (one of them drawn, see `datarax_course._cases.draw`). The memory's right
answers come from JAX (``NamedSharding.shard_shape``); which devices hold an element
comes from the answer key (`datarax_course._cases.reference`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from datarax_course._cases import draw, reference
from datarax_course._core import Ban, call, exercise
from datarax_course._feedback import Feedback, right, wrong
from datarax_course._nb01 import mesh_2d, spec_text
from datarax_course._values import items, plain, reject, shown, whole


def _meshes(name: str) -> Iterator[tuple[str, Mesh]]:
    """1-D and 2-D ("data", "model") meshes of the devices at hand, in several orders, the
    last one in an order drawn for exercise `name`."""
    devices = jax.devices()
    count = len(devices)
    yield f"a ({count},) mesh", Mesh(np.array(devices), ("data",))
    if count % 2 == 0:
        tall = mesh_2d(devices)
        yield f"a {tall.devices.shape} mesh", tall
        wide = Mesh(np.array(devices).reshape(2, -1), ("data", "model"))
        yield f"a {wide.devices.shape} mesh", wide
    shuffled = [devices[int(i)] for i in draw(name).permutation(count)]
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
    rng = draw("02.memory")
    rows, columns = (int(n) * count for n in rng.integers(1, 9, size=2))
    kind = str(rng.choice(["float16", "int32", "float64"]))
    shapes = [((8 * count, 6 * count), np.float32), ((4 * count, 2 * count, 3), np.uint8)]
    for where, mesh in _meshes("02.memory"):
        for spec in _specs(mesh):
            for shape, dtype in [*shapes, ((rows, columns), kind)]:
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


def _holder_cases() -> list[tuple[str, tuple[Mesh, PartitionSpec, tuple[int, int], Any]]]:
    """(text, (mesh, spec, shape, index)) for devices_holding: four fixed elements and a
    drawn one, for every spec on every 2-D mesh."""
    count = len(jax.devices())
    shape = (2 * count, 2 * count)
    spots = [(0, 0), (2 * count - 1, 1), (count + 1, count - 1), (3, 2 * count - 2)]
    drawn = draw("02.devices_holding")
    cases = []
    for where, mesh in _meshes("02.devices_holding"):
        if len(mesh.axis_names) == 2:
            for spec in _specs(mesh):
                extra = tuple(int(n) for n in drawn.integers(0, 2 * count, size=2))
                for index in [*spots, extra]:
                    text = f"element {index} of a {shape} array with {spec_text(spec)} on {where}"
                    cases.append((text, (mesh, spec, shape, index)))
    return cases


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


@exercise(
    "02.devices_holding",
    idea="find which block of each dimension the element falls in, then which mesh "
    "coordinates hold that block.",
    method="a dimension's block number is index // block size; a mesh axis the spec names "
    "sits at that block's coordinate (the last axis of a tuple varies fastest), an axis it "
    "leaves out at every coordinate. Index mesh.devices with those coordinates and read "
    "the ids.",
    cases=_holder_cases,
)
def _devices_holding(answer: Any) -> Feedback:
    cases = _holder_cases()
    found = [_ids(call(answer, *arguments, bans=_NO_INDICES_MAP)) for _, arguments in cases]
    expected = reference("02.devices_holding", cases)
    for (text, (mesh, *_)), got, right_ids in zip(cases, found, expected, strict=True):
        if got != set(right_ids):
            layout = np.vectorize(lambda d: d.id)(mesh.devices).tolist()
            return wrong(
                f"{text} (mesh.devices ids, by row: {layout}) is held by devices "
                f"{sorted(right_ids)}, but your function returned {sorted(got)}."
            )
    return right(
        f"all {len(cases)} elements are found on the right devices, on meshes in any device order."
    )
