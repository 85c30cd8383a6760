"""Resuming a global `Pipeline`: the cost must not depend on where in the epoch it resumes.

On a local cluster of 2 processes x 4 CPU devices, a shuffled global pipeline over a
100,000-row in-memory source (``{"image": uint8 (8, 8, 3), "id": int32}`` per row),
batch 256, ``P('data')`` over all 8 devices (390 batches an epoch). One sample is
``set_state(state)`` followed by the first batch, placed and waited for, with the
state near the start of an epoch (batch 1) or near its end (batch 389), interleaved.

Target: end / start <= 1.2 on every host (the median of per-round ratios): resuming
seeks to the batch instead of replaying the batches before it. Alone::

    python -m benchmarks.resume
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from benchmarks import _cluster
from benchmarks._timing import interleaved, medians, paired_ratio
from datarax.pipeline import Pipeline

SOURCE_ROWS = 100_000
BATCH_SIZE = 256
TARGET = 1.2
START = "resume near the start"
END = "resume near the end"


def measure_on_each_host(rounds: int = 30) -> dict[str, Any]:
    """Runs on every process: median seconds of each resume and their paired ratio."""
    rng = np.random.default_rng(0)
    source = {
        "image": rng.integers(0, 256, (SOURCE_ROWS, 8, 8, 3), dtype=np.uint8),
        "id": np.arange(SOURCE_ROWS, dtype=np.int32),
    }
    devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    sharding = NamedSharding(Mesh(np.array(devices), ("data",)), P("data"))
    pipeline = Pipeline(
        source=source,
        batch_size=BATCH_SIZE,
        sharding=sharding,
        shuffle=True,
        rngs=nnx.Rngs(0),
    )
    states = {
        START: {**pipeline.get_state(), "batch_index": 1},
        END: {**pipeline.get_state(), "batch_index": len(pipeline) - 1},
    }

    def resume(state: dict[str, Any]) -> Any:
        pipeline.set_state(state)
        return next(iter(pipeline))

    ids = {name: resume(state)["id"] for name, state in states.items()}
    expected = {
        name: np.sort(pipeline.epoch_order(0)[k * BATCH_SIZE : (k + 1) * BATCH_SIZE])
        for name, k in ((START, 1), (END, len(pipeline) - 1))
    }
    mine = {name: np.asarray(ids[name].addressable_data(0)) for name in ids}
    right = all(np.isin(mine[name], expected[name]).all() for name in ids)
    times = interleaved(
        {name: lambda state=state: resume(state) for name, state in states.items()},
        rounds,
        before_sample=_cluster.barrier,
    )
    return {
        "source_rows": SOURCE_ROWS,
        "batch_size": BATCH_SIZE,
        "batches_per_epoch": len(pipeline),
        "resumed_batches": {START: 1, END: len(pipeline) - 1},
        "right_rows": bool(right),
        "ms": {name: seconds * 1e3 for name, seconds in medians(times).items()},
        "end_over_start": paired_ratio(times, END, START),
    }


def summarize(per_host: list[dict[str, Any]]) -> dict[str, Any]:
    """Each host's results and the worse host's ratio."""
    return {
        "hosts": per_host,
        "worst_end_over_start": max(host["end_over_start"] for host in per_host),
        "right_rows": all(host["right_rows"] for host in per_host),
    }


def main() -> None:
    results = summarize(_cluster.run(["resume"])["resume"])
    for index, host in enumerate(results["hosts"]):
        ms = ", ".join(f"{name} {value:.2f} ms" for name, value in host["ms"].items())
        print(f"host {index}: {ms}; end / start {host['end_over_start']:.3f}")
    ratio = results["worst_end_over_start"]
    verdict = "PASS" if ratio <= TARGET else "MISS"
    print(f"worst host: end / start {ratio:.3f} (target <= {TARGET}) {verdict}")
    print(f"first batch after resume holds the right rows: {results['right_rows']}")


if __name__ == "__main__":
    main()
