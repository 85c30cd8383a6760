"""The tutorials' lesson figures and the playground, drawn from real arrays.

`plot_devices` and `plot_host_rows` (devices, meshes and hosts), `plot_mask` and
`plot_estimates` (padding and masks), `plot_rows`, `plot_row_grid` and
`device_of_rows` (which device holds each row of a batch), `plot_epoch_ends` and
`plot_reads` (uneven epoch ends, what each host reads), `plot_timeline` (prefetch and
overlap) and `playground()`, an interactive widget to try meshes, hosts and specs on
real arrays. They use the library's own pictures and colours (`datarax.viz`), so the
lessons' figures match them.

They need the `viz` extra (matplotlib, rich); the playground needs the `playground`
extra (ipywidgets) too; the `tutorials` extra installs both.
"""

import datarax.viz  # noqa: F401  # first: without the viz extra, an ImportError naming it

from ._lesson_bars import EstimatesPlot as EstimatesPlot
from ._lesson_bars import MaskPlot as MaskPlot
from ._lesson_bars import plot_estimates as plot_estimates
from ._lesson_bars import plot_mask as plot_mask
from ._lessons import DevicesPlot as DevicesPlot
from ._lessons import HostRowsPlot as HostRowsPlot
from ._lessons import plot_devices as plot_devices
from ._lessons import plot_host_rows as plot_host_rows
from ._pipeline_figures import RowsPlot as RowsPlot
from ._pipeline_figures import device_of_rows as device_of_rows
from ._pipeline_figures import plot_row_grid as plot_row_grid
from ._pipeline_figures import plot_rows as plot_rows
from ._playground import Playground as Playground
from ._playground_start import playground as playground
from ._resume_figures import EpochEndPlot as EpochEndPlot
from ._resume_figures import ReadsPlot as ReadsPlot
from ._resume_figures import plot_epoch_ends as plot_epoch_ends
from ._resume_figures import plot_reads as plot_reads
from ._timeline import TimelinePlot as TimelinePlot
from ._timeline import plot_timeline as plot_timeline
