"""What the two host-work benchmarks share: the pipeline's endless stream of batches,
the order candidates run in, the machine's description, and the results file.

Both time every candidate by the rule of `benchmarks._epoch_timing` (a fresh run of
whole epochs, timed from its first batch to its last, each epoch's time beside it) and
take ratios as medians of per-round ratios:
`benchmarks.host_work_records` (small records, the step ``make bench`` runs) and
`benchmarks.host_work_images` (38.5 MB image batches, against Grain and the copy to a
device).
"""

from __future__ import annotations

import gc
import importlib.metadata
import json
import multiprocessing
import os
import platform
import random
import statistics
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import jax
from absl import flags

from datarax.pipeline import Pipeline


def grain_ready() -> None:
    """Grain's multiprocessing reads absl flags: mark them parsed (no command line)."""
    flags.FLAGS.mark_as_parsed()


def pipeline_name(workers: int | str) -> str:
    return f"Pipeline workers={workers}"


def pipeline_epochs(notes: dict[str, Any] | None = None, **options: Any) -> Iterator[Any]:
    """The batches of `Pipeline(**options)`, built at the first batch, epoch after epoch,
    without end. When the stream is closed, `notes` (if given) receives what the pipeline
    says of itself: its `workers_choice` and the means of its `time_report`."""
    pipeline = Pipeline(**options)
    try:
        while True:
            yield from pipeline
    finally:
        if notes is not None:
            report = pipeline.time_report()
            notes |= {
                "workers_choice": pipeline.workers_choice,
                "time_report_batches": report.batches,
                "time_report_ms": report.ms,
            }


def shuffled_rounds(names: Sequence[str], rounds: int) -> Iterator[tuple[int, str]]:
    """(round, name): every name once per round, in an order shuffled with a fixed seed,
    so that no candidate always follows the same one."""
    order = random.Random(0)
    for round_ in range(1, rounds + 1):
        for name in order.sample(list(names), len(names)):
            yield round_, name


def settle() -> None:
    """Waits (10 s at most) for the processes and read threads a closed Grain iterator
    leaves behind (its threads finish the records they hold), so that they do not slow
    the next candidate."""
    gc.collect()
    deadline = time.monotonic() + 10
    for child in multiprocessing.active_children():
        child.join(max(0.0, deadline - time.monotonic()))
    for thread in threading.enumerate():
        if thread.name.startswith("grain-prefetch"):
            thread.join(max(0.0, deadline - time.monotonic()))


def spread(values: Sequence[float]) -> dict[str, Any]:
    """The median of `values` and their range."""
    return {"median": statistics.median(values), "range": [min(values), max(values)]}


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity; all of them elsewhere)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def machine(device: Any) -> dict[str, Any]:
    """The versions, the machine and the `device` a run was measured on."""
    try:
        grain_version = importlib.metadata.version("grain")
    except importlib.metadata.PackageNotFoundError:
        grain_version = None
    return {
        "cores": os.cpu_count(),
        "usable_cores": usable_cores(),
        "device": str(device),
        "platform": device.platform,
        "device_kind": device.device_kind,
        "python": platform.python_version(),
        "jax": jax.__version__,
        "grain_version": grain_version,
        "load_average_before": os.getloadavg(),
    }


def write_json(out: Path, results: dict[str, Any]) -> None:
    """`results` into `out`, replaced in one step: a run cut short leaves a whole file."""
    out.parent.mkdir(parents=True, exist_ok=True)
    temporary = out.with_name(out.name + ".tmp")
    temporary.write_text(json.dumps(results, indent=1) + "\n")
    temporary.replace(out)
