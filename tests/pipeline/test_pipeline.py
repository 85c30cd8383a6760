"""Pipeline: batching, shuffling per epoch, resuming exactly, remainder handling."""

import collections
import itertools
import json
import pickle
import re
import time

import jax
import numpy as np
import pytest
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from datarax.errors import PipelineStateError, SupersededIteratorError
from datarax.pipeline import ArraySource, Pipeline, _agreement, prefetch_to_device
from datarax.sharding import ArraySharder, JaxProcessSharder, _global_arrays


def _source(rows: int = 20) -> dict[str, np.ndarray]:
    return {"x": np.arange(rows), "y": np.arange(rows) * 10}


def _rows(pipeline) -> list[list[int]]:
    return [batch["x"].tolist() for batch in pipeline]


def _position(pipeline: Pipeline) -> tuple[int, int]:
    state = pipeline.get_state()
    return state["epoch"], state["batch_index"]


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
    assert _position(pipeline) == (0, 1)
    np.testing.assert_array_equal(next(iter(pipeline))["x"], pipeline.epoch_order(1)[:5])
    assert _position(pipeline) == (1, 1)


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


def test_state_is_small_json_and_names_what_must_match() -> None:
    pipeline = Pipeline(source=_source(), batch_size=5, shuffle=True, rngs=nnx.Rngs(0))
    next(iter(pipeline))
    state = pipeline.get_state()
    assert json.loads(json.dumps(state)) == state
    assert set(state) == {"epoch", "batch_index", "batch_size", "source_length", "seed"}
    assert (state["batch_size"], state["source_length"]) == (5, 20)
    again = Pipeline(source=_source(), batch_size=5, shuffle=True, rngs=nnx.Rngs(0))
    again.set_state(state | {"epoch": np.int64(0), "batch_index": np.int64(1)})
    assert _position(again) == (0, 1)


@pytest.mark.parametrize(
    ("other", "match"),
    [
        ({"batch_size": 4}, "batch_size=5, but this one has batch_size=4"),
        ({"source": _source(25)}, "source_length=20, but this one has source_length=25"),
        ({"rngs": nnx.Rngs(1)}, "seed="),
    ],
)
def test_a_state_from_another_pipeline_is_refused(other: dict, match: str) -> None:
    settings = {"source": _source(), "batch_size": 5, "shuffle": True, "rngs": nnx.Rngs(0)}
    state = Pipeline(**settings).get_state()
    with pytest.raises(ValueError, match=re.escape(match)):
        Pipeline(**(settings | other)).set_state(state)


def test_malformed_states_are_refused() -> None:
    pipeline = Pipeline(source=_source(), batch_size=5)
    state = pipeline.get_state()
    with pytest.raises(ValueError, match="with keys"):
        pipeline.set_state({"epoch": 0, "batch_index": 1})
    with pytest.raises(TypeError, match=r"state\['epoch'\] must be an int"):
        pipeline.set_state(state | {"epoch": True})
    with pytest.raises(PipelineStateError, match=r"must be in \[0, 4\], got 5") as raised:
        pipeline.set_state(state | {"batch_index": 5})
    assert raised.value.key == "batch_index"


def test_a_superseded_iterator_raises_instead_of_stopping_silently() -> None:
    pipeline = Pipeline(source=_source(), batch_size=5)
    with pytest.raises(SupersededIteratorError, match=r"newer iter.* build a second Pipeline"):
        for _ in pipeline:
            list(pipeline)
    with pytest.raises(SupersededIteratorError):
        list(zip(pipeline, pipeline, strict=False))
    first = prefetch_to_device(pipeline, size=1)
    second = prefetch_to_device(pipeline, size=1)
    with pytest.raises(SupersededIteratorError):
        list(first)
    assert [b["x"][0] for b in second] == [0, 5, 10, 15]


@pytest.mark.parametrize("shuffle", [False, True])
def test_a_stage_cannot_write_into_the_source(shuffle: bool) -> None:
    source = _source()

    def double_in_place(batch):
        batch["x"] *= 2
        return batch

    pipeline = Pipeline(
        source=source, stages=[double_in_place], batch_size=5, shuffle=shuffle, rngs=nnx.Rngs(0)
    )
    with pytest.raises(ValueError, match="read-only") as raised:
        next(iter(pipeline))
    assert raised.value.__notes__[0].startswith(
        "Raised by stages[0] of the pipeline. Its batch held read-only arrays"
    )
    np.testing.assert_array_equal(source["x"], np.arange(20))
    assert _position(pipeline) == (0, 0)  # the failed batch was not consumed


def test_a_failing_stage_leaves_its_batch_for_the_resume() -> None:
    calls = []

    def flaky(batch):
        calls.append(batch["x"].tolist())
        if len(calls) == 2:
            raise OSError("disk hiccup")
        return batch

    pipeline = Pipeline(source=_source(), stages=[flaky], batch_size=5)
    iterator = iter(pipeline)
    next(iterator)
    with pytest.raises(OSError, match="disk hiccup"):
        next(iterator)
    pipeline.set_state(pipeline.get_state())
    assert next(iter(pipeline))["x"].tolist() == [5, 6, 7, 8, 9]


@pytest.mark.parametrize("option", ["shuffle", "drop_remainder"])
def test_bool_options_accept_only_bools(option: str) -> None:
    with pytest.raises(TypeError, match=f"{option} must be True or False, got str: 'no'"):
        Pipeline(source=_source(), batch_size=5, rngs=nnx.Rngs(0), **{option: "no"})


def test_records_of_different_structure_or_shape_are_named() -> None:
    class Uneven:
        def __init__(self, records):
            self.records = records

        def __len__(self) -> int:
            return len(self.records)

        def __getitem__(self, index: int):
            return self.records[index]

    shapes = Uneven(
        [{"x": np.zeros(2)}, {"x": np.zeros(2)}, {"x": np.zeros(3)}, {"x": np.zeros(2)}]
    )
    with pytest.raises(
        ValueError,
        match=r"source\[0\]\['x'\] has shape \(2,\), but the same leaf of source\[2\] has \(3,\)",
    ):
        list(Pipeline(source=shapes, batch_size=4))
    keys = Uneven([{"x": 1}, {"y": 2}])
    with pytest.raises(ValueError, match=r"source\[1\] has structure .* but source\[0\] has"):
        list(Pipeline(source=keys, batch_size=2))
    with pytest.raises(TypeError, match="keys of different types"):
        Pipeline(source={"a": np.arange(4), 1: np.arange(4)}, batch_size=2)


def test_text_records_stay_lists_for_a_host_stage() -> None:
    lines = ["a", "bb", "ccc", "dddd"]
    pipeline = Pipeline(
        source=lines, stages=[lambda b: np.array([len(s) for s in b])], batch_size=2
    )
    assert [b.tolist() for b in pipeline] == [[1, 2], [3, 4]]


def test_a_namedtuple_or_tuple_source_is_its_columns_not_two_records() -> None:
    columns = collections.namedtuple("Columns", ["image", "label"])
    source = columns(np.arange(64 * 2).reshape(64, 2), np.arange(64))
    pipeline = Pipeline(source=source, batch_size=8)
    assert isinstance(pipeline.source, ArraySource) and pipeline.source_length == 64
    first = next(iter(pipeline))
    assert type(first) is columns and first.label.tolist() == list(range(8))
    assert first.image.shape == (8, 2)
    pair = Pipeline(source=(np.arange(64), np.arange(64) * 2), batch_size=16)
    assert [b[1].tolist() for b in pair][-1] == list(range(96, 128, 2))


def test_a_grain_array_record_source_reads_only_the_rows_asked_for(tmp_path) -> None:
    from array_record.python.array_record_module import ArrayRecordWriter
    from grain.python import ArrayRecordDataSource

    path = str(tmp_path / "rows.array_record")
    writer = ArrayRecordWriter(path, "group_size:1")
    for row in range(12):
        writer.write(np.array([row, row * row], np.int64).tobytes())
    writer.close()

    def decode(batch: list[bytes]) -> np.ndarray:
        return np.stack([np.frombuffer(record, np.int64) for record in batch])

    pipeline = Pipeline(
        source=ArrayRecordDataSource([path]),
        stages=[decode],
        batch_size=4,
        shuffle=True,
        rngs=nnx.Rngs(2),
    )
    batches = [batch[:, 0].tolist() for batch in pipeline]
    assert sorted(row for batch in batches for row in batch) == list(range(12))
    assert batches[0] == pipeline.epoch_order(0)[:4].tolist()


def test_memory_mapped_npy_source(tmp_path) -> None:
    np.save(tmp_path / "x.npy", np.arange(40).reshape(20, 2))
    source = {"x": np.load(tmp_path / "x.npy", mmap_mode="r")}
    pipeline = Pipeline(source=source, batch_size=8, shuffle=True, rngs=nnx.Rngs(0))
    first = next(iter(pipeline))["x"]
    np.testing.assert_array_equal(first[:, 0], pipeline.epoch_order(0)[:8] * 2)


def test_prefetch_saves_the_state_of_the_batch_the_step_consumed() -> None:
    make = lambda: Pipeline(source=_source(), batch_size=2, shuffle=True, rngs=nnx.Rngs(0))  # noqa: E731
    expected = _rows(make())
    pipeline = make()
    with prefetch_to_device(pipeline, size=3) as batches:
        taken = [next(batches)["x"].tolist() for _ in range(4)]
        deadline = time.monotonic() + 30
        while pipeline.get_state()["batch_index"] < 4 + 3:  # the thread fills the buffer
            assert time.monotonic() < deadline, "the thread did not read ahead"
            time.sleep(0.001)
        state = batches.get_state()
    assert state["batch_index"] == 4
    resumed = make()
    resumed.set_state(state)
    assert taken + _rows(resumed) == expected
    with pytest.raises(TypeError, match="have no get_state"):
        prefetch_to_device(iter([1, 2])).get_state()


class _PlainShard:
    """A stage that holds a sharder and is no nnx.Module."""

    def __init__(self, sharder: JaxProcessSharder, sharding: NamedSharding):
        self.sharder, self.sharding = sharder, sharding

    def __call__(self, batch: dict) -> dict:
        return self.sharder.shard(batch, self.sharding)


def test_a_pipeline_agrees_from_the_first_batch_that_crosses_hosts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the pipeline does decides, not what its stages hold: one process plays a
    2-process job whose exchanges each return this process's own text."""
    agreed: list[list[int | str]] = []

    def exchange(text: str, what: str = "") -> list[str]:
        if what == "Pipeline iteration":
            agreed.append(json.loads(text))
        return [text]

    monkeypatch.setattr(jax, "process_count", lambda: 2)
    monkeypatch.setattr(_agreement, "exchange", exchange)
    monkeypatch.setattr(_global_arrays, "exchange", exchange)
    sharding = NamedSharding(jax.make_mesh((8,), ("data",)), P("data"))
    held = {"sharder": JaxProcessSharder()}
    ways = {
        "plain class": [_PlainShard(JaxProcessSharder(), sharding)],
        "dict": [lambda b: held["sharder"].shard(b, sharding)],
        "prefetch": [],
    }
    for way, stages in ways.items():
        agreed.clear()
        pipeline = Pipeline(source=_source(24), stages=stages, batch_size=8)
        for _ in range(2):  # two epochs
            if way == "prefetch":
                placed = prefetch_to_device(
                    pipeline, sharding=sharding, sharder=JaxProcessSharder()
                )
                assert len(list(placed)) == 3
            else:
                assert len(list(pipeline)) == 3
        # Once at its first global batch, then at the start of the second epoch.
        assert agreed == [[3, "stop"], [3, "stop"]], way
    for options in ({"stages": [lambda b: b]}, {"stages": ways["dict"], "multihost": False}):
        agreed.clear()
        alone = Pipeline(source=_source(24), batch_size=8, **options)
        assert [len(list(alone)) for _ in range(2)] == [3, 3]
        assert agreed == []  # never waits for another host
    told = Pipeline(source=_source(24), batch_size=8, multihost=True)
    assert [len(list(told)) for _ in range(2)] == [3, 3]
    assert agreed == [[3, "stop"], [3, "stop"]]


def test_records_of_different_dtypes_are_named_not_promoted() -> None:
    records = [{"x": np.zeros(2, np.int32)}, {"x": np.zeros(2, np.float32)}]
    with pytest.raises(
        ValueError,
        match=r"source\[0\]\['x'\] is int32, but the same leaf of source\[1\] is float32",
    ):
        list(Pipeline(source=records, batch_size=2))


@pytest.mark.parametrize("rows", [slice(2, 6), np.array([5, 1]), 3])
def test_an_array_source_gives_read_only_rows_and_leaves_the_callers_arrays_alone(
    rows: slice | np.ndarray | int,
) -> None:
    images, labels = np.zeros((8, 2, 2)), np.arange(8)
    source = ArraySource({"image": images, "label": labels})

    # As built, and as a worker unpickles it (numpy's unpickled arrays are writeable).
    for copy in (source, pickle.loads(pickle.dumps(source))):
        got = copy[rows]
        assert not got["image"].flags.writeable and not got["label"].flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            got["image"][...] = 1
    assert images.flags.writeable and labels.flags.writeable  # the caller's, unchanged
