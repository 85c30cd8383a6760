"""datarax.viz row strips, row grids and timelines draw what they are given, in the
shared colours."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from matplotlib.colors import to_hex

from datarax import viz
from datarax_course import figures

PERMUTED = [0, 1, 2, 3, 6, 7, 4, 5]


def _fill(rect) -> str:
    return to_hex(rect.get_facecolor()).upper()


def test_device_of_rows_follows_the_mesh_not_the_device_order() -> None:
    mesh = Mesh(np.array(jax.devices())[PERMUTED], ("data",))
    x = jax.device_put(np.arange(16), NamedSharding(mesh, P("data")))
    owners = figures.device_of_rows(x)
    for device, index in x.sharding.devices_indices_map((16,)).items():
        assert set(owners[index[0]].tolist()) == {device.id}
    assert owners.tolist()[8:12] == [6, 6, 7, 7]


def test_device_of_rows_gives_the_lowest_id_of_replicas() -> None:
    mesh = Mesh(np.array(jax.devices())[::-1].reshape(4, 2), ("data", "model"))
    x = jax.device_put(np.zeros((8, 3)), NamedSharding(mesh, P("data")))
    assert figures.device_of_rows(x).tolist() == [6, 6, 4, 4, 2, 2, 0, 0]


def test_plot_rows_draws_runs_in_device_colours_by_id_rank() -> None:
    owners = [5, 5, 1, 1, 3, -1]
    plot = figures.plot_rows({"device": owners})
    assert plot.runs["device"] == ((0, 2, 5), (2, 4, 1), (4, 5, 3), (5, 6, -1))
    colors = viz.device_colors(3)  # ids 1, 3, 5 take the first three colours, in id order
    fills = [_fill(rect) for rect in plot.patches["device"]]
    assert fills == [colors[2], colors[0], colors[1], "#FFFFFF"]
    widths = [rect.get_width() for rect in plot.patches["device"]]
    assert widths == [2, 2, 1, 1]


def test_plot_rows_colours_each_strip_its_own_way() -> None:
    plot = figures.plot_rows(
        {"host": [0, 0, 1, 1], "device": [4, 4, 6, 6]},
        color_by={"host": "host", "device": "device"},
    )
    assert [_fill(r) for r in plot.patches["host"]] == viz.host_colors(2)
    assert [_fill(r) for r in plot.patches["device"]] == viz.device_colors(2)


def test_plot_rows_names_runs_per_strip() -> None:
    plot = figures.plot_rows(
        {"host": [0, 0, 1, 1], "device": [0, 0, 1, 1]},
        names={"host": {0: "first", 1: "second"}, "device": {0: "d0"}},
    )
    texts = [t.get_text() for t in plot.figure.axes[0].texts]
    assert sorted(texts) == ["d0", "dev 1", "first", "second"]


def test_plot_rows_host_colours_labels_and_strip_order() -> None:
    plot = figures.plot_rows(
        {"first": [0, 0, 1, 1], "second": [1, 1, 1, 0]},
        color_by="host",
        names={0: "h0", 1: "h1"},
        title="two strips",
    )
    ax = plot.figure.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["second", "first"]
    hosts = viz.host_colors(2)
    assert [_fill(r) for r in plot.patches["first"]] == [hosts[0], hosts[1]]
    assert {t.get_text() for t in ax.texts} == {"h0", "h1"}
    assert plot._repr_png_().startswith(b"\x89PNG")


@pytest.mark.parametrize(
    ("strips", "options", "error"),
    [
        ({}, {}, TypeError),
        ({"a": [0.5, 1.0]}, {}, ValueError),
        ({"a": [[0, 1]]}, {}, ValueError),
        ({"a": [0, -2]}, {}, ValueError),
        ({"a": [0, 1]}, {"color_by": "process"}, ValueError),
        ({"a": [0, 1], "b": [0, 1]}, {"color_by": {"a": "host"}}, ValueError),
    ],
)
def test_plot_rows_rejects_what_it_cannot_draw(strips, options, error) -> None:
    with pytest.raises(error):
        figures.plot_rows(strips, **options)


def test_plot_row_grid_places_row_r_at_line_and_column() -> None:
    plot = figures.plot_row_grid({"epoch 0": [0, 1, 1, 0, 1, -1], "epoch 1": [1] * 6}, columns=4)
    cells = plot.patches["epoch 0"]
    assert [cell.get_xy() for cell in cells[:5:4]] == [(0, 1), (0, 0)]  # 2 lines of 4
    assert _fill(cells[1]) == viz.host_colors(2)[1] and _fill(cells[5]) == "#FFFFFF"
    assert [owner for *_, owner in plot.runs["epoch 1"]] == [1] * 6
    legend = plot.figure.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == ["none", "host 0", "host 1"]
    with pytest.raises(ValueError, match="same number of rows"):
        figures.plot_row_grid({"a": [0, 1], "b": [0]}, columns=2)
    with pytest.raises(ValueError, match="columns"):
        figures.plot_row_grid({"a": [0, 1]}, columns=0)


def test_plot_timeline_bars_start_at_each_panels_first_event() -> None:
    events = {
        "serial": [("input", "0", 10.0, 10.015), ("step", "0", 10.015, 10.035)],
        "overlap": [("input", "0", 3.0, 3.015), ("input", "1", 3.015, 3.030)],
    }
    plot = figures.plot_timeline(events, lanes=("input", "step"))
    step = plot.bars["serial"]["step"][0]
    assert step.get_x() == pytest.approx(15.0) and step.get_width() == pytest.approx(20.0)
    second = plot.bars["overlap"]["input"][1]
    assert second.get_x() == pytest.approx(15.0)
    assert plot.bars["overlap"]["step"] == ()
    light, dark = _fill(plot.bars["serial"]["input"][0]), _fill(step)
    assert light[1:3] == light[3:5] == light[5:] and dark[1:3] == dark[3:5] == dark[5:]  # greys
    assert light > dark  # the first lane is the lighter one
    with pytest.raises(ValueError, match="lane"):
        figures.plot_timeline({"a": [("load", "0", 0.0, 1.0)]}, lanes=("input",))
    with pytest.raises(ValueError, match="ends before"):
        figures.plot_timeline({"a": [("input", "0", 1.0, 0.0)]}, lanes=("input",))
    with pytest.raises(ValueError, match="unit"):
        figures.plot_timeline(events, lanes=("input", "step"), unit="us")
