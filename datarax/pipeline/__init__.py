"""Feeding: batches from a source through stages, per host or as one global batch.

`Pipeline` reads batches from a source (`ArraySource`, or anything with ``__len__``
and ``__getitem__``), runs them through stages and, with ``sharding=``, builds one
global batch on every host. Language-model data is such a source too: `Documents`
(token documents of every length, from Parquet, JSON Lines, a Hugging Face dataset or
arrays, or a token store in Megatron-LM's indexed format read by memory map), `Mixture`
(several of them by weight, each epoch its own documents) and `Packed` (fixed-length rows
planned from the documents' lengths alone); `write_documents` writes any of them as a
token store, on every core and every host at once. `prefetch_to_device` places the next
batches in the background, and `Checkpoints` saves a pipeline's position beside the model's state.
A host stage that makes its output with `output_array` (or `output_like`) makes it, in
a worker process, in the shared memory that carries it back: that batch crosses with no
copy.
"""

from datarax.errors import CheckpointSaveError as CheckpointSaveError
from datarax.pipeline._checkpoint import Checkpoints as Checkpoints
from datarax.pipeline._memory import keep_freed_memory as keep_freed_memory
from datarax.pipeline._options import Workers as Workers
from datarax.pipeline._outputs import output_array as output_array
from datarax.pipeline._outputs import output_like as output_like
from datarax.pipeline._pipeline import Pipeline as Pipeline
from datarax.pipeline._prefetch import DevicePrefetcher as DevicePrefetcher
from datarax.pipeline._prefetch import prefetch_to_device as prefetch_to_device
from datarax.pipeline._sources import ArraySource as ArraySource
from datarax.pipeline._sources import RandomAccessSource as RandomAccessSource
from datarax.pipeline._sources import read_rows as read_rows
from datarax.pipeline._timing import TimeReport as TimeReport
from datarax.pipeline.documents import Documents as Documents
from datarax.pipeline.documents import Mixture as Mixture
from datarax.pipeline.documents import Packed as Packed
from datarax.pipeline.documents import write_documents as write_documents

__all__ = [
    "ArraySource",
    "CheckpointSaveError",
    "Checkpoints",
    "DevicePrefetcher",
    "Documents",
    "Mixture",
    "Packed",
    "Pipeline",
    "RandomAccessSource",
    "TimeReport",
    "Workers",
    "keep_freed_memory",
    "output_array",
    "output_like",
    "prefetch_to_device",
    "read_rows",
    "write_documents",
]
