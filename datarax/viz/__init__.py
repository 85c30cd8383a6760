"""Where a sharded array lives: matplotlib pictures, text tables and shared colours.

`plot_sharding` draws which device (and which host) holds which block of an array;
`plot_ledger` draws which global rows each device and each host holds (a `RowLedger`);
`summarize` and `summary_table` list, per leaf of a pytree, the global shape, the
PartitionSpec, each device's shard shape and bytes, and how many copies exist;
`plot_time_report` draws where a pipeline's time per batch goes;
`device_colors`, `host_colors`, `host_color`, `host_hatch`, `text_color` and
`hatch_color` give the colours (and, from host 4 on, the marks) every picture here
uses, so other figures can match them. All of it only reads the arrays' shardings; no
data is moved or copied.

It needs the `viz` extra (matplotlib, rich): pip install 'datarax-sharding[viz]'.

The tutorials' lesson figures and the playground live in the course package,
`datarax_course.figures`; their names here (`plot_devices`, `playground`, ...) still
work for one release, and warn.
"""

from typing import Any

from . import _requires as _requires  # first: names the extra when one is missing
from ._ledger import LedgerPlot as LedgerPlot
from ._ledger import plot_ledger as plot_ledger
from ._palette import COPIES_HATCH as COPIES_HATCH
from ._palette import DEVICE_PALETTE as DEVICE_PALETTE
from ._palette import HOST_PALETTE as HOST_PALETTE
from ._palette import device_colors as device_colors
from ._palette import hatch_color as hatch_color
from ._palette import host_color as host_color
from ._palette import host_colors as host_colors
from ._palette import host_hatch as host_hatch
from ._palette import text_color as text_color
from ._placement import ShardingPlot as ShardingPlot
from ._placement import plot_sharding as plot_sharding
from ._tables import LeafSummary as LeafSummary
from ._tables import format_spec as format_spec
from ._tables import leaf_summaries as leaf_summaries
from ._tables import summarize as summarize
from ._tables import summary_table as summary_table
from ._time_report import TimeReportPlot as TimeReportPlot
from ._time_report import plot_time_report as plot_time_report

# Names of 0.2.0 that the course package now holds (datarax_course.figures): read here,
# one loads the course by its name and warns. With datarax.exercises, the only way the
# library reaches the course (tests/test_layout.py names both).
MOVED_TO_COURSE = (
    "DevicesPlot",
    "EpochEndPlot",
    "EstimatesPlot",
    "HostRowsPlot",
    "MaskPlot",
    "Playground",
    "ReadsPlot",
    "RowsPlot",
    "TimelinePlot",
    "device_of_rows",
    "playground",
    "plot_devices",
    "plot_epoch_ends",
    "plot_estimates",
    "plot_host_rows",
    "plot_mask",
    "plot_reads",
    "plot_row_grid",
    "plot_rows",
    "plot_timeline",
)


def __getattr__(name: str) -> Any:
    if name in MOVED_TO_COURSE:
        import importlib

        from datarax._deprecated import warn

        warn(f"datarax.viz.{name}", f"datarax_course.figures.{name}")
        return getattr(importlib.import_module("datarax_course.figures"), name)
    raise AttributeError(f"module 'datarax.viz' has no attribute {name!r}")
