"""Drawing a row ledger: where its axes, bars, labels and host band go, in inches.

Everything is placed from sizes known in advance (no layout engine measures text),
which keeps a redraw cheap enough for an interactive playground.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from . import _blocks
from ._palette import (
    COPIES_HATCH,
    HOST_PALETTE,
    SEVERAL_HOSTS,
    hatch_color,
    host_color,
    host_hatch,
    text_color,
)

Span = tuple[int, int]
Lane = tuple[str, int, list[Span]]  # tick label, key (device id or host), bars
SHARED_LABEL = "held by several hosts"
BAND_IN, STRIP_IN, GAP_IN, RIGHT_IN = 0.75, 0.34, 0.14, 0.3
MIN_FONT, MAX_FONT = 5.5, 8.5


@dataclasses.dataclass(frozen=True)
class Frame:
    """Where everything goes, in inches: one axes, placed without a layout engine."""

    width: float
    height: float
    left: float  # the bars' left edge
    top: float  # the strip's top edge, down from the figure's top
    main_w: float
    lane_in: float
    lanes: int
    tick_pt: float

    @property
    def strip_lanes(self) -> float:
        return STRIP_IN / self.lane_in

    @property
    def gap_lanes(self) -> float:
        return GAP_IN / self.lane_in

    @classmethod
    def of(cls, lanes: list[Lane], width: float, lines: int, shares: bool, band: bool) -> Frame:
        lane_in = 0.3 if len(lanes) <= 16 else max(0.16, 4.8 / len(lanes))
        tick_pt = 8.0 if len(lanes) <= 16 else 6.5
        label_in = max(len(name) for name, _, _ in lanes) * tick_pt * 0.0085 + 0.15
        left = max(0.1 + (BAND_IN + 0.05) * band + label_in, 0.75)
        top = 0.15 + 0.19 * lines
        height = top + STRIP_IN + GAP_IN + len(lanes) * lane_in + 0.6 + 0.3 * shares
        main_w = max(width - left - RIGHT_IN, 0.5)
        return cls(width, height, left, top, main_w, lane_in, len(lanes), tick_pt)

    def build(
        self, heading: list[str], shares: bool, hosts: tuple[int, ...] = ()
    ) -> tuple[Figure, Axes]:
        """The figure, its title, its legend and the one axes everything is drawn in.

        The legend explains the copies' hatching when `shares`, and the mark of every
        group of 4 `hosts` past the first (`host_hatch`).
        """
        figure = Figure(figsize=_blocks.check_size(self.width, self.height, "devices or hosts"))
        FigureCanvasAgg(figure)  # renders off-screen; no pyplot state is touched
        figure.suptitle("\n".join(heading), fontsize=10, y=1 - 0.1 / self.height, va="top")
        tall = STRIP_IN + GAP_IN + self.lanes * self.lane_in
        box = (
            self.left / self.width,
            1 - (self.top + tall) / self.height,
            self.main_w / self.width,
            tall / self.height,
        )
        ax = figure.add_axes(box)
        ax.spines[["top", "right", "left"]].set_visible(False)
        handles = []
        if shares:
            hatched = Patch(facecolor="white", edgecolor=SEVERAL_HOSTS, hatch=COPIES_HATCH)
            handles.append(hatched)
            hatched.set_label(SHARED_LABEL)
        group = len(HOST_PALETTE)  # hosts that share a mark
        for first in sorted({host - host % group for host in hosts if host >= group}):
            mark = Patch(facecolor="white", edgecolor=SEVERAL_HOSTS, hatch=host_hatch(first))
            mark.set_label(f"hosts {first}-{first + group - 1}")
            handles.append(mark)
        if handles:
            anchor = (0.5, 0.02 / self.height)
            figure.legend(
                handles=handles,
                loc="lower center",
                bbox_to_anchor=anchor,
                ncols=len(handles),
                fontsize=8 if len(handles) > 3 else None,
            )
            figure.legends[0].set(frame_on=False)
        return figure, ax


def fit_font(ax: Axes, span: Span, text: str, tall: float, scale: tuple[float, float]) -> float:
    """The largest font size (points) at which `text` fits a bar over `span`, `tall` high.

    `scale` is (points per global row, points per row of bars).
    """
    low, high = ax.get_xlim()
    wide = min(span[1], high) - max(span[0], low)
    return min(MAX_FONT, wide * scale[0] / (0.62 * len(text) + 0.8), tall * scale[1] / 1.45)


def draw_bar(
    ax: Axes,
    lane: tuple[float, float],
    span: Span,
    look: tuple[str, str],
    shared: bool,
    scale: tuple[float, float],
    font: float,
    host: int | None = None,
) -> Rectangle:
    """One bar over rows `span` at (top, height) `lane`, hatched when hosts share it.

    `look` is its (fill colour, label); the label is drawn at `font` points at most,
    and only when it fits at a readable size. A bar of one `host` also carries that
    host's mark (`host_hatch`), so hosts 4 and up differ from hosts 0-3.
    """
    (start, stop), (top, tall), (fill, text) = span, lane, look
    bar = Rectangle((start, top), stop - start, tall, facecolor=fill, edgecolor="white")
    hatch = (COPIES_HATCH if shared else "") + (host_hatch(host) if host is not None else "")
    bar.set(linewidth=1.0, hatch=hatch or None)
    if hatch and hasattr(bar, "set_hatchcolor"):  # matplotlib >= 3.10
        bar.set_hatchcolor(hatch_color(fill))
    ax.add_patch(bar)
    size = min(font, fit_font(ax, span, text, tall, scale))
    if size >= MIN_FONT:
        low, high = ax.get_xlim()
        middle = (max(start, low) + min(stop, high)) / 2
        behind = {"facecolor": fill, "edgecolor": "none", "pad": 1.0} if shared else None
        label = ax.text(middle, top + tall / 2, text, ha="center", va="center")
        label.set(fontsize=size, bbox=behind, color=text_color(fill))
    return bar


def draw_band(ax: Axes, lanes: list[Lane], ledger: Any, x0: float, band_w: float) -> None:
    """Left of the tick labels, one block per host across its devices' rows of bars.

    `x0` and `band_w` are in axes fractions (negative: left of the axes).
    """
    groups: dict[int, list[int]] = {}
    for number, (_, device_id, _) in enumerate(lanes):
        groups.setdefault(ledger.host_of_device(device_id), []).append(number)
    transform = ax.get_yaxis_transform()  # x in axes fractions, y in rows of bars
    for host, numbers in groups.items():
        fill, top, size = host_color(host), numbers[0], len(numbers)
        block = Rectangle((x0, top + 0.06), band_w, size - 0.12, facecolor=fill, linewidth=0)
        block.set(transform=transform, clip_on=False, hatch=host_hatch(host) or None)
        block.set(edgecolor=hatch_color(fill))  # the hatch's colour; linewidth 0 hides the edge
        ax.add_patch(block)
        label = ax.text(x0 + band_w / 2, top + size / 2, f"host {host}", transform=transform)
        label.set(ha="center", va="center", fontsize=9, color=text_color(fill), clip_on=False)
