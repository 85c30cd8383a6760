"""The checkers of tutorials 04 to 07: a right answer passes, a wrong one is told what is
wrong, and the placeholder is reported as not answered, never raised."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jax
import jupytext
import numpy as np
import pytest
from _support.exercise_checks import judges_right_wrong_and_placeholder

from datarax.sharding import RowLedger, shard_bounds
from datarax_course import check
from datarax_course._nb04 import _blocks, layouts

ROOT = Path(__file__).parents[2]


# 04.batch_sizes ------------------------------------------------------------------------
def batch_sizes(sharding: Any, global_batch: int, host_of: dict[int, int]):
    rows: dict[int, set[int]] = {}
    for device, index in sharding.devices_indices_map((global_batch,)).items():
        held = range(*index[0].indices(global_batch))
        rows.setdefault(host_of[device.id], set()).update(held)
    per_device = global_batch
    for axis in jax.tree.leaves(tuple(sharding.spec)[:1]):
        per_device //= sharding.mesh.shape[axis]
    return {host: len(held) for host, held in rows.items()}, per_device


def batch_sizes_over_all_devices(sharding: Any, global_batch: int, host_of: dict[int, int]):
    per_host, _ = batch_sizes(sharding, global_batch, host_of)
    return per_host, global_batch // len(sharding.device_set)  # P x D, not the mesh


def batch_sizes_counting_devices(sharding: Any, global_batch: int, host_of: dict[int, int]):
    _, per_device = batch_sizes(sharding, global_batch, host_of)
    devices = [host_of[d.id] for d in sharding.device_set]
    return {h: per_device * devices.count(h) for h in set(devices)}, per_device


# 04.host_bounds --------------------------------------------------------------------------
def host_bounds(num_rows: int, index: int, count: int, drop_remainder: bool):
    per_host, remainder = divmod(num_rows, count)
    start, stop = index * per_host, (index + 1) * per_host
    if not drop_remainder:
        start, stop = start + min(index, remainder), stop + min(index + 1, remainder)
    return start, stop


def proportional_bounds(num_rows: int, index: int, count: int, drop_remainder: bool):
    return index * num_rows // count, (index + 1) * num_rows // count


# 04.global_rows --------------------------------------------------------------------------
def global_rows(sharding: Any, host_of: dict[int, int], host: int, local_rows: int) -> int:
    placed = sharding.devices_indices_map((len(sharding.device_set),))
    starts = {index[0].start for index in placed.values()}
    mine = {index[0].start for d, index in placed.items() if host_of[d.id] == host}
    if local_rows % len(mine):
        raise ValueError("rows do not split over the host's blocks")
    return local_rows // len(mine) * len(starts)


def global_rows_by_device_count(sharding: Any, host_of: dict[int, int], host: int, rows: int):
    devices = [d for d in sharding.device_set if host_of[d.id] == host]
    return rows * len(sharding.device_set) // len(devices)  # counts replicas as blocks


# 04.cluster_ok ---------------------------------------------------------------------------
def cluster_ok(results: list[Any], num_rows: int) -> bool:
    count = results[0].value["process"][1]
    indices = sorted(r.value["process"][0] for r in results)
    rows = sorted(row for r in results for row in r.value["rows"])
    return (
        indices == list(range(count))
        and all(r.process_index == r.value["process"][0] for r in results)
        and len({tuple(r.value["global_shape"]) for r in results}) == 1
        and results[0].value["global_shape"][0] == num_rows
        and len({r.value["sum"] for r in results}) == 1
        and rows == list(range(num_rows))
    )


def cluster_ok_without_rows(results: list[Any], num_rows: int) -> bool:
    count = results[0].value["process"][1]
    return sorted(r.value["process"][0] for r in results) == list(range(count)) and (
        len({r.value["sum"] for r in results}) == 1
    )


# 05.rows_of_host -------------------------------------------------------------------------
def rows_of_host(pipeline: Any, epoch: int, host: int, num_hosts: int) -> np.ndarray:
    order, size = pipeline.epoch_order(epoch), pipeline.batch_size
    start, stop = shard_bounds(size, host, num_hosts)
    parts = [order[k * size : (k + 1) * size][start:stop] for k in range(len(pipeline))]
    return np.concatenate(parts)


def rows_of_host_block(pipeline: Any, epoch: int, host: int, num_hosts: int) -> np.ndarray:
    start, stop = shard_bounds(pipeline.source_length, host, num_hosts)
    usable = len(pipeline) * pipeline.batch_size // num_hosts
    return np.random.default_rng(epoch).permutation(np.arange(start, stop))[:usable]


def rows_of_host_no_drop(pipeline: Any, epoch: int, host: int, num_hosts: int) -> np.ndarray:
    order = pipeline.epoch_order(epoch)
    start, stop = shard_bounds(len(order), host, num_hosts)
    return order[start:stop]


# 06.allreduce_bytes ----------------------------------------------------------------------
def allreduce_bytes(params: Any, batch_sharding: Any) -> float:
    payload = sum(leaf.nbytes for leaf in jax.tree.leaves(params))
    devices = len(batch_sharding.device_set)
    group = devices // batch_sharding.shard_shape((devices,))[0]
    return 2 * (group - 1) / group * payload


def allreduce_bytes_all_devices(params: Any, batch_sharding: Any) -> float:
    payload = sum(leaf.nbytes for leaf in jax.tree.leaves(params))
    group = len(batch_sharding.device_set)
    return 2 * (group - 1) / group * payload


def allreduce_payload_only(params: Any, batch_sharding: Any) -> float:
    return float(sum(leaf.nbytes for leaf in jax.tree.leaves(params)))


# 07.epoch_ms -----------------------------------------------------------------------------
def epoch_ms(step_ms: float, input_ms: float, steps: int, prefetch: bool) -> float:
    if not prefetch:
        return steps * (step_ms + input_ms)
    return input_ms + step_ms + (steps - 1) * max(step_ms, input_ms)


def epoch_ms_steady_state(step_ms: float, input_ms: float, steps: int, prefetch: bool) -> float:
    return steps * (max(step_ms, input_ms) if prefetch else step_ms + input_ms)


CASES = [
    ("04.batch_sizes", batch_sizes, batch_sizes_over_all_devices, "the others make copies"),
    ("04.batch_sizes", batch_sizes, batch_sizes_counting_devices, "each row once"),
    ("04.host_bounds", host_bounds, proportional_bounds, "host 1 reads rows [0, 0)"),
    ("04.global_rows", global_rows, global_rows_by_device_count, "row blocks its devices hold"),
    ("04.cluster_ok", cluster_ok, cluster_ok_without_rows, "another global shape"),
    ("05.rows_of_host", rows_of_host, rows_of_host_block, "shuffling inside each host's block"),
    ("05.rows_of_host", rows_of_host, rows_of_host_no_drop, "epoch 0, host 0 reads"),
    ("06.allreduce_bytes", allreduce_bytes, allreduce_bytes_all_devices, "(data, model) mesh"),
    ("06.allreduce_bytes", allreduce_bytes, allreduce_payload_only, "nothing to average"),
    ("07.epoch_ms", epoch_ms, epoch_ms_steady_state, "with prefetch"),
]


@pytest.mark.parametrize(("name", "solution", "mistake", "named"), CASES)
def test_right_wrong_and_placeholder(name: str, solution: Any, mistake: Any, named: str) -> None:
    judges_right_wrong_and_placeholder(name, solution, mistake, named)


@pytest.mark.parametrize("name", sorted({name for name, *_ in CASES}))
def test_a_raising_answer_is_reported_not_raised(name: str) -> None:
    def broken(*args: Any) -> Any:
        raise KeyError("oops")

    told = check(name, broken, quiet=True)
    assert not told and "KeyError" in told.message


def test_04_layouts_hold_meshes_out_of_device_order_and_uneven_hosts() -> None:
    plain = [device.id for device in jax.devices()]
    orders = [[d.id for d in sharding.mesh.devices.ravel()] for _, sharding, _ in layouts()]
    assert any(order != plain[: len(order)] for order in orders)
    sizes = [
        sorted(np.unique(list(host_of.values()), return_counts=True)[1])
        for *_, host_of in layouts()
    ]
    assert any(len(set(size)) > 1 for size in sizes)


def test_04_a_host_rows_answer_tied_to_device_order_is_caught() -> None:
    """Taking host h's devices as mesh positions [h * D, (h + 1) * D) is wrong in general."""

    def by_mesh_position(sharding: Any, global_batch: int, host_of: dict[int, int]):
        devices = list(sharding.mesh.devices.ravel())
        hosts = sorted(set(host_of.values()))
        per_host = len(devices) // len(hosts)
        index = sharding.devices_indices_map((global_batch,))
        counts = {}
        for host in hosts:
            mine = devices[host * per_host : (host + 1) * per_host]
            rows = {r for d in mine for r in range(*index[d][0].indices(global_batch))}
            counts[host] = len(rows)
        return counts, sharding.shard_shape((global_batch,))[0]

    told = check("04.batch_sizes", by_mesh_position, quiet=True)
    assert not told and "hosts read" in told.message, told.message


def test_04_global_rows_agrees_with_the_ledger() -> None:
    """The answer's formula is what RowLedger reports for a global batch of that size."""
    for _, sharding, host_of in layouts():
        for host in set(host_of.values()):
            local_rows = 3 * _blocks(sharding, host_of, host)[1]
            implied = global_rows(sharding, host_of, host, local_rows)
            ledger = RowLedger(sharding, implied, host_of=host_of)
            assert ledger.row_count(host) == local_rows


def test_07_quotes_the_recorded_staging_ratio() -> None:
    """The figure tutorial 07 quotes for staging through one device is the recorded one."""
    results = json.loads((ROOT / "docs/benchmarks/results.json").read_text())
    recorded = results["large_batch"]["staged_over_shard"]
    text = "\n".join(
        cell.source for cell in jupytext.read(ROOT / "tutorials/07_performance.md").cells
    )
    quoted = re.search(r"staging the batch through one device.*?([\d.]+) times", text, re.S)
    assert quoted, "tutorial 07 no longer quotes the staging ratio"
    assert float(quoted.group(1)) == round(recorded, 1)


def test_07_quotes_the_recorded_host_work_ratios() -> None:
    """The workers=2 / workers=0 ratios tutorial 07 quotes are the recorded ones."""
    results = json.loads((ROOT / "docs/benchmarks/results.json").read_text())
    recorded = {
        case["cost_ms"]: case["workers_over_none"] for case in results["host_work"]["cases"]
    }
    text = "\n".join(
        cell.source for cell in jupytext.read(ROOT / "tutorials/07_performance.md").cells
    )
    quoted = re.findall(r"at ([\d.]+) ms per record `workers=2` made ([\d.]+) times", text)
    assert len(quoted) >= 2, "tutorial 07 no longer quotes the host-work ratios"
    for cost, ratio in quoted:
        assert float(ratio) == round(recorded[float(cost)], 2), (cost, ratio)
