"""datarax: shard data across devices and hosts with JAX.

Public modules: `datarax.sharding` (the sharders and the row ledger),
`datarax.sources` (data sources), `datarax.pipeline` (batches through stages, per
host or global), `datarax.prefetch` (place the next batches on devices in the
background), `datarax.checkpoint` (pipeline and model state through Orbax),
`datarax.distributed` (a local multi-process JAX cluster), `datarax.devices`
(device set-up for notebooks) and `datarax.viz` (pictures and tables).
"""

from datarax import distributed as distributed
from datarax import pipeline as pipeline
from datarax import prefetch as prefetch
from datarax import sharding as sharding
from datarax.pipeline import Pipeline as Pipeline
from datarax.prefetch import prefetch_to_device as prefetch_to_device
from datarax.sharding import ArraySharder as ArraySharder
from datarax.sharding import JaxProcessSharder as JaxProcessSharder
from datarax.sharding import JaxProcessSharderModule as JaxProcessSharderModule
from datarax.sharding import RowLedger as RowLedger
from datarax.sources import ArraySource as ArraySource

__version__ = "0.1.0"

__all__ = [
    "ArraySharder",
    "ArraySource",
    "JaxProcessSharder",
    "JaxProcessSharderModule",
    "Pipeline",
    "RowLedger",
    "distributed",
    "pipeline",
    "prefetch",
    "prefetch_to_device",
    "sharding",
]
