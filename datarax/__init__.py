"""datarax: shard data across devices and hosts with JAX.

One wing per concern, each a package that re-exports its public names:

- `datarax.sharding`: placement. `ArraySharder`, `JaxProcessSharder` (also
  `JaxProcessSharderModule`), the `RowLedger` that says which rows every device and
  host holds, padding, global arrays and the checks between hosts.
- `datarax.pipeline`: feeding. `Pipeline`, `ArraySource`, `prefetch_to_device` and
  `Checkpoints`.
- `datarax.distributed`: `launch_local`, a JAX cluster of processes on one machine,
  and `setup_devices` for notebooks.
- `datarax.viz`: the library's own pictures and tables (placement, the row ledger,
  summaries, the time report).

The tutorials' checkers, lesson figures and playground are a course package beside
the library, `datarax_course` (same distribution); the grader is a tool of its own
(``grader/``). The library never imports either, but for the deprecated names
(`datarax.viz`'s old figures, `datarax.exercises`), which load the course by name.

Data flows one way: rows chosen (the ledger) -> placed (sharders, global arrays) ->
iterated (pipeline, prefetch) -> saved (checkpoints). Wings load on first use, so a
process that needs one part (a cluster worker, say) does not pay for the rest. The
module paths of earlier releases, `datarax.sources`, `datarax.prefetch`,
`datarax.checkpoint`, `datarax.devices` and `datarax.exercises`, are deprecated: they
still import, and each name read from them warns and names its place in
`datarax.pipeline` (the first three), `datarax.distributed` or `datarax_course` (see
`datarax._deprecated`).
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

from datarax._deprecated import MOVED_MODULES, MovedModules

__version__ = "0.2.0"

_WINGS = ("distributed", "pipeline", "sharding", "viz")
_NAMES = {
    "ArraySharder": "datarax.sharding",
    "JaxProcessSharder": "datarax.sharding",
    "JaxProcessSharderModule": "datarax.sharding",
    "RowLedger": "datarax.sharding",
    "ArraySource": "datarax.pipeline",
    "Pipeline": "datarax.pipeline",
    "prefetch_to_device": "datarax.pipeline",
    "clear_caches": "datarax._caches",
}

__all__ = [
    "ArraySharder",
    "ArraySource",
    "JaxProcessSharder",
    "JaxProcessSharderModule",
    "Pipeline",
    "RowLedger",
    "clear_caches",
    "distributed",
    "pipeline",
    "prefetch_to_device",
    "sharding",
    "viz",
]


if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
    sys.meta_path.append(MovedModules())


def __getattr__(name: str) -> Any:
    if name in _WINGS or name in MOVED_MODULES:
        return importlib.import_module(f"datarax.{name}")
    if name in _NAMES:
        return getattr(importlib.import_module(_NAMES[name]), name)
    raise AttributeError(f"module 'datarax' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


if TYPE_CHECKING:
    from datarax import distributed as distributed
    from datarax import pipeline as pipeline
    from datarax import sharding as sharding
    from datarax import viz as viz
    from datarax._caches import clear_caches as clear_caches
    from datarax.pipeline import ArraySource as ArraySource
    from datarax.pipeline import Pipeline as Pipeline
    from datarax.pipeline import prefetch_to_device as prefetch_to_device
    from datarax.sharding import ArraySharder as ArraySharder
    from datarax.sharding import JaxProcessSharder as JaxProcessSharder
    from datarax.sharding import JaxProcessSharderModule as JaxProcessSharderModule
    from datarax.sharding import RowLedger as RowLedger
