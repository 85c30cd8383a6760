"""Pictures of batches on their way to the devices: who holds or reads each row.

`plot_rows` draws strips along the rows of a batch, each row filled in the colour of
its owner (a device or a host); `plot_row_grid` lays the rows of a small source out
as a grid, one panel per case (an epoch, a way of shuffling). `device_of_rows` reads,
from a sharded array, which device holds each row. Colours follow the rules of
`datarax.viz`: devices in id order from `device_colors`, hosts from `host_colors`.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from datarax.viz import device_colors, hatch_color, host_color, host_hatch, text_color
from datarax_course._checks import check_int, check_mapping, check_not_deleted, check_str

from . import _frame

Run = tuple[int, int, int]  # (start, stop, owner): rows [start, stop) held by owner
NOBODY = -1
MAX_GRID_CELLS = 4096  # plot_row_grid draws and numbers every row: ~2 ms a cell
MAX_RUNS = 4096  # plot_rows draws a rectangle per run: ~2 ms a run
_NOBODY_FILL = "#FFFFFF"
_NOBODY_EDGE = "#888888"


@dataclasses.dataclass(frozen=True)
class RowsPlot:
    """A figure of row strips and what it shows.

    `runs[strip]` lists the ``(start, stop, owner)`` runs drawn for each strip, left
    to right (owner ``-1``: nobody); `patches[strip]` the rectangles in that order.
    """

    figure: Figure
    runs: Mapping[str, tuple[Run, ...]]
    patches: Mapping[str, tuple[Rectangle, ...]]

    def _repr_png_(self) -> bytes:
        return png(self.figure)


def png(figure: Figure) -> bytes:
    """`figure` as PNG bytes, trimmed to what is drawn."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight")
    return buffer.getvalue()


def device_of_rows(array: Any) -> np.ndarray:
    """For each row (index along dimension 0) of `array`, the id of a device that holds it.

    Reads the shards this process can address; where several devices hold a row
    (replicas), the lowest id is given. Rows no addressable device holds get -1.

    Raises:
        TypeError: `array` is not a `jax.Array`, or was deleted.
        ValueError: `array` is 0-d, so it has no rows.

    Example:
        >>> mesh = jax.make_mesh((len(jax.devices()),), ("data",))
        >>> x = jax.device_put(np.arange(16), NamedSharding(mesh, P("data")))
        >>> device_of_rows(x).tolist()[:4]
        [0, 0, 1, 1]
    """
    if not isinstance(array, jax.Array):
        raise TypeError(
            f"device_of_rows reads a jax.Array placed on devices, got {type(array).__name__}; "
            "place it first, e.g. jax.device_put(x, NamedSharding(mesh, P('data')))."
        )
    check_not_deleted("array", array)
    if array.ndim == 0:
        raise ValueError(
            "device_of_rows: the array is 0-d, so it has no rows (dimension 0) to read; "
            "every device of its sharding holds it whole (array.sharding.device_set)."
        )
    rows = int(array.shape[0])
    owner = np.full(rows, np.iinfo(np.int64).max, dtype=np.int64)
    for shard in array.addressable_shards:
        start, stop, _ = shard.index[0].indices(rows) if shard.index else (0, rows, 1)
        owner[start:stop] = np.minimum(owner[start:stop], shard.device.id)
    owner[owner == np.iinfo(np.int64).max] = NOBODY
    return owner


def _runs(owners: np.ndarray) -> tuple[Run, ...]:
    edges = np.flatnonzero(np.diff(owners)) + 1
    starts = [0, *edges.tolist()]
    stops = [*edges.tolist(), len(owners)]
    return tuple((a, b, int(owners[a])) for a, b in zip(starts, stops, strict=True))


def _device_fills(owners: Sequence[np.ndarray]) -> dict[int, str]:
    """Device id -> its colour: the ids present take `device_colors` in id order."""
    ids = np.unique(np.concatenate([np.asarray(values) for values in owners] or [[NOBODY]]))
    ids = ids[ids != NOBODY].tolist()
    return dict(zip(ids, device_colors(len(ids)), strict=True))


def _fill(owner: int, color_by: str, device_fills: Mapping[int, str]) -> str:
    if owner == NOBODY:
        return _NOBODY_FILL
    if color_by == "device":
        return device_fills[owner]
    return host_color(owner)


def _hatch(owner: int, color_by: str) -> str | None:
    """A host's mark (`host_hatch`: none for hosts 0-3); devices and nobody get none."""
    if owner == NOBODY or color_by != "host":
        return None
    return host_hatch(owner) or None


def _check_color_by(color_by: Any) -> None:
    check_str("color_by", color_by, choices=("device", "host"))


def _checked_owners(strips: Any, name: str = "strips") -> dict[str, np.ndarray]:
    check_mapping(name, strips, "{label: owner of each row}")
    checked = {}
    for label, owners in strips.items():
        try:
            values = np.asarray(owners)
        except (TypeError, ValueError):  # ragged nesting numpy cannot make one array of
            values = np.asarray(None)
        if values.ndim != 1 or not values.size or not np.issubdtype(values.dtype, np.integer):
            raise ValueError(
                f"strip {label!r:.100} must be a non-empty 1-D sequence of ints (the owner "
                f"of each row, -1 for nobody), got {type(owners).__name__}: {owners!r:.100}."
            )
        if (values < NOBODY).any() or (values > np.iinfo(np.int64).max).any():
            raise ValueError(
                f"strip {label!r:.100} has owners outside [-1, 2**63 - 1]: "
                f"{sorted(set(values.tolist()))[:4]}."
            )
        checked[str(label)] = values.astype(np.int64, copy=False)
    return checked


def _mark(rect: Rectangle, hatch: str | None, fill: str) -> None:
    """Hatches `rect` with a host's mark, drawn in a colour that shows on `fill`."""
    if hatch:
        rect.set(hatch=hatch)
        if hasattr(rect, "set_hatchcolor"):  # matplotlib >= 3.10; before, the edge colour
            rect.set_hatchcolor(hatch_color(fill))


def _names_of(names: Any, label: str) -> Mapping[int, str]:
    """The texts for strip `label`'s owners: its own mapping, or the one for every strip."""
    if names is None:
        return {}
    per_strip = isinstance(names, Mapping) and all(isinstance(key, str) for key in names)
    texts = names.get(label, {}) if per_strip and names else names
    if not isinstance(texts, Mapping) or not all(isinstance(t, str) for t in texts.values()):
        raise TypeError(
            "names must be a mapping {owner: text}, or {strip label: {owner: text}}, of "
            f"strings, got {type(names).__name__}: {names!r:.100}."
        )
    return texts


def _legend(
    figure: Figure, owners: list[int], color_by: str, device_fills: Mapping[int, str]
) -> None:
    kind = "dev" if color_by == "device" else "host"
    handles = [
        Rectangle((0, 0), 1, 1, facecolor=_fill(o, color_by, device_fills), edgecolor=_NOBODY_EDGE)
        for o in owners
    ]
    for handle, owner in zip(handles, owners, strict=True):
        handle.set(hatch=_hatch(owner, color_by))
    labels = ["none" if o == NOBODY else f"{kind} {o}" for o in owners]
    figure.legend(handles, labels, loc="lower center", ncol=len(owners), frameon=False)


def plot_rows(
    strips: Mapping[str, Sequence[int] | np.ndarray],
    *,
    color_by: str | Mapping[str, str] = "device",
    names: Mapping[int, str] | Mapping[str, Mapping[int, str]] | None = None,
    title: str | None = None,
    xlabel: str = "row of the batch",
    width: float = 9.0,
) -> RowsPlot:
    """Draws one strip per entry of `strips`, each row filled in its owner's colour.

    Args:
        strips: label -> owner of each row: a device id (``color_by="device"``) or a
            host index (``"host"``); -1 marks a row nobody holds (drawn white, framed).
        color_by: ``"device"``: devices take `device_colors` in id order (as in
            `plot_sharding`); ``"host"``: host h takes ``host_colors(h + 1)[h]``; or a
            mapping strip label -> one of those, to colour each strip its own way.
        names: owner -> the text written in its runs, for every strip, or strip label
            -> such a mapping, for each strip its own; by default ``dev 3`` or
            ``host 1``, and ``none`` for -1. A run too narrow for its text is left blank.
        title: a title over the strips.
        xlabel: what the rows are.
        width: the figure's width in inches.

    A run is a stretch of rows with one owner, and each is one rectangle: the strips
    may hold any number of rows but at most 4096 runs in all (`MAX_RUNS`), and must
    fit in 40 inches (86 strips always do); past either the picture is refused before
    anything is drawn. To draw more, pass a slice of the rows.

    Returns:
        A `RowsPlot`: the figure and, per strip, the runs and rectangles drawn.

    Raises:
        TypeError: `strips` is not a non-empty mapping, or `names`, `title`,
            `xlabel`, `width` or `color_by` is of the wrong type.
        ValueError: a strip is not a 1-D sequence of ints >= -1, `width` is outside
            [2, 40] inches, `color_by` is not allowed (or misses a strip), or the
            strips have more than 4096 runs or would be taller than 40 inches.

    Example:
        >>> plot = plot_rows({"host": [0, 0, 1, 1, -1], "device": [0, 1, 2, 3, 3]},
        ...                  color_by={"host": "host", "device": "device"})
        >>> plot.runs["host"]
        ((0, 2, 0), (2, 4, 1), (4, 5, -1))
    """
    owners = _checked_owners(strips)
    check_str("xlabel", xlabel)
    _frame.check_title(title)
    width = _frame.check_width(width)
    if not isinstance(color_by, Mapping):
        _check_color_by(color_by)
    kinds = color_by if isinstance(color_by, Mapping) else {label: color_by for label in owners}
    for label in owners:
        if not isinstance(kinds, Mapping) or label not in kinds:
            raise ValueError(f"color_by has no entry for strip {label!r}.")
        _check_color_by(kinds[label])
    counts = {label: 1 + int(np.count_nonzero(np.diff(values))) for label, values in owners.items()}
    if sum(counts.values()) > MAX_RUNS:
        most = max(counts, key=counts.__getitem__)
        raise ValueError(
            f"plot_rows draws at most {MAX_RUNS} runs (stretches of rows with one owner, "
            f"each a rectangle), got {sum(counts.values())}: strip {most!r:.100} alone has "
            f"{counts[most]} in {len(owners[most])} rows. Pass a slice of the rows, e.g. "
            f"{{label: owners[:{MAX_RUNS // 4}]}}, or fewer strips."
        )
    height = 0.5 + 0.45 * len(owners) + 0.35 * bool(title)
    figure = Figure(figsize=_frame.check_size(width, height, "strips"))
    device_fills = _device_fills(
        [values for label, values in owners.items() if kinds[label] == "device"]
    )
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    longest = max(len(values) for values in owners.values())
    runs, patches = {}, {}
    for lane, (label, values) in enumerate(reversed(owners.items())):
        runs[label] = _runs(values)
        drawn = []
        default = "dev {}" if kinds[label] == "device" else "host {}"
        texts = _names_of(names, label)
        for start, stop, owner in runs[label]:
            fill = _fill(owner, kinds[label], device_fills)
            edge = _NOBODY_EDGE if owner == NOBODY else "white"
            wide_pt = (stop - start) / longest * width * 72
            rect = Rectangle(
                (start, lane + 0.06), stop - start, 0.88, facecolor=fill, edgecolor=edge
            )
            rect.set_linewidth(1.0 if wide_pt > 3 else 0.0)  # an edge would hide a thin run
            _mark(rect, _hatch(owner, kinds[label]), fill)
            ax.add_artist(rect)  # add_patch would also grow the limits, set below: 2x slower
            drawn.append(rect)
            text = texts.get(owner, "none" if owner == NOBODY else default.format(owner))
            if wide_pt > 5.2 * len(text) + 4:
                ink = "black" if owner == NOBODY else text_color(fill)
                ax.text((start + stop) / 2, lane + 0.5, text, ha="center", va="center",
                        fontsize=7.5, color=ink)  # fmt: skip
        patches[label] = tuple(drawn)
    labels = list(reversed(owners))
    ax.set(xlim=(0, longest), ylim=(0, len(owners)), xlabel=xlabel)
    ax.set_yticks([lane + 0.5 for lane in range(len(labels))], labels)
    ax.spines[["top", "right", "left"]].set_visible(False)
    ax.tick_params(axis="y", length=0)
    if title:
        ax.set_title(title, fontsize=10)
    figure.tight_layout()
    return RowsPlot(figure, {k: runs[k] for k in owners}, {k: patches[k] for k in owners})


def plot_row_grid(
    panels: Mapping[str, Sequence[int] | np.ndarray],
    *,
    columns: int,
    color_by: str = "host",
    title: str | None = None,
    width: float = 9.0,
) -> RowsPlot:
    """Draws the rows of a small source as a grid, one panel per entry of `panels`.

    Row r sits at line ``r // columns``, column ``r % columns``, numbered and filled
    in its owner's colour (see `plot_rows` for `color_by` and -1); a legend under the
    panels names the owners. Side by side, the panels show how ownership changes
    between cases, e.g. epochs.

    Returns:
        A `RowsPlot` whose runs are one per row: ``(r, r + 1, owner)``.

    Raises:
        TypeError, ValueError: as `plot_rows`; also when `columns` is not a positive
            int, the panels differ in length or hold more than 4096 rows in all
            (`MAX_GRID_CELLS`).

    Example:
        >>> plot = plot_row_grid({"epoch 0": [0, 1, 1, 0], "epoch 1": [1, 0, 0, 1]}, columns=2)
        >>> [owner for _, _, owner in plot.runs["epoch 1"]]
        [1, 0, 0, 1]
    """
    _check_color_by(color_by)
    owners = _checked_owners(panels, "panels")
    columns = check_int("columns", columns, maximum=MAX_GRID_CELLS)
    _frame.check_title(title)
    width = _frame.check_width(width)
    sizes = {len(values) for values in owners.values()}
    if len(sizes) > 1:
        raise ValueError(f"every panel must have the same number of rows, got {sorted(sizes)}.")
    rows = sizes.pop()
    if rows * len(owners) > MAX_GRID_CELLS:
        raise ValueError(
            f"plot_row_grid draws at most {MAX_GRID_CELLS} cells (each row a numbered "
            f"square), got {len(owners)} panels of {rows} rows; draw fewer rows, or use "
            "plot_rows, which draws runs of rows."
        )
    lines = -(-rows // columns)
    device_fills = _device_fills(list(owners.values()))
    count = len(owners)
    panel_w = width / count
    height = panel_w * lines / columns + 0.6 + 0.3 * bool(title)
    figure = Figure(figsize=_frame.check_size(width, height, "rows or more columns"))
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, count, squeeze=False)[0]
    runs, patches = {}, {}
    for ax, (label, values) in zip(axes, owners.items(), strict=True):
        drawn = []
        for row, owner in enumerate(values.tolist()):
            fill = _fill(owner, color_by, device_fills)
            x, y = row % columns, lines - 1 - row // columns
            rect = Rectangle((x, y), 1, 1, facecolor=fill, edgecolor="white", linewidth=1)
            _mark(rect, _hatch(owner, color_by), fill)
            ax.add_patch(rect)
            drawn.append(rect)
            size = max(4.0, min(8.0, panel_w * 72 / columns / 3))
            ink = "black" if owner == NOBODY else text_color(fill)
            ax.text(x + 0.5, y + 0.5, str(row), ha="center", va="center", fontsize=size, color=ink)
        ax.set(xlim=(0, columns), ylim=(0, lines), xticks=[], yticks=[], aspect="equal")
        ax.set_title(label, fontsize=9)
        runs[label] = tuple((r, r + 1, int(o)) for r, o in enumerate(values.tolist()))
        patches[label] = tuple(drawn)
    if title:
        figure.suptitle(title, fontsize=10)
    present = sorted({int(o) for values in owners.values() for o in values})
    figure.tight_layout(rect=(0, 0.3 / figure.get_figheight(), 1, 1), h_pad=0.2)
    _legend(figure, present, color_by, device_fills)
    return RowsPlot(figure, runs, patches)
