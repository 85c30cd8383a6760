"""`plot_timeline`: when each piece of work ran, as bars on a shared time axis.

Input and step intervals of a training loop, one lane per kind of work and one panel
per way of running it (one after the other, with prefetch), so overlap can be seen.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from datarax.viz import text_color
from datarax_course._checks import (
    check_mapping,
    check_number,
    check_str,
    check_strings,
    is_sequence,
)

from . import _frame
from ._pipeline_figures import png

Event = tuple[str, str, float, float]  # (lane, label, start, end)
MAX_EVENTS = 4096  # each event is a bar and maybe a label: ~2 ms each


@dataclasses.dataclass(frozen=True)
class TimelinePlot:
    """A timeline figure: `bars[panel][lane]` are the rectangles drawn, in event order."""

    figure: Figure
    bars: Mapping[str, Mapping[str, tuple[Rectangle, ...]]]

    def _repr_png_(self) -> bytes:
        return png(self.figure)


def _greys(count: int) -> list[str]:
    """`count` greys from light to dark, told apart in print and by every reader."""
    levels = np.linspace(0.75, 0.3, count) if count > 1 else np.array([0.5])
    return [to_hex((level, level, level)).upper() for level in levels]


def _checked_events(title: object, events: object) -> list[Event]:
    """`events` as a list of ``(lane, label, start, end)`` with finite float times."""
    if not is_sequence(events):
        raise TypeError(
            f"panels[{title!r:.100}] must be a list of events (lane, label, start, end), "
            f"got {type(events).__name__}: {events!r:.100}."
        )
    checked = []
    for number, event in enumerate(events):
        where = f"panels[{title!r:.100}][{number}]"
        if not is_sequence(event) or len(event) != 4:
            raise TypeError(
                f"{where} must be an event (lane, label, start, end), got "
                f"{type(event).__name__}: {event!r:.100}."
            )
        lane, label, start, end = event
        lane = str(check_str(f"{where} lane", lane))
        # Times of any clock, bounded so that spans in ms stay finite.
        start = check_number(f"{where} start", start, minimum=-1e300, maximum=1e300)
        end = check_number(f"{where} end", end, minimum=-1e300, maximum=1e300)
        checked.append((lane, str(label), start, end))
    return checked


def plot_timeline(
    panels: Mapping[str, Sequence[Event]],
    *,
    lanes: Sequence[str],
    unit: str = "ms",
    width: float = 9.0,
) -> TimelinePlot:
    """Draws intervals as bars on a shared time axis, one lane per kind, one panel per case.

    Args:
        panels: panel title -> events ``(lane, label, start, end)``, times in seconds
            on any clock; each panel starts at its earliest event.
        lanes: the lanes, top to bottom (e.g. ``("input", "step")``), filled in greys
            from light to dark: lanes are kinds of work, not devices or hosts.
        unit: ``"ms"`` or ``"s"``, the unit of the time axis.
        width: the figure's width in inches.

    Each event is a bar, labelled where its label fits: at most 4096 events in all
    (`MAX_EVENTS`), and the panels must fit in 40 inches (each is 0.35 inches and
    0.4 per lane); past either the picture is refused before anything is drawn. To
    draw more, pass a slice of the events.

    Returns:
        A `TimelinePlot`: the figure and, per panel and lane, the bars drawn.

    Raises:
        TypeError: `panels` is not a non-empty mapping of event lists, an event is not
            ``(lane, label, start, end)`` with numbers for times, or `lanes`, `unit`
            or `width` is of the wrong type.
        ValueError: an event names a lane not in `lanes`, ends before it starts or
            has a time that is NaN or infinite; `lanes` is empty or repeats a lane;
            `unit` is not allowed, `width` is outside [2, 40] inches, or there are
            more than 4096 events or more lanes than fit in 40 inches.

    Example:
        >>> events = [("input", "0", 0.0, 0.01), ("step", "0", 0.01, 0.03)]
        >>> plot = plot_timeline({"serial": events}, lanes=("input", "step"))
        >>> round(plot.bars["serial"]["step"][0].get_width(), 6)
        20.0
    """
    scale = {"ms": 1e3, "s": 1.0}[str(check_str("unit", unit, choices=("ms", "s")))]
    check_mapping("panels", panels, "{title: [(lane, label, start, end), ...]}")
    lanes = list(check_strings("lanes", lanes))
    if len(set(lanes)) < len(lanes):
        raise ValueError(f"lanes must be distinct, got {lanes}.")
    width = _frame.check_width(width)
    count = sum(len(events) if is_sequence(events) else 0 for events in panels.values())
    if count > MAX_EVENTS:
        raise ValueError(
            f"plot_timeline draws at most {MAX_EVENTS} events (each a bar), got {count}; "
            f"pass a slice of them, e.g. {{title: events[:{MAX_EVENTS // 4}]}}, or fewer panels."
        )
    height = 0.4 + (0.35 + 0.4 * len(lanes)) * len(panels)
    figsize = _frame.check_size(width, height, "panels or lanes")
    panels = {title: _checked_events(title, events) for title, events in panels.items()}
    colors = _greys(len(lanes))
    origins = {title: min((e[2] for e in events), default=0.0) for title, events in panels.items()}
    longest = max((e[3] - origins[t] for t, ev in panels.items() for e in ev), default=1.0)
    figure = Figure(figsize=figsize)
    FigureCanvasAgg(figure)
    axes = figure.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    bars: dict[str, dict[str, tuple[Rectangle, ...]]] = {}
    for ax, (title, events) in zip(axes, panels.items(), strict=True):
        drawn: dict[str, list[Rectangle]] = {lane: [] for lane in lanes}
        for lane, label, start, end in events:
            if lane not in drawn:
                raise ValueError(f"event lane {lane!r} is not one of the lanes {lanes}.")
            if end < start:
                raise ValueError(f"event {label!r} in lane {lane!r} ends before it starts.")
            y = len(lanes) - 1 - lanes.index(lane)
            fill = colors[lanes.index(lane)]
            left, span = (start - origins[title]) * scale, (end - start) * scale
            wide_pt = (end - start) / (longest or 1.0) * width * 72
            rect = Rectangle((left, y + 0.12), span, 0.76, facecolor=fill, edgecolor="white")
            rect.set_linewidth(1.0 if wide_pt > 3 else 0.0)  # an edge would hide a thin bar
            ax.add_artist(rect)  # add_patch would also grow the limits, set below: 2x slower
            drawn[lane].append(rect)
            if wide_pt > 5.2 * len(label) + 4:
                ax.text(left + span / 2, y + 0.5, label, ha="center", va="center", fontsize=7,
                        color=text_color(fill))  # fmt: skip
        ax.set_yticks([len(lanes) - 0.5 - i for i in range(len(lanes))], lanes)
        ax.set_ylim(0, len(lanes))
        ax.set_title(title, fontsize=10)
        ax.spines[["top", "right"]].set_visible(False)
        bars[title] = {lane: tuple(rects) for lane, rects in drawn.items()}
    axes[-1].set_xlim(0, longest * scale * 1.02)
    axes[-1].set_xlabel(f"time ({unit})")
    figure.tight_layout()
    return TimelinePlot(figure, bars)
