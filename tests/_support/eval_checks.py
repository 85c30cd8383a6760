"""Padded evaluation epochs: a host stage that records the rows it saw (top-level, so
worker processes can unpickle it), and what every process of a local cluster returns for
`pipeline/test_eval_pipeline.py`."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from flax import nnx
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from datarax.pipeline import Pipeline

BATCH = 16
LENGTHS = (71, 65)  # 7 rows and 1 row left for the last batch of 16
SEED = 4


def rows_seen(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The batch with a leaf ``seen``: how many rows this stage was given, on every row."""
    return {**batch, "seen": np.full(len(batch["x"]), len(batch["x"]))}


def source(length: int) -> dict[str, np.ndarray]:
    """Rows that are their own indices: ``id`` and the two columns of ``x``."""
    ids = np.arange(length, dtype=np.int32)
    return {"id": ids, "x": np.stack([ids, -ids], axis=1).astype(np.float32)}


def padded_epoch(data: dict[str, np.ndarray], sharding: NamedSharding, **options: Any) -> Pipeline:
    """The evaluation pipeline every check builds: shuffled, the last batch padded."""
    return Pipeline(
        source=data,
        batch_size=BATCH,
        shuffle=True,
        rngs=nnx.Rngs(SEED),
        drop_remainder=False,
        pad_remainder=True,
        sharding=sharding,
        **options,
    )


def _layouts() -> dict[str, NamedSharding]:
    """Shardings of the rows over every device of the hosts, in ways pods use."""
    by_host = np.array(sorted(jax.devices(), key=lambda d: (d.process_index, d.id)))
    by_host = by_host.reshape(jax.process_count(), -1)
    model_across_hosts = Mesh(by_host.T, ("data", "model"))  # each row on every host
    return {
        "all_hosts": NamedSharding(Mesh(by_host.reshape(-1), ("data",)), P("data")),
        "interleaved": NamedSharding(Mesh(by_host.T.reshape(-1), ("data",)), P("data")),
        "model_across_hosts": NamedSharding(model_across_hosts, P("data")),
        "columns_across_hosts": NamedSharding(model_across_hosts, P("data", "model")),
    }


def _gather(array: jax.Array) -> list[Any]:
    return np.asarray(multihost_utils.process_allgather(array, tiled=True)).tolist()


def padded_epoch_checks() -> dict[str, Any]:
    """Each layout's padded epochs, gathered whole on this host: the leaves, the row
    mask and its spec, and how many rows this host's stage saw in each batch."""
    results: dict[str, Any] = {}
    for name, sharding in _layouts().items():
        for length in LENGTHS:
            data, stages = source(length), [rows_seen]
            if len(sharding.spec) > 1:  # a spec of rank 2 needs leaves of rank 2
                data, stages = {"x": data["x"]}, []
            pipeline = padded_epoch(data, sharding, stages=stages)
            batches = []
            for batch in pipeline:
                gathered = {key: _gather(leaf) for key, leaf in batch.items()}
                batches.append({**gathered, "mask_spec": str(batch["row_mask"].sharding.spec)})
            results[f"{name}/{length}"] = {"num_batches": pipeline.num_batches, "batches": batches}
    return results
