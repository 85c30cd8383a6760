"""RowLedger and the shape helpers: exactly JAX's placement, for any mesh and device order.

Hosts are played by simulated devices (``host_of=``); the real multi-process layouts
are in test_multiprocess.py.
"""

from __future__ import annotations

import textwrap

import jax
import numpy as np
import pytest
from _support.processes import run_own_devices
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from datarax._compat import single_device_sharding
from datarax.errors import MeshError
from datarax.sharding import (
    JaxProcessSharder,
    RowLedger,
    global_to_local_shape,
    local_index,
    local_to_global_shape,
    pretend_hosts,
)

DEVICES = jax.devices()
TWO_HOSTS = {d.id: i // 4 for i, d in enumerate(DEVICES)}  # devices 0-3: host 0, 4-7: host 1


def _rows(blocks: list[tuple[int, int]]) -> list[int]:
    return [row for start, stop in blocks for row in range(start, stop)]


def test_data_axis_over_every_host() -> None:
    ledger = RowLedger(
        NamedSharding(Mesh(np.array(DEVICES), ("data",)), P("data")), 16, host_of=TWO_HOSTS
    )
    assert ledger.hosts == (0, 1)
    assert ledger.blocks_of_host(0) == [(0, 8)] and ledger.blocks_of_host(1) == [(8, 16)]
    assert ledger.rows_of_host(1).tolist() == list(range(8, 16))
    assert ledger.rows_of_device(DEVICES[5]) == range(10, 12)
    assert ledger.hosts_of_row(9) == (1,) and ledger.devices_of_row(9) == (DEVICES[4],)
    assert ledger.shared_blocks() == {}
    assert ledger.hosts_sharing_with(0) == ledger.hosts_sharing_with(1) == ()


def test_model_axis_across_hosts_gives_every_host_every_row() -> None:
    # 'data' inside each host, 'model' across the two hosts: the case Grain's bounds get wrong.
    devices = np.array(DEVICES).reshape(2, 4).T  # column h holds host h's devices
    mesh = Mesh(devices, ("data", "model"))
    ledger = RowLedger(NamedSharding(mesh, P("data")), 16, host_of=TWO_HOSTS)
    for host in (0, 1):
        assert ledger.rows_of_host(host).tolist() == list(range(16))
    assert ledger.hosts_of_row(5) == (0, 1)
    assert ledger.shared_blocks() == {
        (0, 4): (0, 1),
        (4, 8): (0, 1),
        (8, 12): (0, 1),
        (12, 16): (0, 1),
    }
    assert ledger.hosts_sharing_with(0) == (1,) and ledger.hosts_sharing_with(1) == (0,)
    ledger.shared_blocks().clear()  # a copy: the ledger's own answer stays
    assert len(ledger.shared_blocks()) == 4
    table = ledger.table()
    assert table.splitlines()[0].split() == [
        "host",
        "devices",
        "rows",
        "count",
        "same",
        "rows",
        "also",
        "on",
        "hosts",
    ]
    assert table.splitlines()[1].split() == ["0", "0,1,2,3", "0-15", "16", "1"]


def test_interleaved_device_order_gives_non_adjacent_blocks() -> None:
    order = [0, 4, 1, 5, 2, 6, 3, 7]  # hosts alternate along the mesh
    mesh = Mesh(np.array(DEVICES)[order], ("data",))
    ledger = RowLedger(NamedSharding(mesh, P("data")), 16, host_of=TWO_HOSTS)
    assert ledger.blocks_of_host(0) == [(0, 2), (4, 6), (8, 10), (12, 14)]
    assert ledger.row_count(1) == 8
    assert "0-1, 4-5, 8-9, 12-13" in ledger.table()


def test_replicated_and_subset_and_single_device() -> None:
    mesh = Mesh(np.array(DEVICES).reshape(4, 2), ("data", "model"))
    replicated = RowLedger(NamedSharding(mesh, P()), 6, host_of=TWO_HOSTS)
    assert all(replicated.rows_of_host(h).tolist() == list(range(6)) for h in (0, 1))
    subset = RowLedger(
        NamedSharding(Mesh(np.array(DEVICES[2:6]), ("data",)), P("data")), 8, host_of=TWO_HOSTS
    )
    assert subset.blocks_of_host(0) == [(0, 4)] and subset.blocks_of_host(1) == [(4, 8)]
    assert len(subset.devices) == 4
    single = RowLedger(single_device_sharding(DEVICES[6]), 5, host_of=TWO_HOSTS)
    assert single.hosts == (1,) and single.rows_of_host(0).tolist() == []


@st.composite
def _layouts(draw: st.DrawFn) -> tuple[NamedSharding, int, dict[int, int]]:
    order = draw(st.permutations(range(8)))
    shape = draw(st.sampled_from([(8,), (4, 2), (2, 4), (2, 2, 2)]))
    names = ("a", "b", "c")[: len(shape)]
    mesh = Mesh(np.array(DEVICES)[list(order)].reshape(shape), names)
    first = draw(st.sampled_from([None, *names, names[:2] if len(names) > 1 else names[0]]))
    rows = 8 * draw(st.integers(1, 3))
    num_hosts = draw(st.sampled_from([1, 2, 4, 8]))
    return NamedSharding(mesh, P(first)), rows, pretend_hosts(num_hosts)


@given(_layouts())
@settings(max_examples=60, deadline=None)
def test_ledger_equals_jax_placement(layout: tuple[NamedSharding, int, dict[int, int]]) -> None:
    sharding, rows, hosts = layout
    ledger = RowLedger(sharding, rows, host_of=hosts)
    expected: dict[int, set[int]] = {}
    for device, index in sharding.devices_indices_map((rows,)).items():
        held = range(*index[0].indices(rows)[:2])
        assert ledger.rows_of_device(device) == held
        expected.setdefault(hosts[device.id], set()).update(held)
    for host, held_rows in expected.items():
        assert ledger.rows_of_host(host).tolist() == sorted(held_rows)
        assert _rows(ledger.blocks_of_host(host)) == sorted(held_rows)
    for row in range(rows):
        assert ledger.hosts_of_row(row) == tuple(sorted(h for h, r in expected.items() if row in r))


def test_shapes_and_index_on_one_process() -> None:
    mesh = Mesh(np.array(DEVICES)[[3, 1, 0, 2, 7, 5, 4, 6]].reshape(4, 2), ("data", "model"))
    sharding = NamedSharding(mesh, P("data", "model"))
    assert global_to_local_shape(sharding, (16, 6)) == (16, 6)
    assert local_to_global_shape(sharding, (16, 6)) == (16, 6)
    assert local_index(sharding, (16, 6)) == (slice(0, 16), slice(0, 6))
    assert global_to_local_shape(sharding, (16, 6), process_index=1) == (0, 0)
    with pytest.raises(ValueError, match="Host 1 holds no part of an array with this sharding"):
        local_to_global_shape(sharding, (16, 6), process_index=1)
    with pytest.raises(ValueError):
        global_to_local_shape(sharding, (15, 6))


def test_shard_data_with_a_sharding_on_one_host_keeps_everything() -> None:
    mesh = Mesh(np.array(DEVICES).reshape(4, 2), ("data", "model"))
    sharding = NamedSharding(mesh, P("data"))
    data = {"x": np.arange(16).reshape(8, 2), "ids": np.arange(8), "lr": 0.1}
    local = JaxProcessSharder().shard_data(data, sharding)
    assert local["x"] is data["x"] and local["ids"] is data["ids"] and local["lr"] == 0.1
    assert JaxProcessSharder().shard_data(list(range(8)), sharding) == list(range(8))
    with pytest.raises(ValueError, match=r"data\['ids'\] has shape \(8,\) \(rank 1\)"):
        JaxProcessSharder().shard_data(data, NamedSharding(mesh, P("data", "model")))
    with pytest.raises(ValueError, match=r"data has 6 rows .*multiple of 4"):
        JaxProcessSharder().shard_data(np.arange(6), sharding)


def test_bad_input_gets_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    mesh = Mesh(np.array(DEVICES), ("data",))
    sharding = NamedSharding(mesh, P("data"))
    with pytest.raises(TypeError, match=r"sharding must be a jax\.sharding\.Sharding"):
        RowLedger(P("data"), 8)  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=r"12 rows cannot be split into the 8 equal row blocks.*multiple of 8"
    ):
        RowLedger(sharding, 12)
    with pytest.raises(TypeError, match="num_rows must be an int"):
        RowLedger(sharding, 8.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"host_of has no host for device id\(s\) \[4, 5, 6, 7\]"):
        RowLedger(sharding, 8, host_of={d.id: 0 for d in DEVICES[:4]})
    with pytest.raises(TypeError, match="host_of must be a mapping"):
        RowLedger(sharding, 8, host_of=[0] * 8)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="8 devices cannot be split into 3 hosts"):
        pretend_hosts(3)
    with pytest.raises(ValueError, match="row must be in"):
        RowLedger(sharding, 8).hosts_of_row(8)
    monkeypatch.setattr(jax, "devices", lambda *args: DEVICES[:4])
    data = np.arange(8)
    for make in (
        lambda: RowLedger(sharding, 8),
        lambda: JaxProcessSharder().shard_data(data, sharding),
    ):
        with pytest.raises(
            MeshError, match=r"uses 4 device\(s\) that jax.devices\('cpu'\) does not list"
        ):
            make()
    np.testing.assert_array_equal(data, np.arange(8))


@pytest.mark.stress
def test_plan_a_pod_of_1024_hosts_on_4096_simulated_devices() -> None:
    """What each host of a 1024-host pod of 4 chips reads, worked out on one machine."""
    script = textwrap.dedent(
        """
        import jax
        jax.config.update("jax_num_cpu_devices", 4096)
        import numpy as np
        from jax.sharding import NamedSharding, PartitionSpec as P
        from datarax.sharding import RowLedger, pretend_hosts

        mesh = jax.make_mesh((1024, 4), ("data", "model"))
        hosts = pretend_hosts(1024)
        ledger = RowLedger(NamedSharding(mesh, P("data")), 8192, host_of=hosts)
        expected = {}
        for (data, _), device in np.ndenumerate(mesh.devices):
            expected.setdefault(hosts[device.id], set()).update(range(8 * data, 8 * data + 8))
        assert len(ledger.hosts) == 1024
        for host in ledger.hosts:
            assert ledger.rows_of_host(host).tolist() == sorted(expected[host]), host
        print("ok", ledger.row_count(0), ledger.row_count(1023), flush=True)
        import os
        os._exit(0)  # tearing down 4,096 devices takes far longer than the plan

        """
    )
    done = run_own_devices(script, timeout=240)
    assert done.stdout.split() == ["ok", "8", "8"]
