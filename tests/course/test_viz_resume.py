"""plot_reads: every cell shows its row, in the colour of the host that read it."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.colors import to_hex

from datarax import viz
from datarax_course import figures


def _segments() -> dict[str, dict[int, tuple[list[int], list[int]]]]:
    order = np.random.default_rng(1).permutation(48).tolist()
    batch = {step: order[8 * (step - 1) : 8 * step] for step in range(1, 5)}
    return {
        "2 hosts": {step: (batch[step], [p // 4 for p in range(8)]) for step in (1, 2, 3)},
        "4 hosts": {step: (batch[step], [p // 2 for p in range(8)]) for step in (3, 4)},
    }


def test_cells_show_the_rows_in_their_hosts_colours() -> None:
    segments = _segments()
    plot = figures.plot_reads(segments, title="reads")
    assert plot.columns == (
        ("2 hosts", 1),
        ("2 hosts", 2),
        ("2 hosts", 3),
        ("4 hosts", 3),
        ("4 hosts", 4),
    )
    colours = viz.host_colors(4)
    for label, steps in segments.items():
        for step, (rows, hosts) in steps.items():
            column = plot.column(label, step)
            for position, (row, host) in enumerate(zip(rows, hosts, strict=True)):
                assert plot.rows[(column, position)] == row
                cell = plot.cells[(column, position)]
                assert to_hex(cell.get_facecolor()) == colours[host].lower()
                assert cell.get_y() == position  # position 0 at the top (y grows down)
    # the same step before and after: the same rows, read by other hosts
    before, after = plot.column("2 hosts", 3), plot.column("4 hosts", 3)
    assert [plot.rows[(before, p)] for p in range(8)] == [plot.rows[(after, p)] for p in range(8)]
    assert plot._repr_png_().startswith(b"\x89PNG")


def test_columns_run_left_to_right_with_a_gap_between_segments() -> None:
    plot = figures.plot_reads(_segments())
    lefts = [plot.cells[(column, 0)].get_x() for column in range(len(plot.columns))]
    steps = np.diff(lefts)
    assert np.all(steps > 0)
    np.testing.assert_allclose(steps[[0, 1, 3]], 1.0)  # one column per step
    assert steps[2] > 1.5  # the gap between the segments


@pytest.mark.parametrize(
    ("segments", "error", "words"),
    [
        ({}, TypeError, "non-empty mapping"),
        ({"a": {1: ([1, 2], [0])}}, ValueError, "one host per row"),
        ({"a": {1: ([1, 2], [0, 1]), 2: ([1, 2, 3], [0, 1, 1])}}, ValueError, "same batch size"),
        ({"a": {1: ([1], [-1])}}, ValueError, "hosts[0] must be an int >= 0, got -1"),
        ({"a": {}}, TypeError, "segments['a']"),
    ],
)
def test_bad_segments_are_refused(segments: object, error: type, words: str) -> None:
    with pytest.raises(error, match=words.replace("[", r"\[").replace("]", r"\]")):
        figures.plot_reads(segments)  # type: ignore[arg-type]


def test_epoch_ends_draw_one_box_per_batch_in_its_state() -> None:
    panels = {
        "no agreement": {0: ["done"] * 5, 1: ["done"] * 5 + ["waiting"]},
        "stop": {0: ["done"] * 5, 1: ["done"] * 5 + ["not run"]},
    }
    plot = figures.plot_epoch_ends(panels, title="epoch ends")
    colours = viz.host_colors(2)
    for label, hosts in panels.items():
        for host, states in hosts.items():
            boxes = plot.boxes[(label, host)]
            assert plot.states[(label, host)] == tuple(states)
            assert len(boxes) == len(states)
            assert [box.get_x() for box in boxes] == list(range(len(states)))
            for box, state in zip(boxes, states, strict=True):
                done = to_hex(box.get_facecolor()) == colours[host].lower()
                assert done == (state == "done")
                assert bool(box.get_hatch()) == (state == "waiting")
    lines = [plot.boxes[key][0].get_y() for key in plot.boxes]
    assert lines == sorted(lines) and len(set(lines)) == 4  # one line per host, in order
    assert plot._repr_png_().startswith(b"\x89PNG")


@pytest.mark.parametrize(
    ("panels", "error"),
    [({}, TypeError), ({"a": {}}, TypeError), ({"a": {0: ["ran"]}}, ValueError)],
)
def test_bad_epoch_ends_are_refused(panels: object, error: type) -> None:
    with pytest.raises(error):
        figures.plot_epoch_ends(panels)  # type: ignore[arg-type]
