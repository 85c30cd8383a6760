"""Lesson figures about padding: real and padding rows per device, read from a sharded
mask, and estimates of one number set against the exact value, with their values."""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from datarax.viz import COPIES_HATCH, DEVICE_PALETTE, HOST_PALETTE, hatch_color
from datarax_course._checks import (
    check_int,
    check_mapping,
    check_not_deleted,
    check_number,
    check_str,
)

from . import _frame

REAL, PADDING, EXACT = DEVICE_PALETTE[0], DEVICE_PALETTE[1], HOST_PALETTE[0]


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", pil_kwargs={"compress_level": 1})
    return buffer.getvalue()


@dataclasses.dataclass(frozen=True)
class MaskPlot:
    """A mask figure. `counts` maps each panel's title to ``{device ids: (real rows,
    padding rows)}``, one entry per block of rows (devices holding copies share one)."""

    figure: Figure
    counts: Mapping[str, Mapping[tuple[int, ...], tuple[int, int]]]

    def _repr_png_(self) -> bytes:
        return _png(self.figure)


def _blocks_of(mask: Any) -> list[tuple[tuple[int, ...], int, np.ndarray]]:
    """``(device ids, first global row, the shard's mask)`` per block, in row order."""
    if not isinstance(mask, jax.Array) or mask.ndim != 1:
        shape = f" of shape {mask.shape}" if isinstance(mask, jax.Array) else ""
        raise TypeError(
            "plot_mask draws 1-D sharded jax.Arrays (the mask of a padded batch), got "
            f"{type(mask).__name__}{shape}; place the mask with jax.device_put first."
        )
    check_not_deleted("the mask", mask)
    blocks: dict[int, tuple[list[int], np.ndarray]] = {}
    for shard in mask.addressable_shards:
        start = shard.index[0].start or 0
        blocks.setdefault(start, ([], np.asarray(shard.data, dtype=bool)))[0].append(
            shard.device.id
        )
    return [(tuple(sorted(ids)), start, rows) for start, (ids, rows) in sorted(blocks.items())]


def plot_mask(masks: Any, *, title: str | None = None) -> MaskPlot:
    """Draws, per device, which rows of its shard are real and which are padding.

    Each row of the picture is one block of the array, in global row order, labelled
    with the devices that hold it; each cell is one row of that block, light blue when
    the mask is True (a real row) and hatched orange when it is False (padding). The
    counts are written at the right.

    Args:
        masks: a sharded 1-D boolean `jax.Array`, or ``{panel title: array}`` to draw
            several side by side.
        title: the figure title.

    Returns:
        A `MaskPlot`.

    Raises:
        TypeError: a mask is not a 1-D sharded `jax.Array`, `masks` an empty mapping,
            or `title` not a string.

    Example:
        >>> mesh = jax.make_mesh((8,), ("data",))
        >>> _, mask = pad_to_multiple({"x": np.arange(13)}, 8)
        >>> plot = plot_mask(jax.device_put(mask, NamedSharding(mesh, P("data"))))
        >>> sorted(plot.counts[""].values())[0]
        (0, 2)
    """
    _frame.check_title(title)
    panels = (
        dict(check_mapping("masks", masks, "{title: mask}"))
        if isinstance(masks, Mapping)
        else {"": masks}
    )
    found = {name: _blocks_of(mask) for name, mask in panels.items()}
    rows = max(len(blocks) for blocks in found.values())
    # Fixed margins, in inches: a constrained layout would cost as much as the drawing.
    width_in, height_in = 5.9 * len(found), 0.32 * rows + 1.6
    figure = Figure(figsize=_frame.check_size(width_in, height_in, "masks or blocks"))
    figure.subplots_adjust(
        left=1.6 / width_in,
        right=1 - 0.15 / width_in,
        bottom=1.0 / height_in,
        top=1 - 0.45 / height_in,
        wspace=2.1 / 5.9,
    )
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, len(found), squeeze=False)[0]
    counts: dict[str, dict[tuple[int, ...], tuple[int, int]]] = {}
    for ax, (name, blocks) in zip(axes, found.items(), strict=True):
        counts[name] = {}
        width = max(len(block) for _, _, block in blocks)
        for y, (ids, _, block) in enumerate(blocks):
            real, padding = int(block.sum()), int((~block).sum())
            for rows, color in ((np.flatnonzero(block), REAL), (np.flatnonzero(~block), PADDING)):
                runs = np.split(rows, np.flatnonzero(np.diff(rows) > 1) + 1) if len(rows) else []
                spans = [(int(run[0]), len(run)) for run in runs]
                bars = ax.broken_barh(spans, (y - 0.4, 0.8), facecolors=color)
                if color == PADDING:
                    bars.set(hatch=COPIES_HATCH, edgecolor=hatch_color(PADDING), linewidth=0)
            ax.text(width + 0.5, y, f"{real} + {padding}", va="center", fontsize=8)
            counts[name][ids] = (real, padding)
        if width <= 64:  # a thin line between rows, while rows are wide enough to see
            ax.vlines(range(1, width), -0.5, len(blocks) - 0.5, colors="white", linewidth=0.6)
        labels = [
            f"rows {start}-{start + len(block) - 1}: device {','.join(map(str, ids))}"
            for ids, start, block in blocks
        ]
        ax.set_yticks(range(len(blocks)), labels, fontsize=8)
        ax.set(xlim=(0, width * 1.2 + 3), ylim=(len(blocks) - 0.5, -0.5))
        ax.set_xlabel("row within the device's shard (right: real + padding)", fontsize=9)
        ax.set_title(name, fontsize=10)
        ax.tick_params(axis="y", length=0)
    handles = [
        Patch(facecolor=REAL, label="real row"),
        Patch(facecolor=PADDING, hatch=COPIES_HATCH, edgecolor="white", label="padding"),
    ]
    figure.legend(handles=handles, loc="lower center", ncols=2, frameon=False)
    if title:
        figure.suptitle(title, fontsize=10)
    return MaskPlot(figure, counts)


@dataclasses.dataclass(frozen=True)
class EstimatesPlot:
    """An estimates figure; `differences` maps each label to its value minus the exact one."""

    figure: Figure
    differences: Mapping[str, float]

    def _repr_png_(self) -> bytes:
        return _png(self.figure)


def plot_estimates(
    values: Mapping[str, float],
    *,
    exact: str,
    quantity: str = "value",
    digits: int = 4,
    title: str | None = None,
) -> EstimatesPlot:
    """Draws several estimates of one number beside the exact value, and how far off each is.

    Left: every value as a bar from zero, with its value written on it, so nothing is
    hidden by a cut axis. Right: each value minus the exact one, labelled, around a
    line at zero; estimates equal to the exact value (to `digits` digits) are light
    blue, the others orange, the exact value dark.

    Args:
        values: ``{label: value}``, drawn top to bottom; one of them is the exact value.
        exact: the label of the exact value.
        quantity: what the values are, for the axis label (e.g. ``"accuracy"``).
        digits: decimals written, and to which two values count as equal.
        title: the figure title.

    Returns:
        An `EstimatesPlot`.

    Raises:
        TypeError: `values` is not a non-empty mapping of numbers, or `digits`,
            `quantity` or `title` is of the wrong type.
        ValueError: `exact` is not one of the labels, a value is NaN or beyond 1e300
            either way, or `digits` is outside [0, 12].

    Example:
        >>> plot = plot_estimates({"exact": 0.5, "guess": 0.52}, exact="exact")
        >>> round(plot.differences["guess"], 4)
        0.02
    """
    check_mapping("values", values, "{label: value}")
    checked = {  # bounded, so that differences and axis limits stay finite
        label: check_number(f"values[{label!r}]", values[label], minimum=-1e300, maximum=1e300)
        for label in values
    }
    try:
        known = exact in checked
    except TypeError:  # unhashable, so not a label
        known = False
    if not known:
        raise ValueError(f"exact={exact!r:.100} is not one of the labels {list(checked)!r:.300}.")
    digits = check_int("digits", digits, minimum=0, maximum=12)
    check_str("quantity", quantity)
    _frame.check_title(title)
    labels = list(checked)
    numbers = np.array([checked[label] for label in labels])
    reference = checked[exact]
    differences = {label: checked[label] - reference for label in labels}
    same = [round(differences[label], digits) == 0 for label in labels]
    colors = [
        EXACT if label == exact else REAL if equal else PADDING
        for label, equal in zip(labels, same, strict=True)
    ]
    height_in = 0.55 * len(labels) + 1.3
    # fixed margins: see plot_mask
    figure = Figure(figsize=_frame.check_size(10.0, height_in, "estimates"))
    figure.subplots_adjust(
        left=0.24, right=0.98, bottom=0.6 / height_in, top=1 - 0.4 / height_in, wspace=0.08
    )
    FigureCanvasAgg(figure)
    left, right = figure.subplots(1, 2, sharey=True)
    y = np.arange(len(labels))
    left.barh(y, numbers, color=colors, height=0.7)
    top = max(float(np.max(np.abs(numbers))), 1e-12)
    low = min(0.0, float(numbers.min()))
    left.set_xlim(low * 1.25, top * 1.3 if numbers.max() > 0 else 0.0)
    for row, number in zip(y, numbers, strict=True):
        left.text(number, row, f" {number:.{digits}f}", va="center", fontsize=9)
    left.set_yticks(y, labels)
    left.set(ylim=(len(labels) - 0.5, -0.5), xlabel=quantity)
    gaps = np.array([differences[label] for label in labels])
    right.barh(y, gaps, color=colors, height=0.7)
    right.axvline(0, color="black", linewidth=1)
    reach = max(float(np.max(np.abs(gaps))), 10.0**-digits)
    right.set_xlim(-1.6 * reach, 1.6 * reach)
    for row, gap in zip(y, gaps, strict=True):
        side = "left" if gap >= 0 else "right"
        right.text(gap, row, f" {gap:+.{digits}f} ", va="center", ha=side, fontsize=9)
    right.set_xlabel(f"{quantity} minus the exact value")
    if title:
        figure.suptitle(title, fontsize=10)
    return EstimatesPlot(figure, differences)
