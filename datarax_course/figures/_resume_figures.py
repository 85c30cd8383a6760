"""`plot_reads`: step by step, which rows made each global batch and which host read each.

The picture behind resuming a job on another number of hosts: the global batches stay
the same (the same rows, in the same order), while the hosts that read them change.
"""

from __future__ import annotations

import dataclasses
import io
import math
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from datarax.viz import hatch_color, host_color, host_hatch, text_color
from datarax_course._checks import check_int, check_mapping, check_str, is_sequence

from . import _frame

StepReads = tuple[Sequence[int], Sequence[int]]  # (source rows in batch order, host of each)
_CELL_W_IN, _CELL_H_IN, _GAP_COLUMNS = 0.48, 0.2, 0.6
_LEFT_IN, _LINE_IN, _LEGEND_ENTRY_IN = 1.0, 0.18, 1.35
MAX_CELLS = 4096  # each cell is a labelled box: a few ms to draw


@dataclasses.dataclass(frozen=True)
class ReadsPlot:
    """A reads-by-step figure and what it shows.

    `columns` names each column of cells, left to right, as ``(segment, step)``;
    `cells[(column, position)]` is the cell of that position of the global batch,
    filled in the colour of the host that read it, and `rows[(column, position)]` the
    source row written in it.
    """

    figure: Figure
    columns: tuple[tuple[str, Any], ...]
    cells: Mapping[tuple[int, int], Rectangle]
    rows: Mapping[tuple[int, int], int]

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.figure.savefig(buffer, format="png")
        return buffer.getvalue()

    def column(self, segment: str, step: Any) -> int:
        """The number of the column drawn for `step` of `segment`."""
        return self.columns.index((segment, step))


def _title_inches(title: str | None) -> float:
    """How wide a figure must be for `title` at 10 pt on one line."""
    return 0.0 if title is None else 0.085 * len(title) + 0.4


def _ints(name: str, values: Any) -> list[int]:
    """`values` as a list of ints >= 0 (rows, or the hosts that read them)."""
    if (
        isinstance(values, (str, bytes))
        or not isinstance(values, Sequence | np.ndarray)
        or (isinstance(values, np.ndarray) and values.ndim == 0)
    ):
        raise TypeError(
            f"{name} must be a list of ints, got {type(values).__name__}: {values!r:.100}."
        )
    _check_cells(len(values), name)
    return [check_int(f"{name}[{n}]", value, minimum=0) for n, value in enumerate(values)]


def _check_cells(count: int, what: str) -> None:
    if count > MAX_CELLS:
        raise ValueError(
            f"{what} make {count} cells; this picture draws at most {MAX_CELLS} (each one a "
            "labelled box), so draw fewer steps, rows or batches."
        )


def _checked(segments: Any) -> list[tuple[str, list[tuple[Any, list[int], list[int]]]]]:
    check_mapping("segments", segments, "{label: {step: (rows, hosts)}}")
    checked, size, cells = [], None, 0
    for label, steps in segments.items():
        if not isinstance(label, str) or not isinstance(steps, Mapping) or not steps:
            raise TypeError(
                f"segments[{label!r}] must map each step to (rows, hosts), under a str label."
            )
        columns = []
        for step, pair in steps.items():
            where = f"segments[{label!r}][{step!r:.40}]"
            if not is_sequence(pair) or len(pair) != 2:
                raise TypeError(f"{where} must be a pair (rows, hosts), got {pair!r:.100}.")
            rows, hosts = _ints(f"{where} rows", pair[0]), _ints(f"{where} hosts", pair[1])
            if len(rows) != len(hosts) or not rows or size not in (None, len(rows)):
                raise ValueError(
                    f"segments[{label!r}][{step!r}] has {len(rows)} rows and {len(hosts)} "
                    f"hosts; every step needs one host per row, and the same batch size "
                    f"({size if size is not None else len(rows)} rows) as the others."
                )
            size, cells = len(rows), cells + len(rows)
            _check_cells(cells, "segments")
            columns.append((step, rows, hosts))
        checked.append((label, columns))
    return checked


def plot_reads(
    segments: Mapping[str, Mapping[Any, StepReads]], *, title: str | None = None
) -> ReadsPlot:
    """Draws, for each step, the global batch's rows and the host that read each one.

    One column of cells per step, one cell per position of the global batch (position
    0 at the top). A cell shows the source row at that position and is filled in the
    colour of the host that read it (`host_colors`). Segments, such as the steps
    before and after a restore, stand side by side under their labels.

    Args:
        segments: ``{label: {step: (rows, hosts)}}`` in drawing order: for each step,
            the source rows of its global batch in batch order, and for each of them
            the host that read it.
        title: the figure title; by default none.

    Returns:
        A `ReadsPlot`: the figure, each cell and the row written in it.

    Raises:
        TypeError: `segments` is not a non-empty mapping of labels to steps, a step
            is not a pair of lists of ints, or `title` is not a string.
        ValueError: a step's rows and hosts differ in length, steps differ in batch
            size, a row or host is negative, or there are more than 4096 cells
            (`MAX_CELLS`).

    Example:
        >>> plot = plot_reads({"2 hosts": {1: ([5, 2, 7, 0], [0, 0, 1, 1])},
        ...                    "4 hosts": {2: ([3, 6, 1, 4], [0, 1, 2, 3])}})
        >>> plot.rows[(plot.column("4 hosts", 2), 1)], len(plot.cells)
        (6, 8)
    """
    checked = _checked(segments)
    _frame.check_title(title)
    size = len(checked[0][1][0][1])
    hosts_seen = sorted({h for _, columns in checked for _, _, hosts in columns for h in hosts})
    total = sum(len(columns) for _, columns in checked)
    span = total + _GAP_COLUMNS * (len(checked) - 1)
    width = max(span * _CELL_W_IN + _LEFT_IN + 0.3, 4.0, _title_inches(title))
    headings = [  # each segment's label, wrapped to the width of its columns
        textwrap.wrap(label, max(int(len(columns) * _CELL_W_IN / 0.075), 8))
        for label, columns in checked
    ]
    lines = max(len(heading) for heading in headings)
    legend_columns = max(1, min(len(hosts_seen), int((width - 0.2) / _LEGEND_ENTRY_IN)))
    legend_lines = math.ceil(len(hosts_seen) / legend_columns)
    top_in = 0.35 + lines * _LINE_IN + 0.3 * (title is not None)
    bottom_in = 0.15 + legend_lines * 0.25
    height = size * _CELL_H_IN + top_in + bottom_in
    fewer = "steps or positions of the global batch, or a shorter title"
    figure = Figure(figsize=_frame.check_size(width, height, fewer))
    FigureCanvasAgg(figure)  # renders off-screen; no pyplot state is touched
    grid_w, grid_h = span * _CELL_W_IN, size * _CELL_H_IN
    ax = figure.add_axes((_LEFT_IN / width, bottom_in / height, grid_w / width, grid_h / height))
    ax.set(xlim=(0, span), ylim=(size, 0))
    ax.spines[:].set_visible(False)
    ax.set_yticks([p + 0.5 for p in range(size)], [str(p) for p in range(size)], fontsize=7)
    ax.set_ylabel("position in the global batch", fontsize=8)
    ax.tick_params(length=0)
    cells: dict[tuple[int, int], Rectangle] = {}
    rows_at: dict[tuple[int, int], int] = {}
    names: list[tuple[str, Any]] = []
    ticks, x = [], 0.0
    for number, (label, columns) in enumerate(checked):
        if number:
            ax.axvline(x - _GAP_COLUMNS / 2, color="black", linewidth=1, linestyle="--")
        above = 0.3 / _CELL_H_IN  # clear of the step labels
        heading = ax.text(x + len(columns) / 2, -above, "\n".join(headings[number]))
        heading.set(ha="center", va="bottom", fontsize=9, clip_on=False)
        for step, rows, hosts in columns:
            column = len(names)
            names.append((label, step))
            ticks.append((x + 0.5, f"step {step}"))
            for position, (row, host) in enumerate(zip(rows, hosts, strict=True)):
                fill = host_color(host)
                cell = Rectangle((x, position), 1, 1, facecolor=fill, edgecolor="white")
                if host_hatch(host):  # hosts 4 and up: the colour of host - 4, and a mark
                    cell.set(hatch=host_hatch(host), edgecolor=hatch_color(fill))
                ax.add_patch(cell)
                ax.text(x + 0.5, position + 0.5, str(row), ha="center", va="center")
                ax.texts[-1].set(fontsize=7, color=text_color(fill))
                cells[(column, position)] = cell
                rows_at[(column, position)] = row
            x += 1
        x += _GAP_COLUMNS
    ax.set_xticks([t for t, _ in ticks], [name for _, name in ticks], fontsize=7)
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    handles = [
        Patch(facecolor=host_color(h), hatch=host_hatch(h) or None, label=f"host {h} read it")
        for h in hosts_seen
    ]
    # matplotlib fills a legend column by column; this order reads row by row
    handles = [
        handles[i] for c in range(legend_columns) for i in range(c, len(handles), legend_columns)
    ]
    figure.legend(
        handles=handles,
        loc="lower center",
        ncols=legend_columns,
        frameon=False,
        fontsize=8,
        bbox_to_anchor=(0.5, 0.0),
    )
    if title is not None:
        figure.suptitle(title, fontsize=10, y=1 - 0.08 / height, va="top")
    return ReadsPlot(figure, tuple(names), cells, rows_at)


BATCH_STATES = ("done", "waiting", "not run")
_WAITING_FILL, _WAITING_HATCH, _NOT_RUN_EDGE = "#BBBBBB", "..", "#888888"


@dataclasses.dataclass(frozen=True)
class EpochEndPlot:
    """An epoch-end figure: `boxes[(panel, host)]` holds one box per batch, in order,
    and `states` the state each box was drawn for."""

    figure: Figure
    boxes: Mapping[tuple[str, int], tuple[Rectangle, ...]]
    states: Mapping[tuple[str, int], tuple[str, ...]]

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.figure.savefig(buffer, format="png")
        return buffer.getvalue()


def plot_epoch_ends(
    panels: Mapping[str, Mapping[int, Sequence[str]]], *, title: str | None = None
) -> EpochEndPlot:
    """Draws each host's batches of one epoch: run, waiting for other hosts, or not run.

    One line of boxes per host, one box per batch the host's pipeline has: filled in
    the host's colour when the batch ran (``"done"``), grey and hatched when the host
    started it and waited for hosts that never came (``"waiting"``), empty when the
    host did not run it (``"not run"``). Panels, one per policy, stack top to bottom.

    Args:
        panels: ``{label: {host: states}}``, each state one of ``"done"``,
            ``"waiting"`` and ``"not run"``, in batch order.
        title: the figure title; by default none.

    Returns:
        An `EpochEndPlot`: the figure and every box.

    Raises:
        TypeError: `panels` is not a non-empty mapping of labels to hosts, a host is
            not an int, a state not a string or `title` not a string.
        ValueError: a state is not one of the three, a host is negative, or there are
            more than 4096 boxes (`MAX_CELLS`).

    Example:
        >>> plot = plot_epoch_ends({"no agreement": {0: ["done"] * 2,
        ...                                          1: ["done"] * 2 + ["waiting"]}})
        >>> plot.states[("no agreement", 1)], len(plot.boxes[("no agreement", 0)])
        (('done', 'done', 'waiting'), 2)
    """
    check_mapping("panels", panels, "{label: {host: states}}")
    _frame.check_title(title)
    lines: list[tuple[str, int, tuple[str, ...]]] = []
    cells = 0
    for label, hosts in panels.items():
        check_mapping(f"panels[{label!r}]", hosts, "{host: states of its batches}")
        for host, states in hosts.items():
            where = f"panels[{label!r}][{host!r:.40}]"
            host = check_int(f"a host of panels[{label!r}]", host, minimum=0)
            if not is_sequence(states):
                raise TypeError(f"{where} must be a list of states, got {states!r:.100}.")
            cells += len(states)
            _check_cells(cells, "panels")
            states = tuple(
                str(check_str(f"{where}[{n}]", state, choices=BATCH_STATES))
                for n, state in enumerate(states)
            )
            lines.append((str(label), host, states))
    longest = max(len(states) for _, _, states in lines)
    gaps = len(panels) - 1
    height = 0.35 * (len(lines) + 0.8 * gaps) + 0.6 + 0.3 * len(panels) + 0.3 * (title is not None)
    width = max(0.55 * longest + 1.3, 4.0, _title_inches(title))
    figure = Figure(figsize=_frame.check_size(width, height, "batches, hosts or panels"))
    FigureCanvasAgg(figure)  # renders off-screen; no pyplot state is touched
    top_in = 0.35 + 0.3 * (title is not None)
    ax = figure.add_axes(
        (0.9 / width, 0.45 / height, (width - 1.1) / width, 1 - (0.45 + top_in) / height)
    )
    boxes: dict[tuple[str, int], tuple[Rectangle, ...]] = {}
    ticks: list[tuple[float, str]] = []
    y, previous = 0.0, None
    for label, host, states in lines:
        if label != previous:
            y += 0.8 if previous is not None else 0.0
            ax.text(0, y - 0.05, label, ha="left", va="bottom", fontsize=9, weight="bold")
            previous, y = label, y + 0.3
        drawn = []
        for number, state in enumerate(states):
            fill = {"done": host_color(host), "waiting": _WAITING_FILL, "not run": "white"}[state]
            edge = _NOT_RUN_EDGE if state == "not run" else "white"
            box = Rectangle((number, y), 0.92, 0.8, facecolor=fill, edgecolor=edge)
            box.set(hatch=_WAITING_HATCH if state == "waiting" else None, linewidth=1.0)
            ax.add_patch(box)
            text = {"done": str(number + 1), "waiting": "waits", "not run": "not run"}[state]
            ax.text(number + 0.46, y + 0.4, text, ha="center", va="center", fontsize=7)
            ax.texts[-1].set(color=text_color(fill) if state == "done" else "black")
            drawn.append(box)
        boxes[(label, host)] = tuple(drawn)
        ticks.append((y + 0.4, f"host {host}"))
        y += 1.0
    ax.set(xlim=(0, max(longest, 1)), ylim=(y, 0))  # an epoch of no batches: one empty slot
    ax.set_yticks([t for t, _ in ticks], [name for _, name in ticks], fontsize=8)
    ax.set_xticks([n + 0.46 for n in range(longest)], [str(n + 1) for n in range(longest)])
    ax.set_xlabel("batch of the epoch", fontsize=8)
    ax.tick_params(length=0, labelsize=8)
    ax.spines[:].set_visible(False)
    if title is not None:
        figure.suptitle(title, fontsize=10, y=1 - 0.08 / height, va="top")
    states_of = {(label, host): states for label, host, states in lines}
    return EpochEndPlot(figure, boxes, states_of)
