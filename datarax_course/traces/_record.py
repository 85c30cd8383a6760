"""Records the stored profiles of `datarax_course.traces` again, with the JAX installed.

The step: a multilayer perceptron 64 -> 512 -> 512 -> 10 without biases, a mean squared
error and a plain SGD update, jitted, on 1024 rows split over a ``('data',)`` mesh of the
8 devices. Data parallel: the parameters replicated, so XLA sums the gradients with an
all-reduce. FSDP: each parameter split on its first axis too, so XLA gathers it before
use. Two steps run first (compiling), then `STEPS` under ``jax.profiler.trace``; of the
trace only the step's operations (the events with an ``hlo_op`` of the step's module)
and the executor events on their threads are kept.
"""

from __future__ import annotations

import datetime
import gzip
import importlib.metadata
import itertools
import json
import os
import platform
import re
import tempfile
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from datarax_course.traces import COLUMNS, EXECUTOR, NAMES

STEPS = 2
ROWS, WIDTHS = 1024, (64, 512, 512, 10)
MODULE = "jit_train_step"  # the name XLA gives the compiled step
KINDS = ("all-gather", "reduce-scatter", "all-reduce", "collective-permute", "all-to-all")


def _loss(params: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> jax.Array:
    hidden = jax.nn.relu(x @ params["w1"])
    hidden = jax.nn.relu(hidden @ params["w2"])
    return jnp.mean((hidden @ params["w3"] - y) ** 2)


def train_step(params: dict[str, jax.Array], x: jax.Array, y: jax.Array) -> Any:
    grads = jax.grad(_loss)(params, x, y)
    return jax.tree.map(lambda param, grad: param - 0.1 * grad, params, grads)


def _inputs(name: str) -> tuple[Any, Any, Any]:
    """The parameters, placed as profile `name` places them, and a batch split by rows."""
    mesh = jax.make_mesh((8,), ("data",))
    split = NamedSharding(mesh, PartitionSpec("data"))
    held = split if name == "fsdp" else NamedSharding(mesh, PartitionSpec())
    rng = np.random.default_rng(0)
    params = {
        f"w{layer}": (rng.normal(0.0, 0.05, (inner, outer))).astype(np.float32)
        for layer, (inner, outer) in enumerate(itertools.pairwise(WIDTHS), 1)
    }
    x = rng.normal(0.0, 1.0, (ROWS, WIDTHS[0])).astype(np.float32)
    y = rng.normal(0.0, 1.0, (ROWS, WIDTHS[-1])).astype(np.float32)
    return jax.device_put(params, held), jax.device_put(x, split), jax.device_put(y, split)


def _device(event: dict[str, Any], processes: dict[Any, str]) -> int | None:
    """The device whose operation `event` is: its ``device_ordinal`` (XLA:CPU), else the
    number in its process's name (``/device:GPU:3``, as GPU and TPU profiles name them)."""
    if "device_ordinal" in event.get("args", {}):
        return int(event["args"]["device_ordinal"])
    found = re.search(r"/device:[A-Z]+:(\d+)", processes.get(event["pid"], ""))
    return int(found.group(1)) if found else None


def compact(trace: dict[str, Any]) -> list[list[Any]]:
    """The rows kept of a trace file's JSON: the step's operations, with their device,
    and the executor's events on their threads, sorted by start."""
    processes = {
        e["pid"]: e["args"]["name"]
        for e in trace["traceEvents"]
        if e.get("ph") == "M" and e["name"] == "process_name"
    }
    complete = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    ops = [
        e
        for e in complete
        if e.get("args", {}).get("hlo_module", MODULE) == MODULE
        and "hlo_op" in e.get("args", {})
        and _device(e, processes) is not None
    ]
    if not ops:
        raise RuntimeError("the profile holds no operation of the step: nothing to store")
    lanes = {(e["pid"], e["tid"]) for e in ops}
    first = min(e["ts"] for e in ops)
    last = max(e["ts"] + e["dur"] for e in ops)
    executor = [
        e
        for e in complete
        if e["name"] == EXECUTOR
        and (e["pid"], e["tid"]) in lanes
        and e["ts"] < last
        and e["ts"] + e["dur"] > first
    ]
    kept = sorted(ops + executor, key=lambda e: (e["ts"], -e["dur"]))
    origin = min(e["ts"] for e in kept)
    thread_of = {lane: n for n, lane in enumerate(sorted(lanes))}
    return [
        [
            e["name"],
            thread_of[(e["pid"], e["tid"])],
            round(e["ts"] - origin, 3),
            round(e["dur"], 3),
            _device(e, processes) if e["name"] != EXECUTOR else None,
        ]
        for e in kept
    ]


def profile(name: str) -> dict[str, Any]:
    """Profile `name` recorded now: ``about`` and the compact ``events``."""
    params, x, y = _inputs(name)
    step = jax.jit(train_step)
    text = step.lower(params, x, y).compile().as_text() or ""
    collectives = sorted(
        set(re.findall(rf"%?((?:{'|'.join(KINDS)})(?:-start)?(?:\.\d+)?) = ", text))
    )
    for _ in range(2):
        params = step(params, x, y)
    jax.block_until_ready(params)
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0
    with tempfile.TemporaryDirectory() as folder:
        with jax.profiler.trace(folder, create_perfetto_trace=True, profiler_options=options):
            for _ in range(STEPS):
                params = step(params, x, y)
            jax.block_until_ready(params)
        (path,) = Path(folder).glob("plugins/profile/*/perfetto_trace.json.gz")
        with gzip.open(path) as file:
            trace = json.load(file)
    device = jax.devices()[0]
    about = {
        "step": (
            f"a jitted SGD step of a multilayer perceptron {' -> '.join(map(str, WIDTHS))} "
            f"on {ROWS} rows split over {len(jax.devices())} devices, "
            + ("the parameters split too (FSDP)" if name == "fsdp" else "parameters replicated")
        ),
        "steps_profiled": STEPS,
        "collectives_in_program": collectives,
        "platform": device.platform,
        "device_kind": device.device_kind,
        "devices": len(jax.devices()),
        "host_cores": os.cpu_count(),
        "jax": jax.__version__,
        "jaxlib": importlib.metadata.version("jaxlib"),
        "python": platform.python_version(),
        "recorded": datetime.date.today().isoformat(),
        "recorded_with": "python -m datarax_course.traces",
    }
    return {"about": about, "columns": COLUMNS, "events": compact(trace)}


def text_of(recorded: dict[str, Any]) -> str:
    """The file text of a recorded profile: small, one event a line."""
    rows = ",\n  ".join(json.dumps(row) for row in recorded["events"])
    head = json.dumps({"about": recorded["about"], "columns": recorded["columns"]}, indent=1)
    return head[:-2] + ',\n "events": [\n  ' + rows + "\n ]\n}\n"


def record(folder: Path) -> list[Path]:
    """Records every stored profile into `folder`; returns the files written."""
    written = []
    for name in NAMES:
        path = folder / f"{name}.json"
        path.write_text(text_of(profile(name)), encoding="utf-8")
        written.append(path)
    return written
