"""The answer keys: the right answers of the exercises, where a graded kernel cannot
reach them.

Only the grader loads this module (`load`), and the library a graded notebook imports
is a copy without it, so a student's kernel cannot call a key or copy its code. Two
kinds of key live here:

- `KEYS`, the exercises whose answer is a formula of the lessons' own. In a notebook,
  `datarax_course.check` finds the keys' answers to the public cases in a data file,
  ``answer_keys.json`` (read by `datarax_course._cases.answer_tables`), which
  ``python -m datarax_course._keys`` writes from the keys below.
- `COUNTS`, the references that the machine which judges computes, with XLA, Flax, JAX
  and optax, or a clock: XLA's FLOP count (10.backward_flops), the mask Flax's helpers
  build (11.attention_mask), the collectives read from a compiled program's text
  (12.collectives_of), the bytes JAX's shard shapes give (14.bytes_per_device), a real
  loop timed (07.predicted_epoch). No table holds them, since they depend on the
  versions installed or on the machine; a checker imports them where this module
  exists (the grader's process, a reader's own installation, where they are banned
  while the reader's function runs) and, in a kernel being graded, where it does not,
  leaves the judging to the grader (`datarax_course._cases.counted`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec, Sharding

from datarax.pipeline import prefetch_to_device
from datarax_course import _cases, _core, _real
from datarax_course._checks import device_spans
from datarax_course._nb12 import KINDS
from datarax_course._nb13_hidden import device_of, is_collective

BACKWARD_FLOPS_PER_PARAMETER_PER_ROW = 4  # of the 6 of a dense model's step (forward: 2)


def held_fraction(array: Any, host_of: dict[int, int], host: int) -> float:
    """01.host_fraction: the fraction of `array`'s elements that the devices of `host`
    hold, each element counted once."""
    held = np.zeros(array.shape, dtype=bool)
    for device, block in device_spans(array.sharding, array.shape).items():
        if host_of[device.id] == host:
            held[tuple(slice(start, stop) for start, stop in block)] = True
    return float(held.mean())


def holders(mesh: Mesh, spec: PartitionSpec, shape: tuple[int, ...], index: Any) -> list[int]:
    """02.devices_holding: the ids of the devices holding element `index`, sorted."""
    blocks = device_spans(NamedSharding(mesh, spec), shape)
    return sorted(
        device.id
        for device, block in blocks.items()
        if all(start <= pos < stop for pos, (start, stop) in zip(index, block, strict=True))
    )


def expected_bytes(params: Any, batch_sharding: Sharding) -> float:
    """06.allreduce_bytes: what a ring all-reduce of the gradients sends per device,
    2 (N - 1) / N x payload, N the devices that hold different rows."""
    payload = sum(leaf.size * leaf.dtype.itemsize for leaf in jax.tree.leaves(params))
    probe = len(batch_sharding.device_set)
    group = probe // batch_sharding.shard_shape((probe,))[0]
    return 2 * (group - 1) / group * payload


def scheduled_ms(step_ms: float, input_ms: float, steps: int, size: int | None) -> float:
    """07.epoch_ms: when the last step ends: one after the other (`size` None), or with a
    producer thread that keeps at most `size` batches ready and starts a batch once a slot
    is free (a slot frees when the loop takes a batch)."""
    if size is None:
        return steps * (step_ms + input_ms)
    produced: list[float] = []
    taken: list[float] = []
    step_end = 0.0
    for k in range(steps):
        slot_free = taken[k - size] if k >= size else 0.0
        start = max(produced[-1] if produced else 0.0, slot_free)
        produced.append(start + input_ms)
        taken.append(max(step_end, produced[k]))
        step_end = taken[k] + step_ms
    return step_end


def flat_block(shape: tuple[int, ...], num_devices: int) -> list[int]:
    """07.received_block: one device's block of a leaf sent with ``send_flat=True`` over
    ``P("data")``."""
    rows = shape[0] // num_devices
    if len(shape) < 3:
        return [rows, *shape[1:]]
    return [rows, int(np.prod(shape[1:]))]


def expected_batch(
    num_devices: int, flops_per_second: float, send_bytes_per_second: float, bytes_per_value: int
) -> float:
    """10.communication_bound_batch: rows per device where the backward pass,
    4 n b / F, takes as long as the ring all-reduce, 2 (N - 1) / N x bytes x n / W."""
    sent_per_value = 2 * (num_devices - 1) / num_devices * bytes_per_value
    return (
        sent_per_value
        * flops_per_second
        / (BACKWARD_FLOPS_PER_PARAMETER_PER_ROW * send_bytes_per_second)
    )


def xla_backward_flops(loss: Any, params: Any, batch: Any) -> float:
    """10.backward_flops: XLA's FLOPs per row of the backward pass of `loss` at `params`
    on `batch` (rows on the first axis), by XLA's cost analysis of the programs JAX
    lowers: the gradient's count minus the forward pass's, per row, from two batch sizes
    so that what does not grow with the rows cancels. A count, not a formula, so no
    table holds its answers: the checker calls it wherever this module is (the grader's
    process, a notebook's own installation), never inside a graded kernel."""

    def flops(function: Any, *args: Any) -> float:
        analysis: Any = jax.jit(function).lower(*args).cost_analysis()
        if isinstance(analysis, list):  # older jax: one dict per program
            analysis = analysis[0]
        return float(analysis["flops"])

    doubled = jax.numpy.concatenate([batch, batch])
    gradient = jax.grad(loss)
    per_step = flops(gradient, params, doubled) - flops(gradient, params, batch)
    forward = flops(loss, params, doubled) - flops(loss, params, batch)
    return (per_step - forward) / batch.shape[0]


@jax.jit
def _flax_masks(ids: jax.Array) -> jax.Array:
    mask = nnx.combine_masks(
        nnx.make_attention_mask(ids > 0, ids > 0),  # neither token is padding
        nnx.make_attention_mask(ids, ids, jnp.equal),  # both in the same piece
        nnx.make_causal_mask(ids),  # j <= i
        dtype=jnp.bool_,
    )
    assert mask is not None
    return mask[0]  # the heads axis Flax adds


def segment_mask(segment_ids: Any) -> np.ndarray:
    """11.attention_mask: a packed row's causal mask, built with Flax's helpers as its
    language-model example combines them (jitted: one compilation a row length)."""
    return np.asarray(_flax_masks(jnp.asarray(segment_ids, jnp.int32)))


# 12.collectives_of: a compiled program's text, read. One instruction:
# `[ROOT] %name = SHAPE kind[-start|-done](operands), attributes`, where the shape may be
# a tuple, `(f32[8]{0}, /*index=5*/f32[8]{0})`, with comments inside.
_INSTRUCTION = re.compile(
    r"^[ \t]*(?:ROOT[ \t]+)?%?[\w.\-]+[ \t]*=[ \t]*(?P<shape>[^\n]*?)[ \t]"
    rf"(?P<kind>{'|'.join(KINDS)})(?P<phase>-start|-done)?\((?P<rest>[^\n]*)$",
    re.MULTILINE,
)
_DEFINITION = re.compile(  # any instruction, to find an operand's shape by its name
    r"^[ \t]*(?:ROOT[ \t]+)?%?(?P<name>[\w.\-]+)[ \t]*=[ \t]*(?P<shape>[^\n]*?)[ \t]"
    r"[a-z][\w\-]*\(",
    re.MULTILINE,
)
# One array in a shape: a dtype (f32, bf16, pred, s8, f8e4m3fn, ...) and its dimensions.
_ARRAY = re.compile(r"(?<![\w.])(?P<dtype>pred|[a-z]+[0-9][a-z0-9]*)\[(?P<dims>[0-9,]*)\]")


@dataclasses.dataclass(frozen=True)
class Collective:
    """One collective instruction of a compiled program's text."""

    kind: str  # "all-gather", ...
    phase: str  # "" for a plain operation, "-start" or "-done" for an asynchronous pair
    result: str  # the result's shape, as printed: an array or a tuple of arrays
    operands: str  # what is between the instruction's parentheses
    line: str  # the instruction, as printed

    @property
    def counted(self) -> bool:
        """Whether this instruction is the one its collective is counted by (an
        asynchronous pair by its -done, whose result is the collective's)."""
        return self.phase != "-start"


def _arrays(shape: str) -> list[tuple[str, int]]:
    """(dtype, elements) of every array in a shape's text."""
    found = []
    for array in _ARRAY.finditer(shape):
        dims = [int(d) for d in array.group("dims").split(",") if d]
        found.append((array.group("dtype"), math.prod(dims)))
    return found


def _bits(dtype: str) -> int:
    if dtype == "pred":
        return 8
    digits = re.search(r"[0-9]+", dtype)
    return int(digits.group()) if digits else 0


def shape_bytes(shape: str) -> int:
    """Bytes of the arrays in an HLO shape's text (a tuple's arrays added up).

    Example:
        >>> shape_bytes("(f32[8,2]{1,0}, /*index=1*/bf16[4]{0})")
        72
    """
    return sum((elements * _bits(dtype) + 7) // 8 for dtype, elements in _arrays(shape))


def _operands(rest: str) -> str:
    """The text between an instruction's parentheses (`rest` starts right after "(")."""
    depth = 1
    for position, char in enumerate(rest):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth == 0:
            return rest[:position]
    return rest


def collectives(text: str) -> list[Collective]:
    """Every collective instruction in a compiled program's text, in the text's order.

    Example:
        >>> line = "%all-reduce = f32[4]{0} all-reduce(f32[4]{0} %x), to_apply=%add"
        >>> [(c.kind, c.phase, shape_bytes(c.result)) for c in collectives(line)]
        [('all-reduce', '', 16)]
    """
    return [
        Collective(
            kind=found.group("kind"),
            phase=found.group("phase") or "",
            result=found.group("shape"),
            operands=_operands(found.group("rest")),
            line=found.group(0).strip(),
        )
        for found in _INSTRUCTION.finditer(text)
    ]


@dataclasses.dataclass(frozen=True)
class Reading:
    """A compiled program's collectives: `expected`, the bytes of their results by kind;
    `ops`, the instructions; `variants`, what common wrong readings give, by mistake."""

    expected: dict[str, int]
    ops: list[Collective]
    variants: dict[str, dict[str, int]]


def compiled_reading(text: str) -> Reading:
    """12.collectives_of: {kind: bytes of its results on one device}, each collective
    counted once, with what the common wrong readings of the same text give."""
    ops = collectives(text)
    shapes = {found.group("name"): found.group("shape") for found in _DEFINITION.finditer(text)}

    def total(pick: Callable[[Collective], bool], size: Callable[[Collective], int]) -> Any:
        found: dict[str, int] = {}
        for op in ops:
            if pick(op):
                found[op.kind] = found.get(op.kind, 0) + size(op)
        return found

    def operand_bytes(op: Collective) -> int:
        if _arrays(op.operands):  # older XLA prints each operand's shape before its name
            return shape_bytes(op.operands)
        names = re.findall(r"%([\w.\-]+)", op.operands)
        return sum(shape_bytes(shapes.get(name, "")) for name in names)

    def first_array(op: Collective) -> int:
        arrays = _arrays(op.result)
        return (arrays[0][1] * _bits(arrays[0][0]) + 7) // 8 if arrays else 0

    result = lambda op: shape_bytes(op.result)  # noqa: E731
    counted = lambda op: op.counted  # noqa: E731
    not_done = lambda op: op.phase != "-done"  # noqa: E731
    variants = {
        "twice": total(lambda op: True, result),
        "starts": total(not_done, result),
        "operands": total(not_done, operand_bytes),
        "first array": total(counted, first_array),
        "elements": total(counted, lambda op: sum(n for _, n in _arrays(op.result))),
        "count": total(counted, lambda op: 1),
    }
    return Reading(total(counted, result), ops, variants)


# 14.bytes_per_device: what one device holds, from JAX's shard shapes and optax's state.


def _is_spec(value: Any) -> bool:
    return isinstance(value, PartitionSpec)


def _pairs(tree: Any, specs: Any) -> list[tuple[Any, PartitionSpec]]:
    return list(zip(jax.tree.leaves(tree), jax.tree.leaves(specs, is_leaf=_is_spec), strict=True))


@dataclasses.dataclass(frozen=True)
class Held:
    """The bytes one device holds (`params`, `optimizer`; the gradients take what the
    parameters take) and what common mistakes give instead, by part ("params",
    "optimizer"): `elements` (not bytes), `whole` (nothing split), `divided` (every leaf
    over every device); `scalars`, the state that mirrors no parameter; `mirror_copies`,
    the copies of the parameters' tree the state holds; `in_param_dtypes`, the state
    counted in its parameters' dtypes."""

    params: int
    optimizer: int
    elements: dict[str, int]
    whole: dict[str, int]
    divided: dict[str, float]
    scalars: int
    mirror_copies: int
    in_param_dtypes: int


def memory_truth(params: Any, optimizer: Any, mesh: Mesh, specs: Any) -> Held:
    """14.bytes_per_device: what one device holds of `params`, their gradients and
    `optimizer`'s state, each state leaf that mirrors a parameter sharded like it
    (``optax.tree_utils.tree_map_params``), any other replicated."""
    state = jax.eval_shape(optimizer.init, params)
    state_specs = optax.tree_utils.tree_map_params(
        optimizer,
        lambda _, spec: spec,
        state,
        specs,
        transform_non_params=lambda _: PartitionSpec(),
        is_leaf=_is_spec,
    )
    parts = {"params": _pairs(params, specs), "optimizer": _pairs(state, state_specs)}

    def block(leaf: Any, spec: PartitionSpec) -> int:
        return math.prod(NamedSharding(mesh, spec).shard_shape(tuple(leaf.shape)))

    def by_part(size: Callable[[Any, PartitionSpec], Any]) -> dict[str, Any]:
        return {part: sum(size(*pair) for pair in pairs) for part, pairs in parts.items()}

    def itemsize(leaf: Any) -> int:
        return np.dtype(leaf.dtype).itemsize

    held = by_part(lambda leaf, spec: block(leaf, spec) * itemsize(leaf))
    scalars = sum(itemsize(leaf) for leaf, _ in parts["optimizer"] if np.ndim(leaf) == 0)
    mirrors = sum(np.ndim(leaf) > 0 for leaf, _ in parts["optimizer"])
    copies = mirrors // max(len(parts["params"]), 1)
    whole = by_part(lambda leaf, _: math.prod(leaf.shape) * itemsize(leaf))
    return Held(
        params=held["params"],
        optimizer=held["optimizer"],
        elements=by_part(block),
        whole=whole,
        divided={part: total / mesh.size for part, total in whole.items()},
        scalars=scalars,
        mirror_copies=copies,
        in_param_dtypes=scalars + copies * held["params"],
    )


def loop_ms(input_ms: float, opening_ms: float, step_ms: float, prefetch: bool) -> float:
    """07.predicted_epoch: milliseconds of a real loop over the checker's source (batches
    of `input_ms`, the first `opening_ms` more) and step, through
    ``prefetch_to_device(size=2)`` or one after the other."""
    make_batches, step = _real._source(input_ms, opening_ms), _real._step(step_ms)
    start = time.perf_counter()
    if prefetch:
        with prefetch_to_device(make_batches(), size=2) as batches:
            for batch in batches:
                step(batch)
    else:
        for batch in make_batches():
            step(batch)
    return (time.perf_counter() - start) * 1e3


# The references the machine that judges computes, not formulas: no table holds them.
COUNTS: dict[str, Callable[..., Any]] = {
    "07.predicted_epoch": loop_ms,
    "10.backward_flops": xla_backward_flops,
    "11.attention_mask": segment_mask,
    "12.collectives_of": compiled_reading,
    "14.bytes_per_device": memory_truth,
}


def trace_reading(events: list[dict[str, Any]]) -> list[Any]:
    """13.input_hidden: [step_ms, input_ms, hidden] read off a profile's events: the
    median duration of the "step" events; the busy time of the input thread (the one
    that holds the "augment" events), its events merged where they nest or overlap, per
    "augment" event (one a batch); and whether the input needs no longer than a step."""
    steps = [float(event["duration_us"]) for event in events if event["name"] == "step"]
    thread = next(event["thread"] for event in events if event["name"] == "augment")
    spans = [_span(event) for event in events if event["thread"] == thread]
    busy_us = sum(stop - start for start, stop in _merged(spans))
    batches = sum(event["name"] == "augment" for event in events)
    step_ms = float(np.median(steps)) / 1e3
    input_ms = busy_us / batches / 1e3
    return [step_ms, input_ms, bool(input_ms <= step_ms)]


Spans = list[tuple[float, float]]
Event = dict[str, Any]


def _merged(spans: Spans) -> Spans:
    """`spans` as disjoint intervals, sorted: those that overlap or touch made one."""
    merged: Spans = []
    for start, stop in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], stop))
        else:
            merged.append((start, stop))
    return merged


def _span(event: Event) -> tuple[float, float]:
    start = float(event["start_us"])
    return (start, start + float(event["duration_us"]))


def _lanes(
    events: list[Event], lane: Callable[[Event], Any], collective: Callable[[Event], bool]
) -> dict[Any, tuple[Spans, Spans]]:
    """{lane: (collective spans, compute spans)} of the events that `lane` places."""
    found: dict[Any, tuple[Spans, Spans]] = {}
    for event in events:
        key = lane(event)
        if key is not None:
            talking, working = found.setdefault(key, ([], []))
            (talking if collective(event) else working).append(_span(event))
    return found


def _common(left: Spans, right: Spans) -> float:
    """The time both `left` and `right` cover, each a list of disjoint intervals."""
    return sum(max(0.0, min(b, d) - max(a, c)) for a, b in left for c, d in right)


def _pooled(found: dict[Any, tuple[Spans, Spans]]) -> tuple[float, float, float]:
    """(hidden, collective, compute) microseconds, each lane merged on its own."""
    hidden = talking_us = working_us = 0.0
    for talking, working in found.values():
        talk, work = _merged(talking), _merged(working)
        hidden += _common(talk, work)
        talking_us += sum(b - a for a, b in talk)
        working_us += sum(b - a for a, b in work)
    return hidden, talking_us, working_us


def hidden_fraction(events: list[Event]) -> float:
    """13.collective_hidden: the fraction of the collectives' time during which the same
    device also computes. A device's operations are the events whose ``args`` hold its
    ``device_ordinal``; a collective is one whose name starts with a kind of `KINDS`,
    every other operation computes. Per device, the collectives' intervals and the
    computing ones are each merged, and the collectives' time is what they cover; the
    hidden time is what both cover. Returns the hidden time of every device over the
    collectives' time of every device."""
    hidden, talking, _ = _pooled(_lanes(events, device_of, is_collective))
    return hidden / talking


def _ratio(part: float, whole: float) -> float | None:
    """`part / whole`, None where it is not a number (no JSON NaN in the keys' table)."""
    value = part / whole if whole else float("nan")
    return float(value) if np.isfinite(value) else None


def hidden_mistakes(events: list[Event]) -> list[float | None]:
    """What each common mistake of 13.collective_hidden returns on `events`, in the order
    of `datarax_course._nb13_hidden.MISTAKES` (None where a mistake gives no number):
    every device's compute, lanes by thread, every event by thread, the mean of the
    devices' fractions, over the compute time, the exposed fraction, only the all-reduces
    as collectives (others as compute, and others left out), overlaps added pair by pair."""
    ops = [event for event in events if device_of(event) is not None]
    by_device = _lanes(events, device_of, is_collective)
    hidden, talking, working = _pooled(by_device)
    one_lane = _pooled(_lanes(ops, lambda _: 0, is_collective))
    by_thread = _pooled(_lanes(ops, lambda event: event["thread"], is_collective))
    every_event = _pooled(_lanes(events, lambda event: event["thread"], is_collective))
    reduce = lambda event: str(event["name"]).startswith("all-reduce")  # noqa: E731
    reduce_only = _pooled(_lanes(events, device_of, reduce))
    reduces = [event for event in events if reduce(event) or not is_collective(event)]
    reduce_alone = _pooled(_lanes(reduces, device_of, is_collective))
    per_device = [_pooled({0: pair}) for pair in by_device.values()]
    fractions = [h / t for h, t, _ in per_device if t > 0]
    summed = sum(
        _common([_span(c)], [_span(k)])
        for c in ops
        if is_collective(c)
        for k in ops
        if not is_collective(k) and device_of(k) == device_of(c)
    )
    durations = sum(float(event["duration_us"]) for event in ops if is_collective(event))
    return [
        _ratio(*one_lane[:2]),
        _ratio(*by_thread[:2]),
        _ratio(*every_event[:2]),
        float(np.mean(fractions)) if fractions else None,
        _ratio(hidden, working),
        1 - hidden / talking if talking else None,
        _ratio(*reduce_only[:2]),
        _ratio(*reduce_alone[:2]),
        _ratio(summed, durations),
    ]


def collective_truth(events: list[Event]) -> dict[str, Any]:
    """13.collective_hidden's key: {"answer": `hidden_fraction`, "mistakes":
    `hidden_mistakes`}, so that the checker names a mistake without computing any."""
    return {"answer": hidden_fraction(events), "mistakes": hidden_mistakes(events)}


# 12.which_mesh: mixed-precision training with Adam, in bytes a parameter: bfloat16
# weights and gradients, the optimizer state (float32 master weights, two float32 moments).
MIXED_PRECISION_BYTES = {"weights": 2, "gradients": 2, "master": 4, "moments": 8}
GATHERED_LAYER_BYTES = 4  # ZeRO-3: one layer's bfloat16 weights and gradient, whole


def least_sharding(
    params: int,
    layer_params: int,
    hosts: int,
    chips_per_host: int,
    chip_bytes: float,
    activation_bytes: float,
) -> dict[str, Any]:
    """12.which_mesh: {"answer": [replica, data, model, zero_stage], "whole": the model's
    bytes by part, unsharded}. The least sharding that fits `chip_bytes` a device, in the
    lesson's order: the smallest model axis (a divisor of a host's chips) with which a
    ZeRO stage fits over a data axis of every other device; the lowest stage that fits
    so; the smallest data axis at which it fits; the replica axis, the devices left.

    Example:
        >>> least_sharding(1_315_000_000, 50_331_648, 1, 8, 16e9, 2e9)["answer"]
        [4, 2, 1, 1]
    """
    whole = {part: size * params for part, size in MIXED_PRECISION_BYTES.items()}
    whole["layer"] = GATHERED_LAYER_BYTES * layer_params
    devices = hosts * chips_per_host

    def fits(data: int, model: int, stage: int) -> bool:
        def over(first_stage: int) -> int:  # devices a part is split over
            return model * (data if stage >= first_stage else 1)

        needed = (
            whole["weights"] / over(3)
            + whole["gradients"] / over(2)
            + (whole["master"] + whole["moments"]) / over(1)
            + (whole["layer"] / model if stage == 3 else 0.0)
            + activation_bytes
        )
        return needed <= chip_bytes

    for model in (k for k in range(1, chips_per_host + 1) if chips_per_host % k == 0):
        rest = devices // model
        stages = [stage for stage in range(4) if fits(rest, model, stage)]
        if stages:
            data = next(
                k for k in range(1, rest + 1) if rest % k == 0 and fits(k, model, stages[0])
            )
            return {"answer": [rest // data, data, model, stages[0]], "whole": whole}
    raise ValueError(
        f"{params} parameters fit on no mesh of {hosts} hosts of {chips_per_host} chips of "
        f"{chip_bytes} bytes: a case of 12.which_mesh must fit."
    )


KEYS: dict[str, Callable[..., Any]] = {
    "01.host_fraction": held_fraction,
    "02.devices_holding": holders,
    "06.allreduce_bytes": expected_bytes,
    "07.epoch_ms": scheduled_ms,
    "07.received_block": flat_block,
    "10.communication_bound_batch": expected_batch,
    "12.which_mesh": least_sharding,
    "13.input_hidden": trace_reading,
    "13.collective_hidden": collective_truth,
}


def load() -> None:
    """Gives the checkers in this process the answer keys (the grader's process only)."""
    import datarax_course  # noqa: F401  (registers every checker)

    _cases._KEYS.update(KEYS)


def tables() -> dict[str, dict[str, list[Any]]]:
    """{exercise: {"cases": texts, "expected": answers}} for the public cases of every
    exercise with a key, on the devices at hand (the notebooks' 8)."""
    import datarax_course  # noqa: F401  (registers every checker)

    found = {}
    for name, key in KEYS.items():
        cases = _core._CHECKERS[name].cases
        assert cases is not None, f"{name} has a key but no cases"
        listed = list(cases())
        found[name] = {
            "cases": [text for text, _ in listed],
            "expected": [key(*arguments) for _, arguments in listed],
        }
    return found


TABLES_FILE = Path(__file__).with_name(_cases.ANSWER_KEYS)


def tables_text(found: dict[str, dict[str, list[Any]]]) -> str:
    """The text of ``answer_keys.json`` holding `found`."""
    return json.dumps(found, indent=1, sort_keys=True) + "\n"


def main() -> int:
    """Writes ``answer_keys.json`` from the keys, on 8 simulated devices."""
    from datarax.distributed import setup_devices

    setup_devices(8)
    TABLES_FILE.write_text(tables_text(tables()), encoding="utf-8")
    print(f"wrote {TABLES_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
