"""Where a sharded array lives: a matplotlib picture and a table of a sharded pytree.

`plot_sharding` draws which device (and which host) holds which block of an array;
`summarize` and `summary_table` list, per leaf of a pytree, the global shape, the
PartitionSpec, each device's shard shape and bytes, and how many copies exist. Both
only read the arrays' shardings; no data is moved or copied.
"""

from __future__ import annotations

import dataclasses
import io
import math
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, Sharding
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.text import Text
from rich.table import Table

Bounds = tuple[tuple[int, int], ...]
_PALETTE = [colormaps["tab20"](i) for i in [*range(0, 20, 2), *range(1, 20, 2)]]
_MAX_FONT, _GOOD_FONT, _CHAR_EM, _LINE_EM = 11.0, 7.0, 0.68, 1.3
_MIN_BLOCK_IN = 0.2


@dataclasses.dataclass(frozen=True)
class ShardingPlot:
    """A placement figure, and for every device the rectangle and label it is drawn in.

    Rectangles are in array coordinates: x runs over dimension 1 (over dimension 0
    for a 1-D array, drawn as one row) and y over dimension 0, row 0 at the top.
    Devices that hold the same leading two-dimensional block share one rectangle.
    """

    figure: Figure
    patches: Mapping[int, Rectangle]
    labels: Mapping[int, Text]

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


def _bounds(index: tuple[slice, ...], shape: tuple[int, ...]) -> Bounds:
    return tuple(s.indices(n)[:2] for s, n in zip(index, shape, strict=True))


def _sharding_of(array: Any) -> Sharding:
    sharding = getattr(array, "sharding", None)
    if not isinstance(sharding, Sharding):
        raise TypeError(
            f"Expected a jax.Array (or jax.ShapeDtypeStruct) with a sharding, got "
            f"{type(array).__name__}. Place it on devices first, e.g. with "
            "ArraySharder().shard(x, NamedSharding(mesh, P('data')))."
        )
    return sharding


def _compact(numbers: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"``."""
    runs: list[list[int]] = []
    for number in sorted(set(numbers)):
        if runs and number == runs[-1][-1] + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def format_spec(sharding: Sharding) -> str:
    """A short text form of a leaf's placement, e.g. ``P('data', None)``.

    Example:
        >>> mesh = jax.make_mesh((len(jax.devices()),), ("data",))
        >>> format_spec(NamedSharding(mesh, P("data", None)))
        "P('data', None)"
    """
    if isinstance(sharding, NamedSharding):
        return "P(" + ", ".join(repr(entry) for entry in sharding.spec) + ")"
    return type(sharding).__name__


def _fit_label(lines: list[str], width_pt: float, height_pt: float) -> tuple[str, float, float]:
    """Label text, font size and rotation for a width x height box (in points).

    Tries the full label first, then shorter forms, each level and turned by 90
    degrees; takes the first that reads comfortably, else the largest that fits.
    """
    options = [lines, [" ".join(lines)], lines[:2], [" ".join(lines[:2])], lines[:1]]
    fitted = []
    for option in options:
        longest, count = max(len(line) for line in option), len(option)
        for rotation, along, across in ((0.0, width_pt, height_pt), (90.0, height_pt, width_pt)):
            size = min(_MAX_FONT, along / (longest * _CHAR_EM), across / (count * _LINE_EM))
            fitted.append(("\n".join(option), 0.85 * size, rotation))
    comfortable = [fit for fit in fitted if fit[1] >= _GOOD_FONT]
    return comfortable[0] if comfortable else max(fitted, key=lambda fit: fit[1])


def plot_sharding(
    array: Any, *, color_by: str = "device", title: str | None = None, width: float = 8.0
) -> ShardingPlot:
    """Draws which device, on which host, holds which part of `array`.

    Works for any rank: a 1-D array is drawn as one row, higher ranks by their
    leading two dimensions (a note says when dimensions 2+ are split as well). Each
    block is labelled with its devices and hosts; blocks held by several devices
    are hatched and say how many copies there are. Labels shrink or turn to stay
    inside their block, so 64 devices stay legible.

    Args:
        array: a sharded `jax.Array`, or a `jax.ShapeDtypeStruct` with a sharding.
        color_by: ``"device"`` (a colour per block of devices) or ``"process"``
            (a colour per host).
        title: the figure title; by default the shape, dtype and spec.
        width: the figure width in inches.

    Returns:
        A `ShardingPlot`: the figure plus each device's rectangle and label.

    Raises:
        TypeError: `array` has no sharding.
        ValueError: `array` is 0-d, or `color_by` or `width` is not allowed.

    Example:
        >>> mesh = jax.make_mesh((len(jax.devices()),), ("data",))
        >>> x = jax.device_put(np.zeros((16, 4)), NamedSharding(mesh, P("data")))
        >>> plot_sharding(x).region(1)
        ((2, 4), (0, 4))
    """
    sharding = _sharding_of(array)
    shape = tuple(array.shape)
    if not shape:
        raise ValueError("A 0-d array has no blocks to draw; it lives whole on every device.")
    if color_by not in ("device", "process"):
        raise ValueError(f"color_by must be 'device' or 'process', got {color_by!r}.")
    if not (isinstance(width, (int, float)) and 1 <= width <= 40):
        raise ValueError(f"width must be a number of inches in [1, 40], got {width!r}.")
    placed = {d: _bounds(i, shape) for d, i in sharding.devices_indices_map(shape).items()}
    leading = (lambda b: ((0, 1), b[0])) if len(shape) == 1 else (lambda b: (b[0], b[1]))
    groups: dict[tuple[tuple[int, int], tuple[int, int]], list[Any]] = {}
    for device in sorted(placed, key=lambda d: d.id):
        groups.setdefault(leading(placed[device]), []).append(device)
    rows, cols = (1, shape[0]) if len(shape) == 1 else shape[:2]
    height = 1.4 if len(shape) == 1 else min(max(width * rows / cols, 2.0), 0.5 * width)
    # At least _MIN_BLOCK_IN inches per block, so a line of text fits across each one.
    width = max(width, _MIN_BLOCK_IN * len({span[1] for span in groups}))
    height = max(height, _MIN_BLOCK_IN * len({span[0] for span in groups}))
    figure = Figure(figsize=(width, height + 0.8), layout="constrained")
    FigureCanvasAgg(figure)  # renders off-screen; no pyplot state is touched
    ax = figure.add_subplot()
    ax.set(xlim=(0, cols), ylim=(rows, 0), xlabel=f"dimension {int(len(shape) > 1)}")
    if len(shape) == 1:
        ax.set(yticks=[])
    else:
        ax.set(ylabel="dimension 0")
    hosts = sorted({d.process_index for d in placed})
    ax.set_title(
        title
        or f"{shape} {np.dtype(array.dtype).name} {format_spec(sharding)} on {len(placed)} "
        f"devices, {len(hosts)} host{'s' * (len(hosts) != 1)}",
        fontsize=10,
    )
    figure.canvas.draw()  # fixes the axes' size, so labels can be fitted in points
    box = ax.get_window_extent()
    pt_x, pt_y = box.width * 72 / figure.dpi / cols, box.height * 72 / figure.dpi / rows
    patches, labels = {}, {}
    for number, ((row_span, col_span), devices) in enumerate(groups.items()):
        key = devices[0].process_index if color_by == "process" else number
        color = _PALETTE[key % len(_PALETTE)]
        parts = len({placed[d] for d in devices})
        copies = len(devices) // parts
        (row0, row1), (col0, col1) = row_span, col_span
        hatch = "//" if copies > 1 else None
        rect = Rectangle((col0, row0), col1 - col0, row1 - row0, fc=color, ec="white", hatch=hatch)
        ax.add_patch(rect)
        host_ids = _compact([d.process_index for d in devices])
        lines = [
            f"dev {_compact([d.id for d in devices])}",
            f"host{'s' * (',' in host_ids or '-' in host_ids)} {host_ids}",
        ]
        if parts > 1:
            lines.append(f"dims 2+ in {parts} parts")
        if copies > 1:
            lines.append(f"{copies} copies")
        text, size, rotation = _fit_label(lines, (col1 - col0) * pt_x, (row1 - row0) * pt_y)
        ink = "black" if np.dot(to_rgb(color), (0.299, 0.587, 0.114)) > 0.5 else "white"
        behind = {"facecolor": color, "edgecolor": "none", "pad": 2.0} if copies > 1 else None
        label = ax.text((col0 + col1) / 2, (row0 + row1) / 2, text, ha="center", va="center")
        label.update({"fontsize": size, "rotation": rotation, "color": ink, "bbox": behind})
        for device in devices:
            patches[device.id], labels[device.id] = rect, label
    return ShardingPlot(figure, patches, labels)


@dataclasses.dataclass(frozen=True)
class LeafSummary:
    """One leaf's placement. Device fields are None for host (numpy) leaves."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    spec: str
    shard_shape: tuple[int, ...] | None
    bytes_per_device: int | None
    replicas: int | None
    num_devices: int | None


def leaf_summaries(tree: Any, root: str = "batch") -> list[LeafSummary]:
    """Per leaf of `tree`: global shape, spec, shard shape, bytes per device, replicas.

    Example:
        >>> mesh = jax.make_mesh((len(jax.devices()),), ("data",))
        >>> x = jax.device_put(np.zeros((16, 3), np.float32), NamedSharding(mesh, P("data")))
        >>> leaf_summaries({"x": x})[0].bytes_per_device == 16 // len(jax.devices()) * 3 * 4
        True
    """
    summaries = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        name = root + jax.tree_util.keystr(tuple(path))
        shape = tuple(np.shape(leaf))
        dtype = np.dtype(leaf.dtype if hasattr(leaf, "dtype") else np.result_type(leaf)).name
        sharding = getattr(leaf, "sharding", None)
        if not isinstance(sharding, Sharding):
            summaries.append(LeafSummary(name, shape, dtype, "host", None, None, None, None))
            continue
        shard_shape = tuple(sharding.shard_shape(shape))
        indices = sharding.devices_indices_map(shape)
        unique = {_bounds(index, shape) for index in indices.values()}
        copies = len(indices) // len(unique)
        nbytes = math.prod(shard_shape) * np.dtype(dtype).itemsize
        spec = format_spec(sharding)
        summaries.append(
            LeafSummary(name, shape, dtype, spec, shard_shape, nbytes, copies, len(indices))
        )
    return summaries


_COLUMNS = [
    "leaf",
    "global shape",
    "dtype",
    "spec",
    "shard shape",
    "bytes/device",
    "copies",
    "devices",
]


def _rows(tree: Any, root: str) -> tuple[list[tuple[str, ...]], int]:
    """The table cells (strings) per leaf, and the bytes each device holds in total."""
    rows, total = [], 0
    for leaf in leaf_summaries(tree, root):
        total += leaf.bytes_per_device or 0
        placement = ["-"] * 4
        if leaf.bytes_per_device is not None:
            placement = [str(leaf.shard_shape), f"{leaf.bytes_per_device:,}"]
            placement += [str(leaf.replicas), str(leaf.num_devices)]
        rows.append((leaf.name, str(leaf.shape), leaf.dtype, leaf.spec, *placement))
    return rows, total


def summarize(tree: Any, root: str = "batch") -> str:
    """A text table of where every leaf of `tree` lives, one line per leaf.

    "copies" says how many devices hold each block (1: split with no copies; equal
    to "devices": fully replicated). The last line adds up each device's bytes.

    Example:
        >>> mesh = jax.make_mesh((len(jax.devices()),), ("data",))
        >>> x = jax.device_put(np.zeros((16,), np.int32), NamedSharding(mesh, P("data")))
        >>> print(summarize({"label": x}))  # doctest: +ELLIPSIS
        leaf            global shape  dtype  spec       shard shape  bytes/device  copies  devices
        batch['label']  (16,)         int32  P('data')  (2,)         8             1       8
        each device holds 8 bytes
    """
    rows, total = _rows(tree, root)
    widths = [max(len(r[i]) for r in [_COLUMNS, *rows]) for i in range(len(_COLUMNS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    header = "  ".join(c.ljust(w) for c, w in zip(_COLUMNS, widths, strict=True)).rstrip()
    return "\n".join([header, *lines, f"each device holds {total:,} bytes"])


def summary_table(tree: Any, root: str = "batch") -> Table:
    """The `summarize` table as a `rich.table.Table` (print it with ``rich.print``).

    Example:
        >>> mesh = jax.make_mesh((len(jax.devices()),), ("data",))
        >>> x = jax.device_put(np.zeros((16,), np.int32), NamedSharding(mesh, P("data")))
        >>> summary_table({"label": x}).row_count
        1
    """
    rows, total = _rows(tree, root)
    table = Table(title="Where each leaf lives", caption=f"each device holds {total:,} bytes")
    for number, column in enumerate(_COLUMNS):
        table.add_column(column, justify="right" if number >= 5 else "left")
    for row in rows:
        table.add_row(*row)
    return table
