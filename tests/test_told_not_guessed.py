"""Decisions made from what the user passed or did, never guessed (docs/guarantees.md).

The multi-process halves (a sharder held by a plain class or a dict, a second sharder's
replica check) are in test_multiprocess.py; parallel_transform's reuse rule is in
test_misuse.py.
"""

from __future__ import annotations

import collections
import types
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np
import pytest
from flax import nnx
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import datarax
from datarax._caches import cache_sizes
from datarax.errors import SourceChangedError, StageStopIterationError
from datarax.pipeline import Pipeline, prefetch_to_device
from datarax.sharding import ArraySharder, JaxProcessSharder, RowLedger, pretend_hosts

MESH = jax.make_mesh((8,), ("data",))
DATA = NamedSharding(MESH, P("data"))


def _source(rows: int = 16) -> dict[str, np.ndarray]:
    return {"x": np.arange(rows, dtype=np.float32)}


def _stop(batch: Any) -> Any:
    raise StopIteration


# A StopIteration from user code is an error, never the end of an epoch.


def test_a_stage_that_raises_stop_iteration_is_an_error() -> None:
    pipeline = Pipeline(source=_source(), stages=[lambda b: b, _stop], batch_size=4)
    iterator = iter(pipeline)
    with pytest.raises(StageStopIterationError, match="would end the epoch early") as raised:
        next(iterator)
    assert raised.value.stage == "stages[1]"
    assert pipeline.get_state()["batch_index"] == 0  # the batch was not consumed


def test_a_device_stage_that_raises_stop_iteration_is_an_error() -> None:
    pipeline = Pipeline(source=_source(), batch_size=8, sharding=DATA, device_stages=[_stop])
    with pytest.raises(StageStopIterationError) as raised:
        list(pipeline)
    assert raised.value.stage == "device_stages[0]"


class _StoppingSource:
    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        if index == 5:
            raise StopIteration
        return {"x": np.float32(index)}


def test_a_source_that_raises_stop_iteration_is_an_error() -> None:
    with pytest.raises(StageStopIterationError) as raised:
        list(Pipeline(source=_StoppingSource(), batch_size=4))
    assert raised.value.stage == "the source's __getitem__"


def test_a_place_function_that_raises_stop_iteration_is_an_error() -> None:
    batches = [{"x": np.ones(8)}] * 3
    with (
        prefetch_to_device(batches, place=_stop) as placed,
        pytest.raises(StageStopIterationError, match=r"^place raised StopIteration"),
    ):
        next(placed)


class _ShrinkingSource:
    def __init__(self) -> None:
        self.rows = 16

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        if index >= self.rows:
            raise IndexError(index)
        return {"x": np.float32(index)}


def test_a_source_whose_length_changed_is_an_error() -> None:
    source = _ShrinkingSource()
    pipeline = Pipeline(source=source, batch_size=4)
    batches: Iterator[Any] = iter(pipeline)
    next(batches)
    source.rows = 6  # shrinks after the pipeline was built
    with pytest.raises(SourceChangedError, match="build a new Pipeline") as raised:
        next(batches)
    assert (raised.value.built, raised.value.now) == (16, 6)


# Containers are what jax.tree_util says they are.


class _HomeMadeMapping(collections.abc.Mapping):
    def __init__(self, data: dict[str, Any]):
        self._data = data

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)


UNKNOWN = {
    "mappingproxy": lambda d: types.MappingProxyType(d),
    "home-made Mapping": _HomeMadeMapping,
    "nested mappingproxy": lambda d: {"inner": types.MappingProxyType(d)},
}


@pytest.mark.parametrize("kind", list(UNKNOWN))
def test_a_mapping_jax_does_not_know_is_refused_everywhere(kind: str) -> None:
    data = {"x": np.arange(8)}
    wrapped = UNKNOWN[kind](data)
    host = JaxProcessSharder(process_index=1, process_count=2)
    message = r"container jax.tree_util does not know"
    with pytest.raises(TypeError, match=message):
        host.shard_data(wrapped)
    with pytest.raises(TypeError, match=message):
        JaxProcessSharder().shard_data(wrapped, DATA)
    with pytest.raises(TypeError, match=message):
        ArraySharder().shard(wrapped, DATA)
    with pytest.raises(TypeError, match=message):
        Pipeline(source=wrapped, batch_size=4)
    np.testing.assert_array_equal(data["x"], np.arange(8))


def test_mappings_jax_knows_are_split_like_a_dict() -> None:
    host = JaxProcessSharder(process_index=1, process_count=2)
    ordered = host.shard_data(collections.OrderedDict(x=np.arange(8), y=np.arange(8) * 2))
    assert isinstance(ordered, collections.OrderedDict)
    assert ordered["x"].tolist() == [4, 5, 6, 7] and ordered["y"].tolist() == [8, 10, 12, 14]
    nested = host.shard_data({"a": {"b": np.arange(4)}, "lr": np.float32(0.1)})
    assert nested["a"]["b"].tolist() == [2, 3] and nested["lr"] == np.float32(0.1)


# One placement model: exact, and refusing what JAX refuses.


def test_a_mesh_that_lists_a_device_twice_is_refused() -> None:
    devices = jax.devices()
    twice = Mesh(np.array([devices[0], devices[0], *devices[1:3]]), ("data",))
    sharding = NamedSharding(twice, P("data"))
    with pytest.raises(ValueError, match=r"lists device 0 more than once \(4 entries, 3 distinct"):
        RowLedger(sharding, 8)
    with pytest.raises(ValueError, match=r"lists device 0 more than once"):
        JaxProcessSharder().shard_data({"x": np.arange(8)}, sharding)
    with pytest.raises(ValueError, match=r"lists device 1 more than once"):
        pretend_hosts(2, [devices[0], devices[1], devices[1], devices[2]])


def test_host_ids_of_any_size_are_exact() -> None:
    big = 2**60
    host_of = {d.id: big + (d.id % 2) for d in jax.devices()}  # float64 cannot tell these apart
    ledger = RowLedger(DATA, 16, host_of=host_of)
    assert ledger.hosts == (big, big + 1)
    assert ledger.rows_of_host(big).tolist() == [0, 1, 4, 5, 8, 9, 12, 13]
    assert ledger.rows_of_host(big + 1).tolist() == [2, 3, 6, 7, 10, 11, 14, 15]
    huge = {d.id: 2**70 + d.id // 4 for d in jax.devices()}  # beyond int64
    assert RowLedger(DATA, 16, host_of=huge).blocks_of_host(2**70 + 1) == [(8, 16)]


@pytest.mark.parametrize("host", ["0", 0.0, None, -1])
def test_a_host_that_is_not_a_host_id_is_refused(host: Any) -> None:
    ledger = RowLedger(DATA, 16, host_of=pretend_hosts(2))
    with pytest.raises((TypeError, ValueError), match=r"host must be an int"):
        ledger.rows_of_host(host)
    with pytest.raises((TypeError, ValueError), match=r"host must be an int"):
        ledger.blocks_of_host(host)


# Caches: bounded, in one registry, and clearing them changes no result.


class _Double(nnx.Module):
    def __call__(self, block: jax.Array) -> jax.Array:
        return block * 2


def test_every_cache_is_bounded_and_clear_caches_empties_them_all() -> None:
    batch = {"x": np.arange(16.0)}
    before = np.asarray(ArraySharder().shard(batch, DATA)["x"])
    ArraySharder().parallel_transform(np.ones(8), _Double(), MESH, P("data"))
    sizes = cache_sizes()
    assert {"placement plans", "global array plans", "compiled module transforms"} <= set(sizes)
    assert all(0 <= entries <= bound for entries, bound in sizes.values())
    assert sizes["placement plans"][0] > 0
    datarax.clear_caches()
    assert all(entries == 0 for entries, _ in cache_sizes().values())
    np.testing.assert_array_equal(np.asarray(ArraySharder().shard(batch, DATA)["x"]), before)


def test_out_spec_must_be_a_partition_spec() -> None:
    with pytest.raises(TypeError, match=r"out_spec must be a jax.sharding.PartitionSpec"):
        ArraySharder().parallel_transform(np.ones((8, 2)), lambda b: b, MESH, P("data"), ["data"])


# The exchange between hosts: the coordinator client, or a clear error.


def test_without_a_coordinator_client_the_exchange_names_the_jax_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from jax._src import distributed

    from datarax._exchange import exchange

    monkeypatch.setattr(jax, "process_count", lambda: 2)
    monkeypatch.setattr(distributed.global_state, "client", None)
    with pytest.raises(RuntimeError, match=rf"JAX {jax.__version__} shows no coordinator client"):
        exchange("text")


@pytest.mark.parametrize("name", ["batch_size", "drop_remainder", "shuffle", "source", "stages"])
def test_what_a_pipeline_was_built_with_cannot_be_changed_later(name: str) -> None:
    pipeline = Pipeline(source=_source(16), batch_size=4)
    before = getattr(pipeline, name)
    with pytest.raises(AttributeError, match=rf"Pipeline.{name} is fixed once the pipeline is"):
        setattr(pipeline, name, 8 if name == "batch_size" else before)
    assert len(pipeline) == 4 and len(list(pipeline)) == 4


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"rngs": 0}, TypeError, r"rngs must be an nnx.Rngs, e.g. rngs=nnx.Rngs\(0\), got int"),
        ({"rngs": jax.random.key(0)}, TypeError, r"rngs must be an nnx.Rngs"),
        ({"rngs": nnx.Rngs(params=0)}, ValueError, r"neither a 'shuffle' nor a 'default'"),
        ({"stages": _stop}, TypeError, r"stages must be a list of stages, got function"),
        ({"stages": 3}, TypeError, r"stages must be a list of stages, got int"),
    ],
)
def test_pipeline_arguments_of_the_wrong_kind_get_our_error(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        Pipeline(source=_source(16), batch_size=4, shuffle="rngs" in options, **options)
