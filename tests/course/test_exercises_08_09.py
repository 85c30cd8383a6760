"""The checkers of tutorials 08 and 09: a right answer passes, a wrong one is told what
is wrong, and the placeholder is reported as not answered, never raised."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _support.exercise_checks import judges_right_wrong_and_placeholder

from datarax_course import check
from datarax_course._nb08 import layouts


def host_rows(sharding: Any, num_rows: int, host_of: dict[int, int], host: int) -> np.ndarray:
    held: set[int] = set()
    for device, index in sharding.devices_indices_map((num_rows,)).items():
        if host_of[device.id] == host:
            held.update(range(*index[0].indices(num_rows)))
    return np.array(sorted(held), dtype=np.int64)


def grain_bounds(sharding: Any, num_rows: int, host_of: dict[int, int], host: int) -> np.ndarray:
    hosts = len(set(host_of.values()))
    return np.arange(host * num_rows // hosts, (host + 1) * num_rows // hosts)


def device_blocks(
    host_data: np.ndarray, rows: np.ndarray, sharding: Any, num_rows: int, devices: list[Any]
) -> list[np.ndarray]:
    index = sharding.devices_indices_map((num_rows, *host_data.shape[1:]))
    return [
        host_data[np.searchsorted(rows, np.arange(num_rows)[index[device][0]])]
        for device in devices
    ]


def global_positions(
    host_data: np.ndarray, rows: np.ndarray, sharding: Any, num_rows: int, devices: list[Any]
) -> list[np.ndarray]:  # indexes host_data with global rows: wrong once a host starts past 0
    index = sharding.devices_indices_map((num_rows, *host_data.shape[1:]))
    return [host_data[index[device][0]] for device in devices]


def rows_to_read(state: dict[str, Any], epoch_order: Any, ledger: Any, host: int) -> np.ndarray:
    start = state["batch_index"] * state["batch_size"]
    batch = epoch_order(state["epoch"])[start : start + state["batch_size"]]
    return batch[ledger.rows_of_host(host)]


def whole_batch(state: dict[str, Any], epoch_order: Any, ledger: Any, host: int) -> np.ndarray:
    start = state["batch_index"] * state["batch_size"]
    return epoch_order(state["epoch"])[start : start + state["batch_size"]]


def epoch_plan(rows_per_host: list[int], per_host_batch: int) -> tuple[int, list[int]]:
    steps = min(rows // per_host_batch for rows in rows_per_host)
    return steps, [rows - steps * per_host_batch for rows in rows_per_host]


def longest_host(rows_per_host: list[int], per_host_batch: int) -> tuple[int, list[int]]:
    steps = max(rows // per_host_batch for rows in rows_per_host)
    return steps, [0] * len(rows_per_host)


CASES = [
    ("08.host_rows", host_rows, grain_bounds, "model axis across hosts"),
    ("08.host_rows", host_rows, lambda *args: host_rows(*args)[::-1], "sorted"),
    ("08.device_blocks", device_blocks, global_positions, "sit at positions"),
    ("09.rows_to_read", rows_to_read, whole_batch, "host 0 reads the source rows"),
    ("09.epoch_plan", epoch_plan, longest_host, "every host runs 5"),
]


@pytest.mark.parametrize(("name", "solution", "mistake", "named"), CASES)
def test_right_wrong_and_placeholder(name: str, solution: Any, mistake: Any, named: str) -> None:
    judges_right_wrong_and_placeholder(name, solution, mistake, named)


def test_a_raising_answer_is_reported_not_raised() -> None:
    def broken(*args: Any) -> Any:
        raise KeyError("oops")

    for name in ("08.host_rows", "08.device_blocks", "09.rows_to_read", "09.epoch_plan"):
        told = check(name, broken, quiet=True)
        assert not told and "KeyError" in told.message


def test_layouts_include_meshes_out_of_device_order() -> None:
    """A checker that only held in jax.devices() order would fail one of these."""
    import jax

    orders = [
        [device.id for device in sharding.mesh.devices.ravel()] for _, sharding, _ in layouts()
    ]
    plain = [device.id for device in jax.devices()]
    assert sum(order != plain[: len(order)] for order in orders) >= 3
    assert any(len(set(host_of.values())) == 4 for _, _, host_of in layouts())


def test_a_host_rows_answer_tied_to_device_order_is_caught() -> None:
    """Taking a host's devices as consecutive positions of the mesh is wrong in general."""

    def by_mesh_position(sharding: Any, num_rows: int, host_of: dict[int, int], host: int):
        devices = list(sharding.mesh.devices.ravel())
        per_host = len(devices) // len(set(host_of.values()))
        mine = devices[host * per_host : (host + 1) * per_host]
        index = sharding.devices_indices_map((num_rows,))
        return np.unique(np.concatenate([np.arange(num_rows)[index[d][0]] for d in mine]))

    told = check("08.host_rows", by_mesh_position, quiet=True)
    assert not told and "must read rows" in told.message


def test_layouts_include_a_slice_axis_outermost_with_and_without_it_in_the_spec() -> None:
    """The multi-slice mesh of lesson 08: split over slice and data, each of the 4 hosts
    reads its own quarter; with the slice axis left out, the slices are replicas."""
    from datarax.sharding import RowLedger

    found = {name: (s, host_of) for name, s, host_of in layouts() if "slice" in name}
    assert len(found) == 2, sorted(found)
    split, replicated = (RowLedger(s, 16, host_of=host_of) for s, host_of in found.values())
    assert next(iter(found.values()))[0].mesh.axis_names == ("slice", "data", "model")
    assert [split.row_count(h) for h in split.hosts] == [4, 4, 4, 4]
    assert not split.shared_blocks()
    assert [replicated.row_count(h) for h in replicated.hosts] == [8, 8, 8, 8]
    assert set(replicated.shared_blocks().values()) == {(0, 2), (1, 3)}
