"""The code the documentation shows, run as written: no jax.set_mesh, no `with mesh:`."""

import jax
import numpy as np
from flax import nnx

from datarax.pipeline import Pipeline
from datarax.sharding import ArraySharder, JaxProcessSharderModule


def test_array_sharder_snippet() -> None:
    batch = {
        "image": np.arange(16 * 4 * 4 * 3, dtype=np.float32).reshape(16, 4, 4, 3),
        "label": np.arange(16, dtype=np.int32),
    }
    mesh = jax.make_mesh((len(jax.devices()),), ("data",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    sharder = ArraySharder(rngs=nnx.Rngs(0))
    sharded_batch = sharder.shard(batch, sharding)

    for name, leaf in sharded_batch.items():
        shards = leaf.addressable_shards
        assert len(shards) == 8
        for shard in shards:
            assert shard.data.shape[0] == 16 // 8
            np.testing.assert_array_equal(np.asarray(shard.data), batch[name][shard.index])


def test_process_sharder_snippet() -> None:
    global_images = np.arange(12 * 2).reshape(12, 2)
    sharder = JaxProcessSharderModule(rngs=nnx.Rngs(0))
    local_images = sharder.shard_data(global_images)
    assert (sharder.process_index, sharder.process_count) == (0, 1)
    np.testing.assert_array_equal(local_images, global_images)
    assert np.shares_memory(local_images, global_images)


def test_pipeline_snippet() -> None:
    class _Shard(nnx.Module):
        def __init__(self, sharder, sharding):
            self.sharder = sharder
            self.sharding = sharding

        def __call__(self, batch):
            return self.sharder.shard(batch, self.sharding)

    class _Normalize(nnx.Module):
        def __call__(self, batch):
            return {**batch, "image": batch["image"] / 255.0}

    rows = 1024
    source = {
        "image": np.random.default_rng(0).integers(0, 256, (rows, 8, 8, 3), dtype=np.uint8),
        "label": np.arange(rows, dtype=np.int32),
    }
    mesh = jax.make_mesh((len(jax.devices()),), ("data",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    shard_stage = _Shard(ArraySharder(rngs=nnx.Rngs(0)), sharding)
    transform = _Normalize()
    pipeline = Pipeline(
        source=source, stages=[shard_stage, transform], batch_size=256, rngs=nnx.Rngs(0)
    )

    batches = list(pipeline)
    assert len(batches) == rows // 256
    for index, batch in enumerate(batches):
        assert batch["image"].shape == (256, 8, 8, 3)
        assert batch["image"].sharding.is_equivalent_to(sharding, 4)
        assert len(batch["label"].addressable_shards) == 8
        expected = source["image"][index * 256 : (index + 1) * 256] / 255.0
        np.testing.assert_allclose(np.asarray(batch["image"]), expected, rtol=1e-6)


def test_documented_module_paths_import() -> None:
    from datarax.sharding.array_sharder import ArraySharder as FromModule
    from datarax.sharding.jax_process_sharder import (
        JaxProcessSharder,
        JaxProcessSharderModule,
    )

    assert FromModule is ArraySharder
    assert JaxProcessSharderModule is JaxProcessSharder is datarax_sharder()


def datarax_sharder() -> type:
    from datarax.sharding import JaxProcessSharder

    return JaxProcessSharder
