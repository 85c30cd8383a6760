"""datarax: shard data across devices and hosts with JAX.

Public modules: `datarax.sharding` (the sharders and the row ledger),
`datarax.sources` (data sources), `datarax.pipeline` (batches through stages, per
host or global), `datarax.prefetch` (place the next batches on devices in the
background), `datarax.checkpoint` (pipeline and model state through Orbax),
`datarax.distributed` (a local multi-process JAX cluster), `datarax.devices`
(device set-up for notebooks), `datarax.viz` (pictures and tables) and
`datarax.exercises` (the tutorials' checkers).

Modules load on first use, so a process that needs one part (a cluster worker, say)
does not pay for importing the rest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

_MODULES = (
    "checkpoint",
    "devices",
    "distributed",
    "exercises",
    "pipeline",
    "prefetch",
    "sharding",
    "sources",
    "viz",
)
_NAMES = {
    "ArraySharder": "datarax.sharding",
    "JaxProcessSharder": "datarax.sharding",
    "JaxProcessSharderModule": "datarax.sharding",
    "RowLedger": "datarax.sharding",
    "ArraySource": "datarax.sources",
    "Pipeline": "datarax.pipeline",
    "prefetch_to_device": "datarax.prefetch",
}

__all__ = [
    "ArraySharder",
    "ArraySource",
    "JaxProcessSharder",
    "JaxProcessSharderModule",
    "Pipeline",
    "RowLedger",
    "checkpoint",
    "devices",
    "distributed",
    "exercises",
    "pipeline",
    "prefetch",
    "prefetch_to_device",
    "sharding",
    "sources",
    "viz",
]


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        return importlib.import_module(f"datarax.{name}")
    if name in _NAMES:
        return getattr(importlib.import_module(_NAMES[name]), name)
    raise AttributeError(f"module 'datarax' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


if TYPE_CHECKING:
    from datarax import checkpoint as checkpoint
    from datarax import devices as devices
    from datarax import distributed as distributed
    from datarax import exercises as exercises
    from datarax import pipeline as pipeline
    from datarax import prefetch as prefetch
    from datarax import sharding as sharding
    from datarax import sources as sources
    from datarax import viz as viz
    from datarax.pipeline import Pipeline as Pipeline
    from datarax.prefetch import prefetch_to_device as prefetch_to_device
    from datarax.sharding import ArraySharder as ArraySharder
    from datarax.sharding import JaxProcessSharder as JaxProcessSharder
    from datarax.sharding import JaxProcessSharderModule as JaxProcessSharderModule
    from datarax.sharding import RowLedger as RowLedger
    from datarax.sources import ArraySource as ArraySource
