"""plot_ledger: every bar is a device's (or host's) rows, hatched exactly where hosts share them."""

from __future__ import annotations

import textwrap

import jax
import numpy as np
import pytest
from _support.processes import run_own_devices
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from matplotlib.colors import to_hex

from datarax import viz
from datarax.sharding import RowLedger, pretend_hosts

DEVICES = jax.devices()


def _span(rows: range) -> tuple[int, int]:
    return rows.start, rows.stop


def check_plot_matches_ledger(plot: viz.LedgerPlot, ledger: RowLedger) -> None:
    """Bars are the ledger's blocks in their host's colour, hatched iff several hosts hold them."""
    shared = ledger.shared_blocks()
    for key, bars in plot.bars.items():
        if plot.per == "device":
            host = ledger.host_of_device(key)
            expected = [_span(ledger.rows_of_device(key))]
        else:
            host = key
            expected = sorted(
                {_span(ledger.rows_of_device(d)) for d in ledger.devices_of_host(key)}
            )
        assert plot.spans(key) == expected, key
        assert plot.hatched(key) == [span for span in expected if span in shared], key
        assert {to_hex(bar.get_facecolor()) for bar in bars} == {
            viz.host_colors(host + 1)[host].lower()
        }
    drawn = [bar for bars in plot.bars.values() for bar in bars]
    lanes = sorted({bar.get_y() for bar in drawn})
    hosts_down = [  # rows of bars run host by host, top to bottom
        key if plot.per == "host" else ledger.host_of_device(key)
        for y in lanes
        for key, bars in plot.bars.items()
        if bars[0].get_y() == y
    ]
    assert hosts_down == sorted(hosts_down)
    low, high = plot.holders[0][0][0], plot.holders[-1][0][1]
    for (start, stop), held in plot.holders:
        assert start < stop
        for row in (start, stop - 1):
            assert ledger.hosts_of_row(row) == held
    if len(plot.hosts) == plot.hosts_total:
        assert (low, high) == (0, ledger.num_rows)
    legend = [t.get_text() for legend in plot.figure.legends for t in legend.get_texts()]
    assert ("held by several hosts" in legend) == any(len(held) > 1 for _, held in plot.holders)


def _ledger(devices, names, spec, rows, hosts) -> RowLedger:
    mesh = Mesh(np.array(devices), names)
    return RowLedger(NamedSharding(mesh, spec), rows, host_of=hosts)


def test_1d_mesh_on_two_hosts() -> None:
    ledger = _ledger(DEVICES, ("data",), P("data"), 32, pretend_hosts(2))
    plot = viz.plot_ledger(ledger)
    check_plot_matches_ledger(plot, ledger)
    assert plot.per == "device" and plot.hosts == (0, 1) and plot.note is None
    assert plot.spans(DEVICES[5].id) == [(20, 24)]
    assert plot.holders == (((0, 16), (0,)), ((16, 32), (1,)))
    assert not any(plot.hatched(key) for key in plot.bars)
    assert "32 rows, P('data') on mesh {'data': 8}, 8 devices and 2 hosts" in (
        plot.figure.get_suptitle().replace("\n", " ")
    )
    assert plot._repr_png_().startswith(b"\x89PNG")


def test_model_axis_across_two_hosts_is_hatched_everywhere() -> None:
    # Column h of the mesh is host h's devices: each 'model' pair spans both hosts.
    devices = np.array(DEVICES).reshape(2, 4).T
    ledger = _ledger(devices, ("data", "model"), P("data"), 16, pretend_hosts(2))
    plot = viz.plot_ledger(ledger)
    check_plot_matches_ledger(plot, ledger)
    assert set(ledger.shared_blocks()) == {(0, 4), (4, 8), (8, 12), (12, 16)}
    assert all(plot.hatched(key) == plot.spans(key) for key in plot.bars)
    assert plot.holders == (((0, 16), (0, 1)),)


def test_model_axis_inside_each_host_shares_nothing() -> None:
    ledger = _ledger(np.array(DEVICES).reshape(4, 2), ("data", "model"), P("data"), 16, None)
    plot = viz.plot_ledger(ledger)
    check_plot_matches_ledger(plot, ledger)
    assert plot.hosts == (0,) and plot.holders == (((0, 16), (0,)),)
    assert plot.spans(DEVICES[0].id) == plot.spans(DEVICES[1].id) == [(0, 4)]  # copies, one host


def test_interleaved_device_order() -> None:
    # The mesh alternates hosts: host 0 holds rows 0-1, 4-5, 8-9, 12-13.
    order = [DEVICES[i] for i in (0, 4, 1, 5, 2, 6, 3, 7)]
    ledger = _ledger(order, ("data",), P("data"), 16, pretend_hosts(2))
    plot = viz.plot_ledger(ledger)
    check_plot_matches_ledger(plot, ledger)
    assert [span for span, _ in plot.holders] == [(i, i + 2) for i in range(0, 16, 2)]
    assert [held for _, held in plot.holders] == [(0,), (1,)] * 4
    assert plot.spans(DEVICES[4].id) == [(2, 4)]


def test_replicated_spec_is_shared_by_every_host() -> None:
    ledger = _ledger(np.array(DEVICES).reshape(4, 2), ("data", "model"), P(), 16, pretend_hosts(4))
    plot = viz.plot_ledger(ledger)
    check_plot_matches_ledger(plot, ledger)
    assert ledger.shared_blocks() == {(0, 16): (0, 1, 2, 3)}
    assert all(plot.hatched(key) == [(0, 16)] for key in plot.bars)
    assert plot.holders == (((0, 16), (0, 1, 2, 3)),)


def test_more_devices_than_bars_draws_hosts_then_the_first_hosts() -> None:
    ledger = _ledger(DEVICES, ("data",), P("data"), 64, pretend_hosts(4))
    per_host = viz.plot_ledger(ledger, max_bars=4)
    check_plot_matches_ledger(per_host, ledger)
    assert per_host.per == "host" and per_host.hosts == (0, 1, 2, 3) and per_host.note is None
    assert per_host.spans(1) == [(16, 24), (24, 32)]  # one bar per device block of host 1
    eight = _ledger(DEVICES, ("data",), P("data"), 64, pretend_hosts(8))
    first = viz.plot_ledger(eight, max_bars=3)
    check_plot_matches_ledger(first, eight)
    assert first.hosts == (0, 1, 2) and first.hosts_total == 8
    assert first.note == "showing the first 3 of 8 hosts, on rows 0-23 of 64"
    assert first.note in first.figure.get_suptitle()
    ax = first.bars[0][0].axes
    assert ax.get_xlim() == (0, 24)


_POD = textwrap.dedent(
    """
    import jax
    jax.config.update("jax_num_cpu_devices", 4096)
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from datarax import viz
    from datarax.sharding import RowLedger, pretend_hosts
    from tests.viz.test_viz_ledger import check_plot_matches_ledger
    devices = np.array(jax.devices())
    cases = [  # 1024 hosts of 4 devices; then 'model' pairs of hosts; then 64 devices
        (Mesh(devices, ("data",)), P("data"), 8192, 1024),
        (Mesh(devices.reshape(512, 8), ("data", "model")), P("data"), 1024, 1024),
        (Mesh(devices[:64].reshape(16, 4), ("data", "model")), P("data"), 64, 16),
    ]
    for mesh, spec, rows, hosts in cases:
        host_of = pretend_hosts(hosts, mesh.devices.flat)
        ledger = RowLedger(NamedSharding(mesh, spec), rows, host_of=host_of)
        plot = viz.plot_ledger(ledger)
        check_plot_matches_ledger(plot, ledger)
        print(plot.per, len(plot.hosts), plot.hosts_total, plot.note, bool(ledger.shared_blocks()))
    """
)


@pytest.mark.stress
def test_a_pod_of_1024_hosts_is_drawn_per_host() -> None:
    done = run_own_devices(_POD, timeout=300)
    assert done.stdout.splitlines() == [
        "host 32 1024 showing the first 32 of 1024 hosts, on rows 0-255 of 8192 False",
        "host 32 1024 showing the first 32 of 1024 hosts, on rows 0-31 of 1024 True",
        "host 16 16 None False",
    ]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"width": 1}, ValueError, r"width must be a number of inches in \[2, 40\], got 1"),
        ({"max_bars": 0}, ValueError, r"max_bars must be an int in \[1, 256\], got 0"),
        ({"title": 3}, TypeError, "title must be a string or None, got int"),
    ],
)
def test_bad_arguments_are_named(kwargs, error, match) -> None:
    ledger = _ledger(DEVICES, ("data",), P("data"), 16, None)
    with pytest.raises(error, match=match):
        viz.plot_ledger(ledger, **kwargs)


def test_what_is_not_a_ledger_or_has_no_rows_is_refused() -> None:
    mesh = Mesh(np.array(DEVICES), ("data",))
    with pytest.raises(TypeError, match=r"draws a datarax.sharding.RowLedger, got NamedSharding"):
        viz.plot_ledger(NamedSharding(mesh, P("data")))
    with pytest.raises(ValueError, match="has 0 rows"):
        viz.plot_ledger(RowLedger(NamedSharding(mesh, P("data")), 0))
