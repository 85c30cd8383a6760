"""Checkers for tutorial 14, a memory budget.

``14.bytes_per_device``: for a tree of parameters (``jax.ShapeDtypeStruct`` leaves, or
arrays), an optax optimizer, a mesh and a PartitionSpec per parameter, the bytes that
one device holds of the parameters, of their gradients and of the optimizer's state,
as ``{"params": ..., "grads": ..., "optimizer": ...}``.

The right answers come from JAX and optax, computed by the answer keys
(`datarax_course._keys.memory_truth`, where the keys are) once the reader's function has
answered every case: the state's leaves, with their shapes and dtypes, from
``jax.eval_shape(optimizer.init, params)``; the spec of each state leaf from
``optax.tree_utils.tree_map_params`` (a leaf that mirrors a parameter, such as Adam's
moments, takes that parameter's spec; any other, such as Adam's step count, is
replicated); and each leaf's bytes on one device from
``NamedSharding(mesh, spec).shard_shape(shape)`` times its dtype's size. A gradient has
its parameter's shape, dtype and sharding. The prompt asks for that arithmetic without
the library's own byte counts, so `datarax.viz.leaf_summaries` (which `viz.summarize`
reads too) is refused while the reader's function runs. The trees, dtypes, optimizers
and specs are drawn with ``draw("14.bytes_per_device")``, other ones when grading, on
meshes of the devices at hand.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import AxisType, Mesh, PartitionSpec

from datarax_course._cases import counted, counted_here, draw
from datarax_course._core import Ban, call, exercise, keys_banned
from datarax_course._feedback import Feedback, Rejected, right, wrong
from datarax_course._nb01 import spec_text
from datarax_course._values import number, plain, reject, shown

_NAME = "14.bytes_per_device"
_PARTS = ("params", "grads", "optimizer")
_EXPECTED = 'a dict {"params": bytes, "grads": bytes, "optimizer": bytes} of whole numbers'

# The optimizers tried, by the text that makes them; each is made anew for every call.
_OPTIMIZERS: dict[str, Callable[[], optax.GradientTransformation]] = {
    "optax.adam(1e-3)": lambda: optax.adam(1e-3),
    "optax.sgd(0.1)": lambda: optax.sgd(0.1),
    "optax.sgd(0.1, momentum=0.9)": lambda: optax.sgd(0.1, momentum=0.9),
    "optax.adamw(1e-3)": lambda: optax.adamw(1e-3),
    "optax.lion(1e-4)": lambda: optax.lion(1e-4),
    "optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-3))": lambda: optax.chain(
        optax.clip_by_global_norm(1.0), optax.adam(1e-3)
    ),
    "optax.adam(1e-3, mu_dtype=jnp.float32)": lambda: optax.adam(1e-3, mu_dtype=jnp.float32),
}
_DTYPES = ("float32", "bfloat16", "float16")
_LAYOUTS = ("DP", "FSDP", "FSDP + TP", "a spec drawn per leaf")


def _no_summaries() -> tuple[Ban, ...]:
    """The library's byte counts, banned: the prompt asks for the arithmetic without them
    (`viz.summarize` reads them too). Imported here: `datarax.viz` needs the viz extra."""
    from datarax.viz import leaf_summaries

    return (Ban(leaf_summaries, "__code__", "datarax.viz.leaf_summaries"),)


def _is_spec(value: Any) -> bool:
    return isinstance(value, PartitionSpec)


def _meshes() -> list[tuple[str, Mesh]]:
    """A 1-D "data" mesh and, for an even count, a ("data", "model") mesh of 2 along
    "model", of the devices at hand in an order drawn for the exercise."""
    devices = jax.devices()
    count = len(devices)
    order = [devices[int(i)] for i in draw(_NAME).permutation(count)]
    meshes = [(f"a ({count},) ('data',) mesh", Mesh(np.array(order), ("data",), (AxisType.Auto,)))]
    if count % 2 == 0:
        grid = np.array(order, dtype=object).reshape(count // 2, 2)
        auto = (AxisType.Auto, AxisType.Auto)
        meshes.append(
            (f"a ({count // 2}, 2) ('data', 'model') mesh", Mesh(grid, ("data", "model"), auto))
        )
    return meshes


def _tree(rng: np.random.Generator, count: int) -> dict[str, Any]:
    """A nested dict of 4 to 7 parameter shapes: matrices and vectors whose dimensions
    the mesh divides, and one vector it does not (it stays whole on every device)."""
    unit = 2 * count  # divisible by every axis of both meshes, and by both at once
    leaves: dict[str, Any] = {
        "embed": (unit * int(rng.integers(2, 9)), unit * int(rng.integers(1, 4)))
    }
    for layer in range(int(rng.integers(1, 3))):
        width, hidden = unit * int(rng.integers(1, 4)), unit * int(rng.integers(1, 5))
        block: dict[str, Any] = {"kernel": (width, hidden), "scale": (hidden,)}
        if rng.random() < 0.5:
            block["out"] = (hidden, width)
        leaves[f"layer_{layer}"] = block
    leaves["odd_bias"] = (int(rng.integers(1, count + 1)) * 2 + 1,)  # odd: no axis divides it
    return leaves


def _specs(shapes: Any, layout: str, mesh: Mesh, rng: np.random.Generator) -> Any:
    """A PartitionSpec per leaf of `shapes`: replicated (DP), the first dimension over
    "data" (FSDP), both axes on matrices (FSDP + TP), or drawn per leaf."""
    two = "model" in mesh.axis_names

    def divides(size: int, axes: tuple[str, ...]) -> bool:
        return size % math.prod(mesh.shape[axis] for axis in axes) == 0

    def rule(shape: tuple[int, ...]) -> PartitionSpec:
        if layout == "DP":
            return PartitionSpec()
        if layout == "FSDP":
            return PartitionSpec("data") if divides(shape[0], ("data",)) else PartitionSpec()
        if layout == "FSDP + TP":
            if len(shape) == 2:
                return PartitionSpec("data", "model")
            return PartitionSpec("model") if divides(shape[0], ("model",)) else PartitionSpec()
        entries: list[Any] = [None, "data", ("data",)]
        if two:
            entries += ["model", ("data", "model"), ("model", "data")]
        chosen: list[Any] = []
        for size in shape:
            taken = {a for e in chosen if e for a in ((e,) if isinstance(e, str) else e)}
            usable = [
                e
                for e in entries
                if e is None
                or (
                    divides(size, (e,) if isinstance(e, str) else e)
                    and not taken & set((e,) if isinstance(e, str) else e)
                )
            ]
            chosen.append(usable[int(rng.integers(len(usable)))])
        return PartitionSpec(*chosen)

    return jax.tree.map(rule, shapes, is_leaf=lambda x: isinstance(x, tuple))


class _Case:
    """One case: the text that names it, and the arguments made anew for each call."""

    def __init__(
        self,
        shapes: Any,
        dtypes: Any,
        optimizer: str,
        mesh: tuple[str, Mesh],
        layout: str,
        specs: Any,
        arrays: bool,
    ) -> None:
        self.shapes, self.dtypes, self.optimizer_text = shapes, dtypes, optimizer
        self.where, self.mesh = mesh
        self.layout, self.specs, self.arrays = layout, specs, arrays

    def params(self) -> Any:
        def leaf(shape: tuple[int, ...], dtype: str) -> Any:
            if self.arrays:
                return jnp.zeros(shape, dtype)
            return jax.ShapeDtypeStruct(shape, jnp.dtype(dtype))

        return jax.tree.map(leaf, self.shapes, self.dtypes, is_leaf=lambda x: isinstance(x, tuple))

    def arguments(self) -> tuple[Any, ...]:
        specs = jax.tree.map(lambda s: PartitionSpec(*s), self.specs, is_leaf=_is_spec)
        return self.params(), _OPTIMIZERS[self.optimizer_text](), self.mesh, specs

    def text(self) -> str:
        leaves = jax.tree_util.tree_leaves_with_path(self.shapes, is_leaf=_is_shape)
        kinds = jax.tree.leaves(self.dtypes)
        specs = jax.tree.leaves(self.specs, is_leaf=_is_spec)
        listed = ", ".join(
            f"{jax.tree_util.keystr(path)}: {shape} {dtype} {spec_text(spec)}"
            for (path, shape), dtype, spec in zip(leaves, kinds, specs, strict=True)
        )
        made = "arrays" if self.arrays else "ShapeDtypeStructs"
        return (
            f"{self.optimizer_text} on {self.where}, {self.layout}, parameters given as "
            f"{made} ({listed})"
        )


def _is_shape(value: Any) -> bool:
    return isinstance(value, tuple) and not isinstance(value, PartitionSpec)


def _cases() -> Iterator[_Case]:
    """Every optimizer once on each mesh, each layout among them, and one case with arrays
    for parameters; the trees, dtypes and drawn specs come from `draw`."""
    rng = draw(_NAME)
    count = len(jax.devices())
    meshes = _meshes()
    names = list(_OPTIMIZERS)
    for number_, optimizer in enumerate(names):
        for mesh_number, mesh in enumerate(meshes):
            shapes = _tree(rng, count)
            kind = str(rng.choice(_DTYPES))
            dtypes = jax.tree.map(lambda _, kind=kind: kind, shapes, is_leaf=_is_shape)
            if "mu_dtype" in optimizer:
                dtypes = jax.tree.map(lambda _: "bfloat16", shapes, is_leaf=_is_shape)
            elif rng.random() < 0.4:  # mixed dtypes in one tree
                dtypes = jax.tree.map(lambda _: str(rng.choice(_DTYPES)), shapes, is_leaf=_is_shape)
            two = "model" in mesh[1].axis_names
            layouts = _LAYOUTS if two else tuple(x for x in _LAYOUTS if x != "FSDP + TP")
            layout = layouts[(number_ + mesh_number) % len(layouts)]
            specs = _specs(shapes, layout, mesh[1], rng)
            arrays = number_ == 0 and mesh_number == 0
            yield _Case(shapes, dtypes, optimizer, mesh, layout, specs, arrays)


def _read(value: Any) -> dict[str, float]:
    """The reader's dict of three numbers (numbers as floats, checked whole later)."""
    read = plain(value, "bytes_per_device's result", _EXPECTED)
    if not isinstance(read, dict):
        raise reject("bytes_per_device's result", read, _EXPECTED)
    missing = [part for part in _PARTS if part not in read]
    extra = sorted(str(key) for key in read if key not in _PARTS)
    if missing or extra:
        said = f"it has no {', '.join(map(repr, missing))}" if missing else ""
        said += ("; " if said and extra else "") + (
            f"it has {', '.join(map(repr, extra))} too" if extra else ""
        )
        raise Rejected(wrong(f"bytes_per_device's result should be {_EXPECTED}; {said}."))
    return {part: number(read[part], f"your {part!r} bytes") for part in _PARTS}


def _diagnosis(part: str, got: float, truth: Any) -> str:
    """What a common mistake gave, or "" when the number is none of them (`truth`: the
    answer keys' `Held` of the case)."""
    kind = "optimizer" if part == "optimizer" else "params"
    right_value = truth.optimizer if part == "optimizer" else truth.params
    elements, whole, divided = truth.elements[kind], truth.whole[kind], truth.divided[kind]
    if part == "grads" and got == 0:
        return (
            " Every parameter has a gradient of its shape, dtype and sharding: the gradients "
            "take what the parameters take."
        )
    if got == elements and elements != right_value:
        return (
            " That is the number of elements a device holds: multiply each leaf's by its "
            "dtype's size in bytes (np.dtype(leaf.dtype).itemsize)."
        )
    if got == whole and whole != right_value:
        return (
            " That is every leaf whole, as if nothing were split: a device holds only the "
            "block NamedSharding(mesh, spec).shard_shape(leaf.shape) of each leaf."
        )
    if math.isclose(got, divided) and divided != right_value:
        return (
            " That divides every leaf by the number of devices, replicated ones too: a "
            "leaf whose spec leaves a mesh axis out is copied along it, and a replicated "
            "leaf (spec P()) is whole on every device."
        )
    if part != "optimizer":
        return ""
    if got == truth.in_param_dtypes and got != right_value:
        return (
            " That counts every moment in its parameter's dtype, but this optimizer keeps "
            "some in another one (mu_dtype): read each state leaf's own dtype."
        )
    if truth.scalars and got == right_value - truth.scalars:
        return (
            f" You left out {truth.scalars} bytes of state that mirror no parameter, such "
            "as the step count, a whole int32 on every device."
        )
    if truth.mirror_copies >= 2 and got in (
        right_value - truth.params,
        right_value - truth.params - truth.scalars,
    ):
        return (
            f" This optimizer keeps {truth.mirror_copies} copies of the parameters' tree "
            "(Adam: the first and second moments, mu and nu): count every leaf of the "
            "state that jax.eval_shape(optimizer.init, params) gives."
        )
    if got in (truth.params, truth.params + truth.scalars) and truth.mirror_copies != 1:
        return (
            " That is what the parameters take: the state's size depends on the optimizer "
            "(none for plain SGD, two moments for Adam); read it from "
            "jax.eval_shape(optimizer.init, params)."
        )
    return ""


@exercise(
    _NAME,
    idea="each leaf takes, on one device, the bytes of its block under its spec; the "
    "gradients mirror the parameters, and the optimizer's state is a tree of its own, "
    "whose leaves take the spec of the parameter they mirror (or none: replicated).",
    method="state = jax.eval_shape(optimizer.init, params); state_specs = "
    "optax.tree_utils.tree_map_params(optimizer, lambda _, spec: spec, state, specs, "
    "transform_non_params=lambda _: P(), is_leaf=lambda x: isinstance(x, P)); then for "
    "every (leaf, spec) pair, math.prod(NamedSharding(mesh, spec).shard_shape(leaf.shape)) "
    "* np.dtype(leaf.dtype).itemsize, summed over jax.tree.leaves(...) of each tree "
    "(is_leaf=lambda x: isinstance(x, P) for the specs).",
)
def _bytes_per_device(answer: Any) -> Feedback:
    found = counted(_NAME)
    bans = (*_no_summaries(), *keys_banned(found, "the checker's own count"))
    cases = list(_cases())
    answers = [_read(call(answer, *case.arguments(), bans=bans)) for case in cases]
    held_of = counted_here(_NAME, found)  # every case answered before any is counted
    for case, got in zip(cases, answers, strict=True):
        truth = held_of(*case.arguments())
        expected = {"params": truth.params, "grads": truth.params, "optimizer": truth.optimizer}
        for part in _PARTS:
            value = got[part]
            if value == expected[part]:
                continue
            mistake = _diagnosis(part, value, truth)
            if not mistake and not float(value).is_integer():
                return wrong(
                    f"for {case.text()}, your {part!r} is {shown(value)}, not a whole "
                    "number of bytes: a device holds whole blocks "
                    "(NamedSharding(mesh, spec).shard_shape gives one), and a replicated "
                    "leaf, such as a step count, is whole on every device."
                )
            said = f"{int(value):,}" if float(value).is_integer() else shown(value)
            return wrong(
                f"for {case.text()}, one device holds {expected[part]:,} bytes of "
                f"{_WHAT[part]}, but your function returned {said}." + mistake
            )
    meshes = "1-D and 2-D meshes" if len(_meshes()) == 2 else "a 1-D mesh"
    return right(
        f"parameters, gradients and optimizer state match JAX's shard shapes in all "
        f"{len(cases)} cases: Adam, AdamW, Lion, SGD with and without momentum, a chain, "
        f"moments in another dtype, replicated and split leaves on {meshes}."
    )


_WHAT = {
    "params": "the parameters",
    "grads": "the gradients",
    "optimizer": "the optimizer's state",
}
