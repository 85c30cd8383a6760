"""Sharders: place batches on devices (`ArraySharder`), give each host its part of the
data and build global arrays from the parts (`JaxProcessSharder`, also exported as
`JaxProcessSharderModule`), and the `RowLedger` that says which rows live where.

`SharderModuleConfig` and `JaxProcessSharderConfig`, the original API's settings objects,
are deprecated (each warns when built): the sharders take their settings as keywords."""

from datarax._deprecated import JaxProcessSharderConfig as JaxProcessSharderConfig
from datarax._deprecated import SharderModuleConfig as SharderModuleConfig
from datarax.sharding._base import SharderModule as SharderModule
from datarax.sharding._ledger import RowLedger as RowLedger
from datarax.sharding._ledger import pretend_hosts as pretend_hosts
from datarax.sharding._padding import pad_to_multiple as pad_to_multiple
from datarax.sharding._placement import global_to_local_shape as global_to_local_shape
from datarax.sharding._placement import local_index as local_index
from datarax.sharding._placement import local_to_global_shape as local_to_global_shape
from datarax.sharding.array_sharder import ArraySharder as ArraySharder
from datarax.sharding.jax_process_sharder import JaxProcessSharder as JaxProcessSharder
from datarax.sharding.jax_process_sharder import (
    JaxProcessSharderModule as JaxProcessSharderModule,
)
from datarax.sharding.jax_process_sharder import shard_bounds as shard_bounds

__all__ = [
    "ArraySharder",
    "JaxProcessSharder",
    "JaxProcessSharderConfig",
    "JaxProcessSharderModule",
    "RowLedger",
    "SharderModule",
    "SharderModuleConfig",
    "global_to_local_shape",
    "local_index",
    "local_to_global_shape",
    "pad_to_multiple",
    "pretend_hosts",
    "shard_bounds",
]
