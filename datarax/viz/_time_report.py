"""`plot_time_report`: where a pipeline's time per batch goes, as stacked bars.

One bar for this process (waiting for workers, moving batches out of shared memory,
copying to devices, device stages, the caller's step) and, with workers, one for a
worker (reading rows, host stages, moving the batch into shared memory), each segment a
part's mean milliseconds per batch from `Pipeline.time_report`. A worker's bar runs side
by side with this process and with the other workers: with N workers, a batch is ready
about every worker-bar / N milliseconds.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Mapping

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from datarax.pipeline import Pipeline, TimeReport
from datarax.pipeline._timing import PARTS, WHERE

from ._palette import device_colors, text_color

_COLOURS = dict(zip(PARTS, device_colors(len(PARTS)), strict=True))


def png(figure: Figure) -> bytes:
    """`figure` as PNG bytes, trimmed to what is drawn."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight")
    return buffer.getvalue()


@dataclasses.dataclass(frozen=True)
class TimeReportPlot:
    """The figure, the report it draws, and its segments: `segments[bar][part]`."""

    figure: Figure
    report: TimeReport
    segments: Mapping[str, Mapping[str, Rectangle]]

    def _repr_png_(self) -> bytes:
        return png(self.figure)


def plot_time_report(pipeline: Pipeline | TimeReport, width: float = 8.0) -> TimeReportPlot:
    """Draws where the last batches' time went (see `Pipeline.time_report`).

    Args:
        pipeline: a `Pipeline` that has made some batches, or its `TimeReport`.
        width: the figure's width in inches.

    Returns:
        A `TimeReportPlot`; its `report` holds the numbers drawn.

    Raises:
        TypeError: `pipeline` is neither a Pipeline nor a TimeReport.

    Example:
        >>> pipeline = Pipeline(source={"x": np.arange(64)}, batch_size=8)
        >>> plot = (list(pipeline), plot_time_report(pipeline))[1]
        >>> sorted(plot.segments), plot.report.batches
        (['this process'], 8)
    """
    if isinstance(pipeline, Pipeline):
        report = pipeline.time_report()
    elif isinstance(pipeline, TimeReport):
        report = pipeline
    else:
        raise TypeError(
            f"pipeline must be a Pipeline (after some batches) or its time_report(), got "
            f"{type(pipeline).__name__}: {pipeline!r:.100}."
        )
    bars = {"this process": [p for p in PARTS if p not in report.in_workers]}
    if report.in_workers:
        bars = {"a worker": list(report.in_workers), **bars}
    figure = Figure(figsize=(width, 0.9 + 0.6 * len(bars)))
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    segments: dict[str, dict[str, Rectangle]] = {}
    for row, (bar, parts) in enumerate(bars.items()):
        left, segments[bar] = 0.0, {}
        for part in parts:
            ms = report.ms[part]
            colour = _COLOURS[part]
            (rectangle,) = axes.barh(row, ms, left=left, color=colour, edgecolor="white")
            segments[bar][part] = rectangle
            total = sum(report.ms.values()) or 1.0
            if ms > 0.06 * total:
                axes.text(
                    left + ms / 2,
                    row,
                    f"{ms:.1f}",
                    ha="center",
                    va="center",
                    color=text_color(colour),
                    fontsize=8,
                )
            left += ms
    axes.set_yticks(range(len(bars)), list(bars))
    axes.invert_yaxis()
    axes.set_xlabel("mean ms per batch")
    handles = [Rectangle((0, 0), 1, 1, color=_COLOURS[part]) for part in PARTS]
    axes.legend(
        handles,
        [WHERE[part] for part in PARTS],
        fontsize=7,
        ncol=4,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.3 if len(bars) > 1 else -0.55),
    )
    workers = f", {report.workers} workers side by side" if report.workers else ""
    axes.set_title(f"Where the time of the last {report.batches} batches went{workers}", fontsize=9)
    return TimeReportPlot(figure, report, segments)
