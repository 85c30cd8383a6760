"""The answer keys: the right answers of the exercises whose answer is a formula of the
lessons' own, not something the library or JAX computes.

Only the grader loads this module (`load`), and the library a graded notebook imports
is a copy without it, so a student's kernel cannot call a key or copy its code. In a
notebook, `datarax_course.check` finds the keys' answers to the public cases in a
data file, ``answer_keys.json`` (read by `datarax_course._cases.answer_tables`), which
``python -m datarax_course._keys`` writes from the keys below.

`COUNTS` holds the one reference that is a measurement of XLA's rather than a formula
(10.backward_flops): no table can hold it, since it depends on the jax installed, so
its checker imports this module where it exists (the grader's process, a reader's own
installation) and, in a kernel being graded, where it does not, leaves the judging to
the grader. While the reader's function runs, the checker bans it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec, Sharding

from datarax_course import _cases, _core
from datarax_course._checks import device_spans

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


# The references that are counts of the machine that judges, not formulas: no table.
COUNTS: dict[str, Callable[..., Any]] = {"10.backward_flops": xla_backward_flops}


def trace_reading(events: list[dict[str, Any]]) -> list[Any]:
    """13.input_hidden: [step_ms, input_ms, hidden] read off a profile's events: the
    median duration of the "step" events; the busy time of the input thread (the one
    that holds the "augment" events), its events merged where they nest or overlap, per
    "augment" event (one a batch); and whether the input needs no longer than a step."""
    steps = [float(event["duration_us"]) for event in events if event["name"] == "step"]
    thread = next(event["thread"] for event in events if event["name"] == "augment")
    spans = sorted(
        (float(event["start_us"]), float(event["start_us"]) + float(event["duration_us"]))
        for event in events
        if event["thread"] == thread
    )
    busy_us, covered = 0.0, -np.inf
    for start, stop in spans:
        if stop > covered:
            busy_us += stop - max(start, covered)
            covered = stop
    batches = sum(event["name"] == "augment" for event in events)
    step_ms = float(np.median(steps)) / 1e3
    input_ms = busy_us / batches / 1e3
    return [step_ms, input_ms, bool(input_ms <= step_ms)]


KEYS: dict[str, Callable[..., Any]] = {
    "01.host_fraction": held_fraction,
    "02.devices_holding": holders,
    "06.allreduce_bytes": expected_bytes,
    "07.epoch_ms": scheduled_ms,
    "07.received_block": flat_block,
    "10.communication_bound_batch": expected_batch,
    "13.input_hidden": trace_reading,
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
