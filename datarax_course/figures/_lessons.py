"""Lesson figures about devices and hosts: meshes as device grids, and which rows each
host holds under several shardings."""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from jax.sharding import Mesh, Sharding
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from datarax.sharding import RowLedger
from datarax.viz import COPIES_HATCH, device_colors, hatch_color, host_color, host_hatch, text_color
from datarax_course._checks import check_int, check_mapping, check_str, check_strings

from . import _frame

_CELL_IN, _MAX_WIDTH_IN = 0.95, 10.5


class _Figure:
    """Shows as a PNG in a notebook, without touching pyplot's state."""

    figure: Figure

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.figure.savefig(buffer, format="png", pil_kwargs={"compress_level": 1})
        return buffer.getvalue()


@dataclasses.dataclass(frozen=True)
class DevicesPlot(_Figure):
    """A device-grid figure. `grids` holds, per panel, the device ids as drawn (row 0 at
    the top); `hosts` maps each device id to the host drawn; `addressable` lists the
    device ids drawn as addressable from `this_host` (all of them when it was None)."""

    figure: Figure
    grids: tuple[np.ndarray, ...]
    hosts: Mapping[int, int]
    addressable: frozenset[int]


def _host_map(devices: Sequence[Any], host_of: Mapping[int, int] | None) -> dict[int, int]:
    if host_of is None:
        return {d.id: int(d.process_index) for d in devices}
    if not isinstance(host_of, Mapping):
        raise TypeError(
            "host_of must be a mapping {device id: host} or None, got "
            f"{type(host_of).__name__}; e.g. datarax.sharding.pretend_hosts(num_hosts)."
        )
    missing = sorted(d.id for d in devices if d.id not in host_of)
    if missing:
        raise ValueError(
            f"host_of has no host for device id(s) {missing[:8]}; give every device drawn a "
            "host, e.g. with datarax.sharding.pretend_hosts(num_hosts)."
        )
    return {d.id: check_int(f"host_of[{d.id}]", host_of[d.id], minimum=0) for d in devices}


def _grid(layout: Any) -> tuple[np.ndarray, tuple[str, str]]:
    """Devices as a 2-D object array, and the names of its two directions."""
    if isinstance(layout, Mesh):
        devices = np.asarray(layout.devices)
        names = [f"mesh axis '{n}' ({s})" for n, s in layout.shape.items()]
    else:
        try:  # objects, so that ragged lists become lists numpy holds, refused below
            devices = np.asarray(layout if isinstance(layout, np.ndarray) else list(layout), object)
        except TypeError:  # not iterable: refused below
            devices = np.asarray(None, object)
        names = ["", "position in the list"] if devices.ndim == 1 else ["", ""]
    if not devices.size or not all(isinstance(getattr(d, "id", None), int) for d in devices.flat):
        raise TypeError(
            "plot_devices draws meshes and lists of devices (each with an int id, as "
            f"jax.devices() gives them), got {type(layout).__name__}: {layout!r:.100}."
        )
    if devices.ndim == 1:
        return devices.reshape(1, -1), ("", names[-1])
    if devices.ndim != 2:
        raise ValueError(
            f"plot_devices draws 1-D and 2-D layouts; this one has {devices.ndim} axes. "
            "Draw a 2-D view of it, e.g. mesh.devices.reshape(rows, -1)."
        )
    return devices, (names[0], names[1])


def _panels(shapes: list[tuple[int, ...]], legend: bool) -> tuple[Figure, list[Any]]:
    """A figure with one axes per grid shape, in rows of at most `_MAX_WIDTH_IN`.

    Axes are placed at fixed inches (a layout engine would cost as much as drawing):
    each panel gets room for its tick labels and axis names on the left and below, and
    for its title above; `legend` adds a strip at the bottom.
    """
    left, right, below, above = 0.75, 0.15, 0.65, 0.4
    widths = [cols * _CELL_IN + left + right for _, cols in shapes]
    rows: list[list[int]] = [[]]
    for number, width in enumerate(widths):
        if rows[-1] and sum(widths[n] for n in rows[-1]) + width > _MAX_WIDTH_IN:
            rows.append([])
        rows[-1].append(number)
    heights = [max(shapes[n][0] for n in row) * _CELL_IN + below + above for row in rows]
    strip = 0.55 if legend else 0.0
    fig_w = max(sum(widths[n] for n in row) for row in rows)
    fig_h = sum(heights) + strip
    figure = Figure(figsize=_frame.check_size(fig_w, fig_h, "layouts, or smaller ones"))
    FigureCanvasAgg(figure)
    axes: list[Any] = []
    top = fig_h
    for row, height in zip(rows, heights, strict=True):
        x = (fig_w - sum(widths[n] for n in row)) / 2
        for number in row:
            grid_h, grid_w = shapes[number][0] * _CELL_IN, shapes[number][1] * _CELL_IN
            y = top - above - grid_h
            box = ((x + left) / fig_w, y / fig_h, grid_w / fig_w, grid_h / fig_h)
            axes.append(figure.add_axes(box))
            x += widths[number]
        top -= height
    return figure, axes


def plot_devices(
    *layouts: Any,
    titles: Sequence[str] | None = None,
    host_of: Mapping[int, int] | None = None,
    this_host: int | None = None,
    color_by: str = "host",
) -> DevicesPlot:
    """Draws device layouts side by side: a list of devices, or a mesh's grid.

    Each square is one device, labelled with its platform and id (``CPU 6``, as
    `jax.debug.visualize_array_sharding` names it) and its host. A mesh is drawn as
    ``mesh.devices`` lays it out, so a mesh whose devices are not in id order shows
    it; its directions are named after its axes.

    Args:
        *layouts: one or more `jax.sharding.Mesh` (1-D or 2-D), sequences of devices
            or numpy arrays of devices, one panel each.
        titles: a title per panel.
        host_of: ``{device id: host}`` to let simulated devices play the hosts of a pod
            (see `datarax.sharding.pretend_hosts`); by default each device's
            ``process_index``.
        this_host: when given, devices of other hosts are drawn pale and dashed, as
            not addressable from this host.
        color_by: ``"host"`` (`host_colors`) or ``"device"`` (`device_colors`, one per
            device in id order, so a device keeps its colour in every panel).

    Returns:
        A `DevicesPlot`.

    Raises:
        TypeError: a layout is not a mesh or a sequence of devices, or `host_of`,
            `this_host`, `titles` or `color_by` is of the wrong type.
        ValueError: no layout, a layout with more than 2 axes, a device without a host
            in `host_of`, a negative host, or a `color_by` or number of `titles` not
            allowed.

    Example:
        >>> mesh = jax.make_mesh((4, 2), ("data", "model"))
        >>> plot = plot_devices(mesh.devices.ravel(), mesh, titles=["list", "mesh"])
        >>> [grid.shape for grid in plot.grids]
        [(1, 8), (4, 2)]
    """
    if not layouts:
        raise ValueError("plot_devices needs at least one layout (a mesh or a device list).")
    check_str("color_by", color_by, choices=("host", "device"))
    if titles is not None and len(check_strings("titles", titles)) != len(layouts):
        raise ValueError(f"got {len(titles)} titles for {len(layouts)} layouts.")
    if this_host is not None:
        this_host = check_int("this_host", this_host, minimum=0)
    grids = [_grid(layout) for layout in layouts]
    every = {d.id: d for grid, _ in grids for d in grid.ravel()}
    hosts = _host_map(list(every.values()), host_of)
    ranks = {device_id: rank for rank, device_id in enumerate(sorted(every))}
    fills = device_colors(len(ranks))
    figure, panels = _panels([grid.shape for grid, _ in grids], this_host is not None)
    addressable = set()
    for number, (ax, (grid, (row_name, col_name))) in enumerate(zip(panels, grids, strict=True)):
        for (row, col), device in np.ndenumerate(grid):
            host = hosts[device.id]
            reachable = this_host is None or host == this_host
            addressable |= {device.id} if reachable else set()
            fill = host_color(host) if color_by == "host" else fills[ranks[device.id]]
            edge = fill
            if not reachable:
                fill, edge = "white", host_color(host)
            cell = Rectangle((col + 0.04, row + 0.04), 0.92, 0.92, facecolor=fill)
            cell.set(edgecolor=edge, linewidth=2, linestyle="-" if reachable else "--")
            if color_by == "host" and reachable and host_hatch(host):  # hosts 4 and up
                cell.set(hatch=host_hatch(host), edgecolor=hatch_color(fill))
            ax.add_patch(cell)
            words = f"{str(device.platform).upper()} {device.id}\nhost {host}"
            ink = text_color(fill) if reachable else "#555555"
            ax.text(col + 0.5, row + 0.5, words, ha="center", va="center", color=ink, fontsize=9)
        ax.set(xlim=(0, grid.shape[1]), ylim=(grid.shape[0], 0), xlabel=col_name, ylabel=row_name)
        ax.set_xticks(np.arange(grid.shape[1]) + 0.5, range(grid.shape[1]))
        ax.set_yticks(np.arange(grid.shape[0]) + 0.5, range(grid.shape[0]))
        ax.set_aspect("equal")
        ax.tick_params(length=0)
        ax.set_frame_on(False)
        if titles is not None:
            ax.set_title(titles[number], fontsize=10)
    if this_host is not None:
        figure.legend(
            handles=[
                Patch(facecolor=host_color(this_host), label="addressable"),
                Patch(facecolor="white", edgecolor="#555555", linestyle="--", label="not"),
            ],
            loc="lower center",
            ncols=2,
            frameon=False,
            fontsize=9,
            title=f"from host {this_host}",
            title_fontsize=9,
        )
    ids = tuple(np.vectorize(lambda d: d.id, otypes=[int])(grid) for grid, _ in grids)
    return DevicesPlot(figure, ids, hosts, frozenset(addressable))


@dataclasses.dataclass(frozen=True)
class HostRowsPlot(_Figure):
    """A rows-per-host figure. `spans` maps ``(label, host)`` to the ``(start, stop)``
    row ranges drawn for that host under that sharding; `shared` maps each label to
    the row ranges more than one host holds (drawn hatched)."""

    figure: Figure
    spans: Mapping[tuple[str, int], tuple[tuple[int, int], ...]]
    shared: Mapping[str, tuple[tuple[int, int], ...]]


def plot_host_rows(
    shardings: Mapping[str, Sharding],
    num_rows: int,
    *,
    host_of: Mapping[int, int] | None = None,
    title: str | None = None,
) -> HostRowsPlot:
    """Draws, for each sharding, which of `num_rows` global rows each host holds.

    One bar per host and sharding, in the host's colour (`host_colors`), over the
    global rows; rows that several hosts hold (replicas that span hosts) are hatched.
    The right margin says how many rows each host holds, the per-host batch. It is
    read off a `datarax.sharding.RowLedger`, so it is JAX's own placement.

    Args:
        shardings: ``{label: sharding}``, drawn top to bottom.
        num_rows: the global batch size.
        host_of: ``{device id: host}``, e.g. `datarax.sharding.pretend_hosts`; by
            default each device's ``process_index``.
        title: the figure title.

    Returns:
        A `HostRowsPlot`.

    Raises:
        TypeError: `shardings` is not a non-empty mapping, `num_rows` not an int or
            `title` not a string.
        ValueError: `num_rows` is below 1, or a sharding cannot split it.

    Example:
        >>> from datarax.sharding import pretend_hosts
        >>> mesh = jax.make_mesh((8,), ("data",))
        >>> split = {"rows": NamedSharding(mesh, P("data")), "copies": NamedSharding(mesh, P())}
        >>> plot = plot_host_rows(split, 16, host_of=pretend_hosts(2))
        >>> plot.spans[("rows", 1)], plot.spans[("copies", 1)]
        (((8, 16),), ((0, 16),))
    """
    check_mapping("shardings", shardings, "{label: sharding}")
    check_int("num_rows", num_rows, maximum=2**53, meaning="the global batch size")
    _frame.check_title(title)
    ledgers = {label: RowLedger(s, num_rows, host_of=host_of) for label, s in shardings.items()}
    bars = [(label, host) for label, ledger in ledgers.items() for host in ledger.hosts]
    height_in = 0.45 * len(bars) + 0.35 * len(ledgers) + 1.3
    # fixed margins: a layout engine costs more
    figure = Figure(figsize=_frame.check_size(9.0, height_in, "shardings or hosts"))
    top = 1 - (0.5 if title else 0.2) / height_in
    figure.subplots_adjust(left=0.1, right=0.85, bottom=0.95 / height_in, top=top)
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    spans: dict[tuple[str, int], tuple[tuple[int, int], ...]] = {}
    shared: dict[str, tuple[tuple[int, int], ...]] = {}
    y, ticks, names = 0.0, [], []
    for label, ledger in ledgers.items():
        ax.text(0, y - 0.2, label, fontsize=10, fontweight="bold", va="bottom")
        y += 0.25
        shared[label] = tuple(ledger.shared_blocks())
        for host in ledger.hosts:
            color = host_color(host)
            blocks = tuple(ledger.blocks_of_host(host))
            spans[(label, host)] = blocks
            ax.add_patch(Rectangle((0, y), num_rows, 0.7, facecolor="#F2F2F2", edgecolor="none"))
            for start, stop in blocks:
                bar = Rectangle((start, y), stop - start, 0.7, facecolor=color, linewidth=0)
                bar.set(hatch=host_hatch(host) or None, edgecolor=hatch_color(color))
                ax.add_patch(bar)
                for a, b in shared[label]:
                    low, high = max(a, start), min(b, stop)
                    if low < high:
                        over = Rectangle((low, y), high - low, 0.7, fill=False, linewidth=0)
                        over.set(hatch=COPIES_HATCH, edgecolor=hatch_color(color))
                        ax.add_patch(over)
            count = ledger.row_count(host)
            ax.text(num_rows * 1.01, y + 0.35, f"{count} of {num_rows} rows", va="center")
            ticks.append(y + 0.35)
            names.append(f"host {host}")
            y += 0.9
        y += 0.55
    ax.set(xlim=(0, num_rows), ylim=(y - 0.3, -0.45), xlabel="global row")
    ax.set_yticks(ticks, names)
    ax.tick_params(axis="y", length=0)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    if any(shared.values()):
        hatched = Patch(facecolor="white", edgecolor="#555555", hatch=COPIES_HATCH)
        hatched.set_label("hatched: rows that several hosts hold")
        figure.legend(handles=[hatched], loc="lower center", frameon=False, fontsize=9)
    if title:
        figure.suptitle(title, fontsize=10)
    return HostRowsPlot(figure, spans, shared)
