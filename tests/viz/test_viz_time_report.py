"""plot_time_report: each segment is a part's mean milliseconds per batch, in its bar."""

from __future__ import annotations

import time

import numpy as np
import pytest
from _support.worker_stages import slow

from datarax.pipeline import Pipeline, TimeReport
from datarax.viz import plot_time_report


def _report(workers: int) -> TimeReport:
    pipeline = Pipeline(source={"x": np.arange(32)}, stages=[slow], batch_size=8, workers=workers)
    for _batch in pipeline:
        time.sleep(0.01)
    return pipeline.time_report()


@pytest.mark.parametrize("workers", [0, 2])
def test_each_segment_is_a_parts_mean_in_the_bar_where_it_ran(workers: int) -> None:
    report = _report(workers)
    plot = plot_time_report(report)
    assert plot.report is report
    bars = ["a worker", "this process"] if workers else ["this process"]
    assert list(plot.segments) == bars
    for bar, parts in plot.segments.items():
        assert all((part in report.in_workers) == (bar == "a worker") for part in parts)
        left = 0.0
        for part, rectangle in parts.items():  # stacked in order, one width per part
            assert rectangle.get_x() == pytest.approx(left)
            assert rectangle.get_width() == pytest.approx(report.ms[part])
            left += report.ms[part]
    assert plot.segments[bars[0]]["stages"].get_width() >= 55  # the 60 ms stage


def test_anything_but_a_pipeline_or_its_report_is_refused() -> None:
    with pytest.raises(TypeError, match=r"pipeline must be a Pipeline .* got dict"):
        plot_time_report({"stages": 1.0})  # type: ignore[arg-type]
