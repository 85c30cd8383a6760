"""Sharders: place batches on devices (`ArraySharder`) and split data between hosts
(`JaxProcessSharderModule`, also exported as `JaxProcessSharder`)."""

from datarax.sharding._base import SharderModule as SharderModule
from datarax.sharding.array_sharder import ArraySharder as ArraySharder
from datarax.sharding.padding import pad_to_multiple as pad_to_multiple
from datarax.sharding.process_sharder import (
    JaxProcessSharderModule as JaxProcessSharderModule,
)
from datarax.sharding.process_sharder import shard_bounds as shard_bounds

JaxProcessSharder = JaxProcessSharderModule

__all__ = [
    "ArraySharder",
    "JaxProcessSharder",
    "JaxProcessSharderModule",
    "SharderModule",
    "pad_to_multiple",
    "shard_bounds",
]
