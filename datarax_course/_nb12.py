"""Checkers for tutorial 12, collectives and their costs.

``12.collectives_of``: from the text of a compiled program (what
``jax.jit(f).lower(*args).compile().as_text()`` returns), which collectives the program
runs and how many bytes their results hold on one device: ``{"all-reduce": bytes, ...}``,
one entry for each kind present (all-gather, reduce-scatter, all-reduce,
collective-permute, all-to-all), the bytes summed over that kind's operations.

The right answers are read from the compiled text itself: the checker compiles the
programs, on the devices at hand, and, once the reader's function has read every text,
the answer keys read each collective's result shape and dtype
(`datarax_course._keys.compiled_reading`, where the keys are: the grader's process, a
reader's own installation). An operation is counted once: XLA may print a collective as
an asynchronous pair, ``all-gather-start`` then ``all-gather-done``, whose ``-start``
result is a tuple that also holds the operand, so the ``-done`` (or the plain operation)
is the one counted.
A result may be a tuple: XLA combines several all-reduces into one whose result is a
tuple of arrays, and the CPU backend writes an all-to-all as a tuple of pieces; every
array of the tuple counts. The programs: data parallelism (a gradient all-reduce),
FSDP written with ``shard_map`` (an all-gather of the weights and, in the gradient, a
reduce-scatter), a weight split ``P(None, "model")`` on a (data, model) mesh, and the
five collectives of the lesson in one ``shard_map``; their sizes and dtype are drawn
(other ones when grading). A fifth text comes from a TPU (`datarax_course._hlo_tpu`),
since only a TPU or GPU compiler prints asynchronous pairs.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from datarax_course._cases import Unavailable, counted, counted_here, draw
from datarax_course._core import call, exercise, keys_banned
from datarax_course._feedback import Feedback, Rejected, right, wrong
from datarax_course._hlo_tpu import FIVE_COLLECTIVES_V5E_2X4
from datarax_course._values import plain, reject, shown, whole

KINDS = ("all-gather", "reduce-scatter", "all-reduce", "collective-permute", "all-to-all")
NAME = "12.collectives_of"
_EXPECTED = (
    "a dict from each collective the program has to the bytes of its results, such as "
    '{"all-reduce": 4096}'
)


# The programs the checker compiles -------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Sizes:
    """A two-layer model's sizes and dtype, drawn; every width a multiple of the devices
    where a mesh axis splits it."""

    rows: int  # per device
    inputs: int
    hidden: int
    outputs: int
    dtype: str


def _sizes(devices: int) -> _Sizes:
    rng = draw("12.collectives_of")
    return _Sizes(
        rows=int(rng.integers(1, 5)),
        inputs=devices * int(rng.integers(1, 7)),
        hidden=devices * int(rng.integers(1, 9)),
        outputs=devices * int(rng.integers(1, 4)),
        dtype=str(rng.choice(["float32", "bfloat16"])),
    )


def _loss(params: dict[str, Any], x: Any) -> Any:
    hidden = jax.nn.relu(x @ params["w1"])
    return jnp.mean((hidden @ params["w2"]).astype(jnp.float32) ** 2)


def _placed(shape: tuple[int, ...], dtype: str, mesh: Mesh, spec: P) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, jnp.dtype(dtype), sharding=NamedSharding(mesh, spec))


def _compiled(function: Any, *args: Any) -> str:
    text = jax.jit(function).lower(*args).compile().as_text()
    assert text is not None, "XLA gave no text for a compiled program"
    return text


def _data_parallel(sizes: _Sizes, mesh: Mesh) -> str:
    params = {
        "w1": _placed((sizes.inputs, sizes.hidden), sizes.dtype, mesh, P()),
        "w2": _placed((sizes.hidden, sizes.outputs), sizes.dtype, mesh, P()),
    }
    x = _placed((sizes.rows * mesh.size, sizes.inputs), sizes.dtype, mesh, P("data"))
    return _compiled(jax.grad(_loss), params, x)


def _fsdp(sizes: _Sizes, mesh: Mesh) -> str:
    def per_device(params: dict[str, Any], x: Any) -> Any:
        whole_params = {k: jax.lax.all_gather(v, "data", tiled=True) for k, v in params.items()}
        return jax.lax.pmean(_loss(whole_params, x), "data")

    loss = jax.shard_map(per_device, mesh=mesh, in_specs=(P("data"), P("data")), out_specs=P())
    params = {
        "w1": _placed((sizes.inputs, sizes.hidden), sizes.dtype, mesh, P("data")),
        "w2": _placed((sizes.hidden, sizes.outputs), sizes.dtype, mesh, P("data")),
    }
    x = _placed((sizes.rows * mesh.size, sizes.inputs), sizes.dtype, mesh, P("data"))
    return _compiled(jax.grad(loss), params, x)


def _model_split(sizes: _Sizes, grid: Mesh) -> str:
    params = {
        "w1": _placed((sizes.inputs, sizes.hidden), sizes.dtype, grid, P(None, "model")),
        "w2": _placed((sizes.hidden, sizes.outputs), sizes.dtype, grid, P("model", None)),
    }
    x = _placed((sizes.rows * grid.size, sizes.inputs), sizes.dtype, grid, P("data", None))
    return _compiled(jax.grad(_loss), params, x)


def _five(sizes: _Sizes, mesh: Mesh) -> str:
    count = mesh.size
    shift = [(i, (i + 1) % count) for i in range(count)]

    def per_device(block: Any) -> Any:
        return (
            jax.lax.all_gather(block, "data", tiled=True),
            jax.lax.psum_scatter(block, "data", scatter_dimension=1, tiled=True),
            jax.lax.psum(block, "data"),
            jax.lax.ppermute(block, "data", shift),
            jax.lax.all_to_all(block, "data", 1, 0, tiled=True),
        )

    program = jax.shard_map(per_device, mesh=mesh, in_specs=P("data"), out_specs=P("data"))
    blocks = _placed((sizes.rows * count, sizes.inputs), sizes.dtype, mesh, P("data"))
    return _compiled(program, blocks)


@functools.cache
def _programs(sizes: _Sizes, device_ids: tuple[int, ...]) -> tuple[tuple[str, str], ...]:
    """(what the program is, its compiled text) for each program the checker reads."""
    by_id = {device.id: device for device in jax.devices()}
    devices = [by_id[i] for i in device_ids]
    auto = (AxisType.Auto,)
    line = Mesh(np.array(devices), ("data",), axis_types=auto)
    grid = Mesh(  # not in jax.devices() order, as a real TPU's mesh need not be
        np.array(devices[::-1]).reshape(len(devices) // 2, 2),
        ("data", "model"),
        axis_types=auto * 2,
    )
    model = (
        f"a model {sizes.inputs} -> {sizes.hidden} -> {sizes.outputs} in {sizes.dtype}, "
        f"{sizes.rows} rows per device"
    )
    n = len(devices)
    return (
        (
            f"the gradient of {model}, parameters replicated, batch split over {n} devices "
            "(data parallelism)",
            _data_parallel(sizes, line),
        ),
        (
            f"the gradient of {model}, written with shard_map: parameters split over {n} "
            "devices and all-gathered before use (FSDP)",
            _fsdp(sizes, line),
        ),
        (
            f"the gradient of {model}, w1 split P(None, 'model') and w2 P('model', None) on "
            f"a ({n // 2}, 2) ('data', 'model') mesh",
            _model_split(sizes, grid),
        ),
        (
            f"a shard_map running the five collectives on a block of {sizes.rows} x "
            f"{sizes.inputs} {sizes.dtype} values per device",
            _five(sizes, line),
        ),
    )


def _cases() -> tuple[tuple[str, str], ...]:
    devices = jax.devices()
    if len(devices) < 2 or len(devices) % 2:
        raise Unavailable(
            f"this exercise compiles programs for an even number of devices, at least 2, "
            f"and this runtime has {len(devices)}: run the notebook's device set-up cell, "
            "setup_devices(8), first."
        )
    tpu = (
        "the five collectives on a float32 (1024, 1024) array over 8 TPU v5e chips, compiled "
        "ahead of time for a 2x4 slice (its text stored in the course): XLA made the "
        "permutation an asynchronous pair",
        FIVE_COLLECTIVES_V5E_2X4,
    )
    return (*_programs(_sizes(len(devices)), tuple(d.id for d in devices)), tpu)


# Reading the answer, and naming what went wrong ----------------------------------------


def _answer(value: Any) -> dict[str, int]:
    read = plain(value, "collectives_of's result", _EXPECTED)
    if not isinstance(read, dict):
        raise reject("collectives_of's result", read, _EXPECTED)
    answer = {}
    for key, count in read.items():
        if not isinstance(key, str):
            raise Rejected(
                wrong(
                    f"your dict has the key {shown(key)}; name each collective as the "
                    f"compiled text does, one of {list(KINDS)}."
                )
            )
        got = whole(count, f"your dict's value for {key!r}")
        if got < 0:
            raise reject(f"your dict's value for {key!r}", got, "a number of bytes, 0 or more")
        answer[key] = got
    return answer


_MISTAKES = {
    "twice": "you counted an asynchronous collective twice, by its -start and by its "
    "-done: count each collective once (skip the -start, whose result also holds the "
    "operand).",
    "starts": "you read an asynchronous collective's -start, whose result is a tuple "
    "that also holds the operand: read the -done instead, whose result is the collective's.",
    "operands": "you added up the operands' bytes: the exercise asks for the result's, "
    "written before the operation's name. They differ "
    "for an all-gather (the result is N times larger) and a reduce-scatter (N times "
    "smaller).",
    "first array": "you read only the first array of a tuple-shaped result: a combined "
    "all-reduce, or the CPU's all-to-all, returns a tuple, and every array in it counts.",
    "elements": "you counted elements, not bytes: multiply by each dtype's size (f32: "
    "4, bf16: 2, pred: 1 byte).",
    "count": "you counted the operations; the exercise asks for the bytes of their results.",
}


def _shown_ops(ops: list[Any], kind: str) -> str:
    lines = [op.line for op in ops if op.kind == kind][:3]
    return "; ".join(line if len(line) <= 150 else line[:147] + "..." for line in lines)


def _difference(case: str, got: dict[str, int], expected: dict[str, int], ops: list[Any]) -> str:
    for kind in sorted(set(got) - set(KINDS)):
        return (
            f"for {case}, your dict has the key {shown(kind)}, which is not a collective: "
            f"name each as the compiled text does, one of {list(KINDS)}."
        )
    for kind in sorted(set(expected) - set(got)):
        return (
            f"for {case}, your dict has no {kind!r}, and the program has "
            f"{sum(op.kind == kind and op.counted for op in ops)} (their results: "
            f"{expected[kind]:,} bytes), such as: {_shown_ops(ops, kind)}."
        )
    for kind in sorted(set(got) - set(expected)):
        return (
            f"for {case}, your dict has {kind!r}: {got[kind]:,}, but the program has no "
            f"{kind}; list only the collectives it has ({sorted(expected)})."
        )
    kind = next(k for k in sorted(expected) if got[k] != expected[k])
    return (
        f"for {case}, the {kind} results hold {expected[kind]:,} bytes on one device; your "
        f"dict says {got[kind]:,}. The program's {kind}: {_shown_ops(ops, kind)}."
    )


@exercise(
    NAME,
    idea="each collective is one line of the compiled text, `%name = SHAPE kind(...)`: its "
    "result's shape (an array, or a tuple of arrays) comes before the operation's name, "
    "and an asynchronous collective is a -start and a -done line that count once.",
    method="with re, find every line matching r'=\\s*(.*?)\\s(all-gather|reduce-scatter|"
    "all-reduce|collective-permute|all-to-all)(-start|-done)?\\(' and skip the -start "
    "ones; in the shape, each array is dtype[d0,d1,...] "
    "(re r'(pred|[a-z]+\\d\\w*)\\[([\\d,]*)\\]'): bytes = product of the dims x the "
    "dtype's bits / 8 (pred: 1 byte); add them up by kind.",
)
def _collectives_of(answer: Any) -> Feedback:
    found = counted(NAME)
    bans = keys_banned(found, "the checker's own reading")
    cases = _cases()
    answers = [_answer(call(answer, text, bans=bans)) for _, text in cases]
    reading = counted_here(NAME, found)  # every case answered before any is read
    for (case, text), got in zip(cases, answers, strict=True):
        read = reading(text)
        if got == read.expected:
            continue
        for mistake, variant in read.variants.items():
            if got == variant and variant != read.expected:
                return wrong(f"for {case}, {_MISTAKES[mistake]}")
        return wrong(_difference(case, got, read.expected, read.ops))
    return right(
        f"your readings match the compiled text of all {len(cases)} programs: data "
        "parallelism, FSDP, a weight split over 'model', and the five collectives on these "
        "devices and on a TPU, with tuple-shaped results and an asynchronous pair among them."
    )
