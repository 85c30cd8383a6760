"""datarax: shard data across devices and hosts with JAX.

One wing per concern, each a package that re-exports its public names:

- `datarax.sharding`: placement. `ArraySharder`, `JaxProcessSharder` (also
  `JaxProcessSharderModule`), the `RowLedger` that says which rows every device and
  host holds, padding, global arrays and the checks between hosts.
- `datarax.pipeline`: feeding. `Pipeline`, `ArraySource`, `prefetch_to_device` and
  `Checkpoints`.
- `datarax.distributed`: `launch_local`, a JAX cluster of processes on one machine,
  and `setup_devices` for notebooks.
- `datarax.viz` (pictures, tables, the playground) and `datarax.exercises` (the
  tutorials' checkers) teach; the core never imports them.

Data flows one way: rows chosen (the ledger) -> placed (sharders, global arrays) ->
iterated (pipeline, prefetch) -> saved (checkpoints). Wings load on first use, so a
process that needs one part (a cluster worker, say) does not pay for the rest. The
module paths of earlier releases, `datarax.sources`, `datarax.prefetch`,
`datarax.checkpoint` and `datarax.devices`, still import: they name `datarax.pipeline`
(the first three) and `datarax.distributed`.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

_WINGS = ("distributed", "exercises", "pipeline", "sharding", "viz")
_MOVED = {
    "checkpoint": "pipeline",
    "devices": "distributed",
    "prefetch": "pipeline",
    "sources": "pipeline",
}
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
    "exercises",
    "pipeline",
    "prefetch_to_device",
    "sharding",
    "viz",
]


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an earlier release's path (``datarax.sources``) as a module holding the
    public names of the wing that took it over (``datarax.pipeline``)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        parent, _, name = fullname.rpartition(".")
        if parent != __name__ or name not in _MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: Any) -> None:
        return None  # a plain new module

    def exec_module(self, module: Any) -> None:
        wing = importlib.import_module(f"{__name__}.{_MOVED[module.__name__.rpartition('.')[2]]}")
        module.__doc__ = f"The public names of `{wing.__name__}`, under an earlier path."
        module.__all__ = list(wing.__all__)
        module.__dict__.update({name: getattr(wing, name) for name in wing.__all__})


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModules())


def __getattr__(name: str) -> Any:
    if name in _WINGS or name in _MOVED:
        return importlib.import_module(f"datarax.{name}")
    if name in _NAMES:
        return getattr(importlib.import_module(_NAMES[name]), name)
    raise AttributeError(f"module 'datarax' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


if TYPE_CHECKING:
    from datarax import distributed as distributed
    from datarax import exercises as exercises
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
