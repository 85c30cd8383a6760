"""Where a sharded array lives: matplotlib pictures, text tables and shared colours.

`plot_sharding` draws which device (and which host) holds which block of an array;
`plot_ledger` draws which global rows each device and each host holds (a `RowLedger`);
`playground()` is an interactive widget to try meshes, hosts and specs on real arrays;
`summarize` and `summary_table` list, per leaf of a pytree, the global shape, the
PartitionSpec, each device's shard shape and bytes, and how many copies exist;
`plot_time_report` draws where a pipeline's time per batch goes;
`device_colors`, `host_colors` and `host_hatch` give the colours (and, from host 4 on,
the marks) every picture here uses, so a notebook's own figures can match them. All of
it only reads the arrays' shardings; no data is moved or copied.

It needs the `viz` extra (matplotlib, rich): pip install 'datarax-sharding[viz]'; the
playground needs the `playground` extra (ipywidgets) too.
"""

from . import _requires as _requires  # first: names the extra when one is missing
from ._ledger import LedgerPlot as LedgerPlot
from ._ledger import plot_ledger as plot_ledger
from ._lesson_bars import EstimatesPlot as EstimatesPlot
from ._lesson_bars import MaskPlot as MaskPlot
from ._lesson_bars import plot_estimates as plot_estimates
from ._lesson_bars import plot_mask as plot_mask
from ._lessons import DevicesPlot as DevicesPlot
from ._lessons import HostRowsPlot as HostRowsPlot
from ._lessons import plot_devices as plot_devices
from ._lessons import plot_host_rows as plot_host_rows
from ._palette import COPIES_HATCH as COPIES_HATCH
from ._palette import DEVICE_PALETTE as DEVICE_PALETTE
from ._palette import HOST_PALETTE as HOST_PALETTE
from ._palette import device_colors as device_colors
from ._palette import host_colors as host_colors
from ._palette import host_hatch as host_hatch
from ._palette import text_color as text_color
from ._pipeline_figures import RowsPlot as RowsPlot
from ._pipeline_figures import device_of_rows as device_of_rows
from ._pipeline_figures import plot_row_grid as plot_row_grid
from ._pipeline_figures import plot_rows as plot_rows
from ._placement import ShardingPlot as ShardingPlot
from ._placement import plot_sharding as plot_sharding
from ._playground import Playground as Playground
from ._playground_start import playground as playground
from ._resume_figures import EpochEndPlot as EpochEndPlot
from ._resume_figures import ReadsPlot as ReadsPlot
from ._resume_figures import plot_epoch_ends as plot_epoch_ends
from ._resume_figures import plot_reads as plot_reads
from ._tables import LeafSummary as LeafSummary
from ._tables import format_spec as format_spec
from ._tables import leaf_summaries as leaf_summaries
from ._tables import summarize as summarize
from ._tables import summary_table as summary_table
from ._time_report import TimeReportPlot as TimeReportPlot
from ._time_report import plot_time_report as plot_time_report
from ._timeline import TimelinePlot as TimelinePlot
from ._timeline import plot_timeline as plot_timeline
