"""Checkers for tutorial 04, many hosts.

``04.batch_sizes``: the per-host and per-device batch, read off a sharding.
``04.host_bounds``: Grain's even split of rows between hosts, with and without
``drop_remainder``.
``04.global_rows``: the global batch a host's row count implies (what the hosts
compare before building global arrays).
``04.cluster_ok``: the assertions of a multi-process test, on what each process of a
local cluster returned.

Meshes are built from the devices at hand and split into pretend hosts (a mapping
device id -> host), device orders other than ``jax.devices()`` included; the right
answers come from JAX's placement (``devices_indices_map``, through `RowLedger`).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from datarax.sharding import RowLedger, pretend_hosts, shard_bounds
from datarax_course._cases import draw
from datarax_course._checks import device_spans
from datarax_course._core import Ban, call, exercise
from datarax_course._feedback import AnswerRaised, Feedback, right, wrong
from datarax_course._hosts import Layout, one_host_layouts, paired_devices
from datarax_course._values import items, plain, reject, shown, whole


def layouts() -> list[Layout]:
    """Shardings of a batch over the devices at hand, each with pretend hosts.

    With 4 or more devices: data over every host; a (data, model) mesh with the
    model axis inside each host, and one with it across hosts; a replicated batch;
    the batch split over both axes; the device order of a TPU v3-8's ``make_mesh``
    (hosts of 2); and hosts of unequal size.
    """
    devices = paired_devices()
    if len(devices) < 4:
        return one_host_layouts()
    count = len(devices)
    halves = pretend_hosts(2, devices)
    by_host = np.array(devices).reshape(2, count // 2)
    pairs = np.array(devices).reshape(count // 2, 2)  # model axis inside a host of 2
    order = np.arange(count)
    if count >= 8:
        order[4:8] = [6, 7, 4, 5]  # TPU v3-8: [0, 1, 2, 3, 6, 7, 4, 5]
    else:
        order = order[::-1].copy()
    uneven = {d.id: int(position >= count - 2) for position, d in enumerate(devices)}
    hosts_of_2 = pretend_hosts(count // 2, devices)

    def named(devices_grid: np.ndarray, spec: P) -> NamedSharding:
        names = ("data", "model")[: devices_grid.ndim]
        return NamedSharding(Mesh(devices_grid, names), spec)

    return [
        ("data over every host", named(by_host.ravel(), P("data")), halves),
        ("model axis inside each host", named(pairs, P("data")), hosts_of_2),
        ("model axis across hosts", named(by_host.T, P("data")), halves),
        ("replicated batch", named(pairs, P()), halves),
        ("batch over both axes", named(pairs, P(("data", "model"))), halves),
        ("mesh out of device order", named(np.array(devices)[order], P("data")), hosts_of_2),
        ("hosts of unequal size", named(by_host.ravel(), P("data")), uneven),
    ]


def _describe(name: str, sharding: NamedSharding) -> str:
    return f"'{name}' (mesh {dict(sharding.mesh.shape)}, spec {tuple(sharding.spec)})"


@exercise(
    "04.batch_sizes",
    idea="a device holds the global batch divided by the mesh axes that split the rows; a "
    "host reads the union of its devices' rows, each row once.",
    method="per device: sharding.shard_shape((global_batch,))[0]. Per host: "
    "sharding.devices_indices_map((global_batch,)) gives each device's rows (a slice); "
    "collect the rows of the devices with host_of[device.id] == host in a set per host.",
)
def _batch_sizes(answer: Any) -> Feedback:
    cases = layouts()
    rng = draw("04.batch_sizes")
    batches = [(layout, 4) for layout in cases]
    batches += [(layout, int(rng.integers(1, 33))) for layout in cases]
    for (name, sharding, host_of), per_device_count in batches:
        global_batch = per_device_count * len(sharding.device_set)
        ledger = RowLedger(sharding, global_batch, host_of=host_of)
        got = call(answer, sharding, global_batch, dict(host_of))
        pair = "a pair (per_host, per_device): a dict {host: rows} and a whole number"
        per_host, per_device = items(got, "batch_sizes's result", pair, length=2)
        if not isinstance(per_host, dict):
            raise reject("batch_sizes's per_host", per_host, "a dict {host: rows}")
        per_device = whole(per_device, "batch_sizes's per_device")
        per_host = {whole(k, "a host"): whole(v, "a host's rows") for k, v in per_host.items()}
        expected_device = sharding.shard_shape((global_batch,))[0]
        if per_device != expected_device:
            return wrong(
                f"with {_describe(name, sharding)} and B = {global_batch}, every device holds "
                f"{expected_device} rows; you said {shown(per_device)}. Only the mesh axes the "
                "spec names for the batch dimension split it; the others make copies."
            )
        expected_host = {host: ledger.row_count(host) for host in ledger.hosts}
        if per_host != expected_host:
            return wrong(
                f"with {_describe(name, sharding)} and B = {global_batch}, the hosts read "
                f"{expected_host} rows; you said {shown(per_host)}. A host reads every row "
                "its devices hold, each row once, even when two of its devices hold the "
                "same rows."
            )
    return right(
        f"per-host and per-device batches match JAX's placement on {len(cases)} meshes, "
        "replicas, hosts of unequal size and a mesh out of device order included."
    )


@exercise(
    "04.host_bounds",
    idea="every host gets num_rows // process_count rows; the remainder is either dropped "
    "or handed out one row each to the first hosts.",
    method="with divmod(num_rows, process_count) = (per_host, remainder), host i starts at "
    "i * per_host; without drop_remainder the first `remainder` hosts each take one row "
    "more, which shifts host i's start by min(i, remainder) and its stop by "
    "min(i + 1, remainder).",
)
def _host_bounds(answer: Any) -> Feedback:
    rng = draw("04.host_bounds")
    small = [(rows, count) for rows in range(41) for count in range(1, 6)]
    large = [(int(rng.integers(41, 10**7)), int(rng.integers(2, 257))) for _ in range(4)]
    checked = 0
    for num_rows, count in [*small, *large]:
        hosts = range(count) if count <= 5 else sorted({0, 1, count // 2, count - 1})
        for drop in (True, False):
            for index in hosts:
                expected = shard_bounds(num_rows, index, count, drop_remainder=drop)
                got = call(answer, num_rows, index, count, drop, bans=_NO_SHARD_BOUNDS)
                bounds = items(got, "host_bounds's result", "a pair (start, stop)", 2)
                found = tuple(whole(bound, "start and stop") for bound in bounds)
                if found != expected:
                    return wrong(
                        f"for {num_rows} rows on {count} hosts with drop_remainder={drop}, "
                        f"host {index} reads rows [{expected[0]}, {expected[1]}); your "
                        f"function says {shown(found)}."
                    )
                checked += 1
    return right(
        f"all {checked} cases (0-40 rows on 1-5 hosts, and millions of rows on up to 256 "
        "hosts, both drop_remainder) agree."
    )


_NO_SHARD_BOUNDS = (Ban(shard_bounds, "__code__", "shard_bounds"),)


def _blocks(sharding: NamedSharding, host_of: dict[int, int], host: int) -> tuple[int, int]:
    """(row blocks in all, distinct row blocks `host`'s devices hold)."""
    blocks = device_spans(sharding, (len(sharding.device_set),))
    mine = {block for device, block in blocks.items() if host_of[device.id] == host}
    return len(set(blocks.values())), len(mine)


@exercise(
    "04.global_rows",
    idea="a host's rows are some of the batch's row blocks; all hosts together cover every "
    "block. How many blocks are there, and how many does this host hold?",
    method="place a probe batch (len(sharding.device_set) rows): the distinct slices of "
    "devices_indices_map are the blocks, those of the host's devices are its blocks. "
    "local_rows / (host's blocks) rows per block, times all blocks; raise a ValueError "
    "when local_rows does not split evenly.",
)
def _global_rows(answer: Any) -> Feedback:
    cases = layouts()
    multiple = int(draw("04.global_rows").integers(2, 50))
    for name, sharding, host_of in cases:
        for host in sorted(set(host_of.values())):
            total, held = _blocks(sharding, host_of, host)
            for local_rows in (held, 3 * held, 4 * held + 1, 7, multiple * held):
                expected = "ValueError" if local_rows % held else local_rows // held * total
                try:
                    got: Any = whole(
                        call(answer, sharding, dict(host_of), host, local_rows),
                        "global_rows's result",
                    )
                except AnswerRaised as raised:
                    if not isinstance(raised.error, ValueError):
                        raise
                    got = "ValueError"
                if got != expected:
                    what = (
                        "do not split evenly (raise a ValueError) over the"
                        if expected == "ValueError"
                        else f"make a global batch of {expected} rows under the"
                    )
                    return wrong(
                        f"with {_describe(name, sharding)}, {local_rows} rows on host {host} "
                        f"{what} {held} of {total} row blocks its devices hold; your "
                        f"function says {shown(got)}."
                    )
    return right(f"every host's row count gives the right global batch on {len(cases)} meshes.")


@dataclasses.dataclass(frozen=True)
class _Result:
    """Shaped like `datarax.distributed.ProcessResult`."""

    process_index: int
    value: Any
    output: str = ""


def _cluster(num_rows: int, count: int, permuted: bool) -> list[_Result]:
    """What each process of a `count`-host cluster returns, from JAX's placement here."""
    devices = jax.devices()[: len(jax.devices()) - len(jax.devices()) % count]
    order = np.arange(len(devices))[::-1] if permuted else np.arange(len(devices))
    sharding = NamedSharding(Mesh(np.array(devices)[order], ("data",)), P("data"))
    ledger = RowLedger(sharding, num_rows, host_of=pretend_hosts(count, devices))
    data = np.arange(2 * num_rows, dtype=np.float32).reshape(num_rows, 2)
    total = float(jax.jit(jax.numpy.sum)(jax.device_put(data, sharding)))
    return [
        _Result(
            host,
            {
                "process": (host, count),
                "rows": ledger.rows_of_host(host).tolist(),
                "global_shape": (num_rows, 2),
                "sum": total,
            },
        )
        for host in range(count)
    ]


def _broken(results: list[_Result]) -> list[tuple[str, list[_Result]]]:
    """Ways a cluster's results can be wrong, each with what is wrong."""

    def edit(position: int, **changes: Any) -> list[_Result]:
        changed = list(results)
        value = {**changed[position].value, **changes}
        changed[position] = dataclasses.replace(changed[position], value=value)
        return changed

    last = results[-1].value
    shared = [*last["rows"], results[0].value["rows"][0]]
    return [
        ("a process is missing from the results", results[:-1]),
        ("two results come from the same process", [*results[:-1], results[0]]),
        ("one process computed another sum", edit(-1, sum=last["sum"] + 1.0)),
        ("one process built another global shape", edit(-1, global_shape=(1, 2))),
        ("a row is held by no process", edit(-1, rows=last["rows"][:-1])),
        ("a row is held by two processes", edit(-1, rows=shared)),
    ]


def _verdict(value: Any) -> bool:
    """The reader's True or False (numpy's included)."""
    verdict = plain(value, "cluster_ok's result", "True or False")
    if isinstance(verdict, np.ndarray) and verdict.shape == () and verdict.dtype == bool:
        verdict = bool(verdict)
    if not isinstance(verdict, bool):
        raise reject("cluster_ok's result", verdict, "True or False")
    return verdict


@exercise(
    "04.cluster_ok",
    idea="a healthy cluster has every process exactly once, and every process agrees on "
    "the global batch, whose rows the processes hold between them, each row once.",
    method="check that the process indices are 0 .. count - 1, each once; that every "
    "process built the same global shape with num_rows rows and the same sum; and that "
    "the processes' rows together, sorted, are range(num_rows).",
)
def _cluster_ok(answer: Any) -> Feedback:
    drawn_rows = 8 * int(draw("04.cluster_ok").integers(1, 9))
    settings = [(2, False, 16), (2, True, 16), (4, False, 16), (4, True, 16), (4, True, drawn_rows)]
    for count, permuted, num_rows in settings:
        if len(jax.devices()) < count:
            continue
        good = _cluster(num_rows, count, permuted)
        verdict = _verdict(call(answer, copy.deepcopy(good), num_rows))
        if verdict is not True:
            order = "a mesh out of device order" if permuted else "a data mesh"
            return wrong(
                f"the results of a healthy {count}-process cluster ({order}, {num_rows} rows) "
                f"were judged {verdict!r}; they should give True."
            )
        for problem, results in _broken(good):
            verdict = _verdict(call(answer, copy.deepcopy(results), num_rows))
            if verdict is not False:
                return wrong(
                    f"{problem}, but your function returned {verdict!r} for a "
                    f"{count}-process cluster; it should return False."
                )
    return right("healthy clusters pass, and each of 6 kinds of broken result is caught.")
