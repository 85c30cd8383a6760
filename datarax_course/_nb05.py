"""Checkers for tutorial 05, pipelines.

``05.rows_of_host``: the source rows one host reads in an epoch, when every host runs
the same shuffled pipeline and keeps its part of each global batch (cross-host
shuffling). The right answer comes from running those per-host pipelines.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flax import nnx

from datarax.pipeline import Pipeline
from datarax.sharding import JaxProcessSharder
from datarax_course._cases import draw
from datarax_course._core import call, exercise
from datarax_course._feedback import Feedback, right, wrong
from datarax_course._values import array

# (source rows, batch size, hosts, seed): a remainder that is dropped, 2 and 4 hosts.
_CASES = ((48, 12, 2, 0), (50, 8, 2, 1), (64, 16, 4, 2))
_EPOCHS = 3


def _span(rows: np.ndarray) -> str:
    return f"[{rows.min()}, {rows.max()}]" if rows.size else "none"


def _read_by_host(num_rows: int, batch_size: int, hosts: int, host: int, seed: int) -> list:
    """The sorted rows `host` reads in each of the first epochs, by running its pipeline."""
    slicer = JaxProcessSharder(process_index=host, process_count=hosts)
    pipeline = Pipeline(
        source={"row": np.arange(num_rows)},
        stages=[slicer.shard_data],
        batch_size=batch_size,
        rngs=nnx.Rngs(seed),
        shuffle=True,
    )
    return [np.sort(np.concatenate([b["row"] for b in pipeline])) for _ in range(_EPOCHS)]


@exercise(
    "05.rows_of_host",
    idea="every host computes the same global order of the epoch, and keeps its own part "
    "of each global batch.",
    method="the global order is pipeline.epoch_order(epoch); global batch k is its rows "
    "[k * B, (k + 1) * B) for B = pipeline.batch_size and k < len(pipeline); the host "
    "keeps positions shard_bounds(B, host, num_hosts) of every global batch.",
)
def _rows_of_host(answer: Any) -> Feedback:
    rng = draw("05.rows_of_host")
    batch, hosts = 4 * int(rng.integers(1, 9)), int(rng.choice([2, 4]))
    drawn = (batch * int(rng.integers(2, 7)) + int(rng.integers(0, batch)), batch, hosts)
    for num_rows, batch_size, hosts, seed in [*_CASES, (*drawn, int(rng.integers(100)))]:
        for host in range(hosts):
            expected = _read_by_host(num_rows, batch_size, hosts, host, seed)
            for epoch in range(_EPOCHS):
                pipeline = Pipeline(
                    source={"row": np.arange(num_rows)},
                    batch_size=batch_size,
                    rngs=nnx.Rngs(seed),
                    shuffle=True,
                )
                got = call(answer, pipeline, epoch, host, hosts)
                rows = array(got, "rows_of_host's result", "an array of row numbers", True)
                got = np.sort(rows.ravel())
                if np.array_equal(got, expected[epoch]):
                    continue
                setting = f"a {num_rows}-row source, global batches of {batch_size}, {hosts} hosts"
                block = num_rows // hosts
                if got.size and got.min() >= host * block and got.max() < (host + 1) * block:
                    return wrong(
                        f"with {setting}: in epoch {epoch}, host {host} reads "
                        f"{expected[epoch].size} rows from all over the source "
                        f"({_span(expected[epoch])}), but yours all lie in the host's own block "
                        "of the source. That is shuffling inside each host's block; here the "
                        "global order comes first, and each host takes its part of every "
                        "global batch."
                    )
                return wrong(
                    f"with {setting}: in epoch {epoch}, host {host} reads "
                    f"{expected[epoch].size} rows, starting (sorted) with "
                    f"{expected[epoch][:5].tolist()}; your function returned {got.size} rows, "
                    f"starting with {got[:5].tolist()}."
                )
    return right(
        f"every host's rows match what its own pipeline reads, in {_EPOCHS} epochs of "
        f"{len(_CASES) + 1} settings (a dropped remainder and 4 hosts included)."
    )
