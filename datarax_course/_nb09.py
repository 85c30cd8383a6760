"""Checkers for tutorial 09, preemption, resume and uneven epoch ends.

``09.rows_to_read``: after a saved pipeline state, the source rows a host reads for
the next global batch, on any number of hosts.
``09.epoch_plan``: how many batches per-host pipelines of different lengths run
together, and what each host leaves unread.

The right answers come from the library and JAX: a real shuffled `Pipeline` with a
sharding over the devices at hand, and `RowLedger`s over pretend hosts whose mesh
orders include one that is not ``jax.devices()`` order.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from datarax.pipeline import Pipeline
from datarax.sharding import RowLedger, pretend_hosts
from datarax_course._cases import draw, public
from datarax_course._core import call, exercise
from datarax_course._feedback import Feedback, right, wrong
from datarax_course._values import array, items, shown, whole

SOURCE_ROWS, BATCH = 40, 8


def _ledgers() -> list[tuple[str, RowLedger]]:
    """Ledgers of one global batch for 1, 2 and 4 pretend hosts, one interleaved."""
    devices = jax.devices()
    count = max(n for n in (1, 2, 4, 8) if n <= len(devices))
    devices = devices[:count]
    mesh = Mesh(np.array(devices), ("data",))
    result = []
    for hosts in sorted({1, min(2, count), min(4, count)}):
        sharding = NamedSharding(mesh, P("data"))
        result.append(
            (
                f"{hosts} host" + "s" * (hosts > 1),
                RowLedger(sharding, BATCH, host_of=pretend_hosts(hosts, devices)),
            )
        )
    if count >= 4:  # host h drives devices h and h + count/2: non-adjacent rows
        interleaved = np.array(devices).reshape(2, count // 2).T.reshape(-1)
        sharding = NamedSharding(Mesh(interleaved, ("data",)), P("data"))
        result.append(
            ("2 hosts, interleaved", RowLedger(sharding, BATCH, host_of=pretend_hosts(2, devices)))
        )
    return result


def _pipeline() -> Pipeline:
    sharding = NamedSharding(Mesh(np.array(jax.devices()[:1]), ("data",)), P("data"))
    source = {"id": np.arange(SOURCE_ROWS, dtype=np.int32)}
    seed = 3 if public() else int(draw("09.rows_to_read").integers(1000))
    return Pipeline(
        source=source, batch_size=BATCH, shuffle=True, rngs=nnx.Rngs(seed), sharding=sharding
    )


@exercise(
    "09.rows_to_read",
    idea="the state says which epoch and which batch come next; the ledger says which "
    "positions of that global batch are this host's.",
    method="the next global batch is epoch_order(state['epoch'])[start : start + size] "
    "with size = state['batch_size'] and start = state['batch_index'] * size; the host "
    "reads its positions of it, ledger.rows_of_host(host).",
)
def _rows_to_read(answer: Any) -> Feedback:
    pipeline = _pipeline()
    walked = 0
    for _ in range(2):  # every state of two epochs, the turn of the epoch included
        iterator = iter(pipeline)
        while True:
            state = pipeline.get_state()
            try:
                batch = next(iterator)
            except StopIteration:
                break
            walked += 1
            global_rows = np.asarray(batch["id"])
            for name, ledger in _ledgers():
                pieces = {}
                for host in ledger.hosts:
                    got = call(answer, dict(state), pipeline.epoch_order, ledger, host)
                    rows = array(got, "rows_to_read's result", "an array of source rows", True)
                    expected = global_rows[ledger.rows_of_host(host)]
                    if rows.shape != expected.shape or not np.array_equal(rows, expected):
                        where = f"epoch {state['epoch']}, batch {state['batch_index']}"
                        return wrong(
                            f"after the state of {where} ({name}), host {host} reads the "
                            f"source rows {expected.tolist()} in this order; your function "
                            f"returned {rows.tolist()}."
                        )
                    pieces[host] = rows
                order = np.concatenate([pieces[h] for h in ledger.hosts])
                if sorted(order.tolist()) != sorted(global_rows.tolist()):
                    return wrong(f"with {name} the hosts' rows do not make the global batch.")
    return right(
        f"for all {walked} saved states of two epochs and {len(_ledgers())} host layouts, "
        "every host reads exactly its rows of the next global batch."
    )


CASES = ([40, 48], [48, 40], [43, 48, 50, 64], [16, 16], [8, 15, 23])
PER_HOST_BATCH = 8


@exercise(
    "09.epoch_plan",
    idea="how many full batches does each host have on its own, and where does "
    "uneven_hosts='stop' make every host stop?",
    method="each host has rows // per_host_batch full batches; every host runs the "
    "smallest of those counts, and leaves rows - batches * per_host_batch rows unread.",
)
def _epoch_plan(answer: Any) -> Feedback:
    rng = draw("09.epoch_plan")
    drawn = [int(n) for n in rng.integers(0, 200, size=int(rng.integers(2, 7)))]
    for rows_per_host in [*CASES, drawn]:
        counts = [
            len(Pipeline(source={"x": np.zeros(rows)}, batch_size=PER_HOST_BATCH))
            for rows in rows_per_host
        ]
        steps = min(counts)
        unread = [rows - steps * PER_HOST_BATCH for rows in rows_per_host]
        got = call(answer, list(rows_per_host), PER_HOST_BATCH)
        pair = items(got, "epoch_plan's result", "a pair (batches, unread)", length=2)
        got_steps = whole(pair[0], "epoch_plan's batches")
        listed = items(pair[1], "epoch_plan's unread", "a list of row counts, one per host")
        got_unread = [whole(n, "each host's unread rows") for n in listed]
        if got_steps != steps:
            return wrong(
                f"hosts with {rows_per_host} rows and {PER_HOST_BATCH} rows per batch make "
                f"{counts} batches on their own; with uneven_hosts='stop' every host runs "
                f"{steps}, and your function says {got_steps}."
            )
        if got_unread != unread:
            return wrong(
                f"hosts with {rows_per_host} rows, stopping after {steps} batches of "
                f"{PER_HOST_BATCH}, leave {unread} rows unread; your function says "
                f"{shown(got_unread)}."
            )
    return right(
        f"the batch counts and unread rows match the pipelines' own for {len(CASES) + 1} sets "
        "of hosts."
    )
