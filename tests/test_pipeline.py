"""Pipeline: batching, shuffling per epoch, resuming exactly, remainder handling."""

import itertools

import jax
import numpy as np
import pytest
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from datarax.pipeline import ArraySource, Pipeline
from datarax.sharding import ArraySharder


def _source(rows: int = 20) -> dict[str, np.ndarray]:
    return {"x": np.arange(rows), "y": np.arange(rows) * 10}


def _rows(pipeline) -> list[list[int]]:
    return [batch["x"].tolist() for batch in pipeline]


def test_batches_in_order_and_remainder_dropped() -> None:
    assert _rows(Pipeline(source=_source(10), batch_size=4)) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_remainder_kept_on_request() -> None:
    pipeline = Pipeline(source=_source(10), batch_size=4, drop_remainder=False)
    assert len(pipeline) == 3
    assert _rows(pipeline)[-1] == [8, 9]


def test_unshuffled_batches_are_views_of_the_source() -> None:
    source = ArraySource(_source())
    batch = next(iter(Pipeline(source=source, batch_size=4)))
    assert np.shares_memory(batch["x"], source[:]["x"])


def test_shuffle_is_a_permutation_per_epoch_and_reproducible() -> None:
    make = lambda seed: Pipeline(source=_source(), batch_size=5, shuffle=True, rngs=nnx.Rngs(seed))  # noqa: E731
    pipeline = make(0)
    first, second = _rows(pipeline), _rows(pipeline)
    assert sorted(itertools.chain(*first)) == list(range(20))
    assert sorted(itertools.chain(*second)) == list(range(20))
    assert first != second
    again = make(0)
    assert [_rows(again), _rows(again)] == [first, second]
    assert _rows(make(1)) != first


def test_shuffle_keeps_leaves_aligned() -> None:
    for batch in Pipeline(source=_source(), batch_size=5, shuffle=True, rngs=nnx.Rngs(3)):
        np.testing.assert_array_equal(batch["y"], batch["x"] * 10)


def test_named_shuffle_stream_is_used() -> None:
    a = Pipeline(source=_source(), batch_size=5, shuffle=True, rngs=nnx.Rngs(0, shuffle=7))
    b = Pipeline(source=_source(), batch_size=5, shuffle=True, rngs=nnx.Rngs(7))
    assert _rows(a) == _rows(b)


def test_iterating_again_starts_a_new_epoch() -> None:
    pipeline = Pipeline(source=_source(), batch_size=5, shuffle=True, rngs=nnx.Rngs(0))
    iterator = iter(pipeline)
    next(iterator)
    assert pipeline.get_state() == {"epoch": 0, "batch_index": 1}
    np.testing.assert_array_equal(next(iter(pipeline))["x"], pipeline.epoch_order(1)[:5])
    assert pipeline.get_state() == {"epoch": 1, "batch_index": 1}


@pytest.mark.parametrize("stop_after", [0, 1, 3, 4, 6])
def test_resume_mid_epoch_exactly(stop_after: int) -> None:
    make = lambda: Pipeline(source=_source(), batch_size=5, shuffle=True, rngs=nnx.Rngs(0))  # noqa: E731
    reference = make()
    expected = _rows(reference) + _rows(reference)

    first = make()
    seen = [b["x"].tolist() for b in itertools.islice(iter(first), min(stop_after, 4))]
    if stop_after > 4:
        seen += [b["x"].tolist() for b in itertools.islice(iter(first), stop_after - 4)]
    state = first.get_state()

    resumed = make()
    resumed.set_state(state)
    rest = _rows(resumed)
    if state["epoch"] == 0:
        rest += _rows(resumed)
    assert seen + rest == expected


def test_generic_random_access_source() -> None:
    class Squares:
        def __len__(self) -> int:
            return 6

        def __getitem__(self, index: int) -> dict[str, np.ndarray]:
            return {"x": np.array(index), "sq": np.array([index * index])}

    batches = list(Pipeline(source=Squares(), batch_size=3))
    np.testing.assert_array_equal(batches[1]["x"], [3, 4, 5])
    assert batches[1]["sq"].shape == (3, 1)


def test_host_data_stays_on_host_until_the_shard_stage() -> None:
    seen_types = []
    mesh = jax.make_mesh((8,), ("data",))
    sharding = NamedSharding(mesh, P("data"))

    def record(batch):
        seen_types.append({type(v) for v in batch.values()})
        return batch

    sharder = ArraySharder()
    pipeline = Pipeline(
        source=_source(16), stages=[record, lambda b: sharder.shard(b, sharding)], batch_size=8
    )
    out = list(pipeline)
    assert seen_types == [{np.ndarray}] * 2
    assert all(isinstance(b["x"], jax.Array) and b["x"].sharding.spec == P("data") for b in out)
