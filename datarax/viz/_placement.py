"""`plot_sharding`: a matplotlib picture of which device and host holds which block."""

from __future__ import annotations

import dataclasses
import io
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle
from matplotlib.text import Text

from . import _blocks, _sizes
from ._palette import (
    COPIES_HATCH,
    SEVERAL_HOSTS,
    device_colors,
    hatch_color,
    host_color,
    host_hatch,
    text_color,
)
from ._sizes import GAP_H_IN, GAP_W_IN, LEFT_IN
from ._tables import format_spec

_HOST_LINE_PT = 3.0


@dataclasses.dataclass(frozen=True)
class ShardingPlot:
    """A placement figure, and for every device the rectangle and label it is drawn in.

    Rectangles are in array coordinates: x runs over dimension 1 (over dimension 0
    for a 1-D array, drawn as one row) and y over dimension 0, row 0 at the top.
    Devices that hold the same block share one rectangle. `panels` gives, for each
    panel (axes), the block of dimensions 2+ it shows (empty below rank 3);
    `to_scale` says whether rows and columns are drawn at the same scale, and `ndim`
    is the array's rank.
    """

    figure: Figure
    patches: Mapping[int, Rectangle]
    labels: Mapping[int, Text]
    panels: Mapping[Axes, _blocks.Bounds]
    to_scale: bool
    ndim: int

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.figure.savefig(buffer, format="png")
        return buffer.getvalue()

    def region(self, device_id: int) -> tuple[tuple[int, int], tuple[int, int]]:
        """``((row_start, row_stop), (col_start, col_stop))`` drawn for `device_id`."""
        patch = self.patches[device_id]
        x, y = patch.get_xy()
        rows = (round(y), round(y + patch.get_height()))
        cols = (round(x), round(x + patch.get_width()))
        return rows, cols

    def block(self, device_id: int) -> _blocks.Bounds:
        """``(start, stop)`` per dimension of the block drawn for `device_id`.

        Dimensions 0 and 1 come from its rectangle, dimensions 2+ from its panel.
        """
        rows, cols = self.region(device_id)
        if self.ndim == 1:
            return (cols,)
        axes = self.patches[device_id].axes
        return (rows, cols, *next(t for ax, t in self.panels.items() if ax is axes))


def plot_sharding(
    array: Any,
    *,
    color_by: str = "device",
    dim_names: tuple[str, ...] | None = None,
    title: str | None = None,
    width: float = 8.0,
) -> ShardingPlot:
    """Draws which device, on which host, holds which block of `array`.

    What is drawn:

    - Dimension 0 runs down, dimension 1 across (a 1-D array is one row), rows and
      columns at the same scale; where that would not read (e.g. 4096 x 3) the title
      says the axes are not to scale. Ticks sit on block edges.
    - Rank 3 and up: one panel per block of the dimensions 2+ that the sharding
      splits, titled with that block (``dim 2 [0:4]``); the title says which are
      split and which are whole.
    - Each rectangle is one block, labelled with its devices as
      `jax.debug.visualize_array_sharding` names them (``CPU 0,1``). A block held by
      several devices (copies) is hatched and says how many copies there are.
    - Colours come from `device_colors` (one per device, in id order; a block takes
      its first device's) or, with ``color_by="process"``, `host_colors`. With several
      hosts each block is outlined in its host's colour and names its host; a
      legend explains hosts and hatching.

    Labels shrink or turn to stay inside their block, so 64 devices stay legible.

    Args:
        array: a sharded `jax.Array`, or a `jax.ShapeDtypeStruct` with a sharding.
        color_by: ``"device"`` (a colour per block) or ``"process"`` (per host).
        dim_names: a name for each dimension, e.g. ``("image", "pixel row")`` for a
            2-D array; by default ``dim 0 (rows)`` and ``dim 1 (columns)`` for a 2-D
            array, ``dim 0 (down)``, ``dim 1 (across)``, ``dim 2``... for rank 3 and up.
        title: the figure title; by default the shape, dtype, spec and devices.
        width: the figure's width in inches (2 to 40). A drawing to scale may need
            less; many blocks in a row may need more.

    Returns:
        A `ShardingPlot`: the figure plus each device's rectangle and label.

    Raises:
        TypeError: `array` has no sharding, or `title` / `dim_names` are not strings.
        ValueError: `array` is 0-d or has a dimension of size 0, or `color_by`,
            `width` or the number of `dim_names` is not allowed.

    Example:
        >>> mesh = jax.make_mesh((len(jax.devices()),), ("data",))
        >>> x = jax.device_put(np.zeros((16, 4)), NamedSharding(mesh, P("data")))
        >>> plot = plot_sharding(x, dim_names=("example", "feature"))
        >>> plot.region(1), plot.to_scale
        (((2, 4), (0, 4)), True)
    """
    sharding = _blocks.sharding_of(array)
    shape = tuple(int(n) for n in array.shape)
    names = _blocks.check_arguments(shape, color_by, width, dim_names, title)
    found = _blocks.layout(shape, sharding)
    grid = _sizes.grid(len(found.panels), found.rows / found.cols)
    panel_w, panel_h, to_scale = _sizes.panel_inches(found, grid, float(width))
    platform = _blocks.platform_of(found.devices)
    several_hosts = len(found.hosts) > 1
    heading = title or (
        f"{shape} {np.dtype(array.dtype).name} {format_spec(sharding)} on "
        f"{len(found.devices)} {platform} device{'s' * (len(found.devices) > 1)}"
        + (f", {len(found.hosts)} hosts" if several_hosts else "")
    )
    extent = "the array" if len(shape) == 2 else "each panel"
    notes = [] if to_scale else [f"axes not to scale ({extent} is {found.rows} x {found.cols})"]
    notes += [note] if (note := _blocks.trailing_note(found, names)) else []
    legend = _legend_entries(found, color_by)
    figure = _figure(found, grid, (panel_w, panel_h), [heading, *notes], legend)
    axes_of = _panel_axes(figure, found, grid, names, to_scale, (panel_w, panel_h))
    figure.canvas.draw()  # fixes the axes' size, so labels can be fitted in points
    ranks = {device: number for number, device in enumerate(found.devices)}
    colors = device_colors(len(found.devices))
    patches, labels = {}, {}
    for panel, ax in zip(found.panels, axes_of, strict=True):
        for block in panel.blocks:
            host = block.hosts[0] if len(block.hosts) == 1 else None
            outline = SEVERAL_HOSTS if host is None else host_color(host)
            fill = outline if color_by == "process" else colors[ranks[block.devices[0]]]
            mark = host_hatch(host) if color_by == "process" and host is not None else ""
            rect, label = _draw_block(ax, block, fill, mark)
            if several_hosts and color_by == "device":
                _outline(ax, block, outline)
            options = _blocks.label_options(block, platform, several_hosts)
            width_pt, height_pt = _size_in_points(ax, block)
            text, size, rotation = _sizes.fit_label(options, width_pt, height_pt)
            label.update({"text": text, "fontsize": size, "rotation": rotation})
            for device in block.devices:
                patches[device.id], labels[device.id] = rect, label
    panels = {ax: panel.trailing for panel, ax in zip(found.panels, axes_of, strict=True)}
    return ShardingPlot(figure, patches, labels, panels, to_scale, len(shape))


def _figure(
    found: _blocks.Layout,
    grid: tuple[int, int],
    panel: tuple[float, float],
    heading: list[str],
    legend: list[Patch],
) -> Figure:
    """An empty figure sized for the panels, with its title and legend in place."""
    grid_rows, grid_cols = grid
    text_in = 0.085 * max(len(line) for line in heading) + 0.4
    fig_w = LEFT_IN + grid_cols * panel[0] + (grid_cols - 1) * GAP_W_IN + 0.3
    fig_w = max(fig_w, text_in)
    entries_in = sorted((0.6 + 0.068 * len(str(p.get_label())) for p in legend), reverse=True)
    legend_cols = max([1] + [n for n in range(1, len(legend) + 1) if sum(entries_in[:n]) <= fig_w])
    legend_rows = math.ceil(len(legend) / legend_cols)
    fig_h = 0.3 + 0.18 * len(heading) + 0.6 + 0.25 * legend_rows
    fig_h += grid_rows * (panel[1] + 0.18 * len(found.split_trailing))
    fig_h += (grid_rows - 1) * GAP_H_IN
    fewer = "panels, or a narrower width or shorter title"
    figure = Figure(figsize=_blocks.check_size(fig_w, fig_h, fewer), layout="constrained")
    FigureCanvasAgg(figure)  # renders off-screen; no pyplot state is touched
    figure.suptitle("\n".join(heading), fontsize=10)
    if legend:
        figure.legend(
            handles=legend,
            loc="outside lower center",
            ncols=legend_cols,
            frameon=False,
            fontsize=9,
        )
    return figure


def _panel_axes(
    figure: Figure,
    found: _blocks.Layout,
    grid: tuple[int, int],
    names: tuple[str, ...] | None,
    to_scale: bool,
    panel_in: tuple[float, float],
) -> list[Axes]:
    """One axes per panel, with limits, block-edge ticks and axis names."""
    grid_rows, grid_cols = grid
    rank = len(found.shape)
    axes: list[Axes] = []
    for number, panel in enumerate(found.panels):
        ax = figure.add_subplot(grid_rows, grid_cols, number + 1)
        ax.set(xlim=(0, found.cols), ylim=(found.rows, 0))
        if to_scale and rank > 1:
            ax.set_aspect("equal")
        else:  # keeps the drawn shape, however wide the title makes the figure
            ax.set_box_aspect(panel_in[1] / panel_in[0])
        col_edges = {edge for block in panel.blocks for edge in block.cols}
        digits = len(str(found.cols))
        ax.set_xticks(_sizes.ticks(col_edges, panel_in[0], 0.09 * digits + 0.2))
        below = number + grid_cols < len(found.panels)
        ax.tick_params(labelbottom=not below)
        if not below:
            ax.set_xlabel(_blocks.dim_label(1 if rank > 1 else 0, names, rank))
        if rank == 1:
            ax.set_yticks([])
        else:
            row_edges = {edge for block in panel.blocks for edge in block.rows}
            ax.set_yticks(_sizes.ticks(row_edges, panel_in[1], 0.25))
            first = number % grid_cols == 0
            ax.tick_params(labelleft=first)
            if first:
                ax.set_ylabel(_blocks.dim_label(0, names, rank))
        if found.split_trailing:
            ax.set_title(_blocks.panel_title(panel, found.split_trailing, names), fontsize=9)
        axes.append(ax)
    return axes


def _draw_block(
    ax: Axes, block: _blocks.Block, fill: str, mark: str = ""
) -> tuple[Rectangle, Text]:
    """The block's rectangle (hatched when it has copies, plus a host's `mark`) and its
    empty label."""
    (row0, row1), (col0, col1) = block.rows, block.cols
    copies = len(block.devices) > 1
    rect = Rectangle((col0, row0), col1 - col0, row1 - row0, facecolor=fill, edgecolor="white")
    hatch = (COPIES_HATCH if copies else "") + mark
    rect.set(linewidth=1.5, hatch=hatch or None)
    if hatch and hasattr(rect, "set_hatchcolor"):  # matplotlib >= 3.10
        rect.set_hatchcolor(hatch_color(fill))
    ax.add_patch(rect)
    behind = {"facecolor": fill, "edgecolor": "none", "pad": 2.0} if copies else None
    label = ax.text((col0 + col1) / 2, (row0 + row1) / 2, "", ha="center", va="center")
    label.update({"color": text_color(fill), "bbox": behind})
    return rect, label


def _outline(ax: Axes, block: _blocks.Block, color: str) -> None:
    """A frame in the host's colour just inside the block, clear of its neighbours'."""
    inset_px = _HOST_LINE_PT * ax.figure.dpi / 72
    corners = ax.transData.transform(
        [(block.cols[0], block.rows[0]), (block.cols[1], block.rows[1])]
    )
    low, high = corners.min(axis=0) + inset_px, corners.max(axis=0) - inset_px
    (x0, y0), (x1, y1) = ax.transData.inverted().transform([low, np.maximum(high, low)])
    frame = Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, edgecolor=color)
    frame.set(linewidth=_HOST_LINE_PT, joinstyle="miter")
    ax.add_patch(frame)


def _size_in_points(ax: Axes, block: _blocks.Block) -> tuple[float, float]:
    corners = ax.transData.transform(
        [(block.cols[0], block.rows[0]), (block.cols[1], block.rows[1])]
    )
    width_px, height_px = np.abs(corners[1] - corners[0])
    dpi = ax.figure.dpi
    return float(width_px) * 72 / dpi, float(height_px) * 72 / dpi


def _legend_entries(found: _blocks.Layout, color_by: str) -> list[Patch]:
    """Hosts (when there are several, or colours mean hosts) and hatching, explained."""
    entries = []
    blocks = [block for panel in found.panels for block in panel.blocks]
    if len(found.hosts) > 1 or color_by == "process":
        spans = any(len(block.hosts) > 1 for block in blocks)
        hosts = [(f"host {h}", host_color(h), host_hatch(h)) for h in found.hosts]
        for name, color, mark in hosts + [("several hosts", SEVERAL_HOSTS, "")] * spans:
            if color_by == "process":
                entries.append(
                    Patch(facecolor=color, edgecolor="white", hatch=mark or None, label=name)
                )
            else:
                entries.append(Patch(facecolor="white", edgecolor=color, linewidth=2, label=name))
    if any(len(block.devices) > 1 for block in blocks):
        hatched = Patch(facecolor="white", edgecolor="#555555", hatch=COPIES_HATCH)
        hatched.set_label("hatched: copies of one block")
        entries.append(hatched)
    return entries
