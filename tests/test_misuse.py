"""Misuse, class by class: each input that was once mishandled gets the behaviour its rule
promises (docs/guarantees.md): the right result, or our TypeError/ValueError naming the
leaf or record and the way out, with the caller's data left as it was."""

from __future__ import annotations

import functools
import gc
import json
import re
import weakref
from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from _support.snapshots import snapshot
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import datarax
from datarax import viz
from datarax._compat import single_device_sharding
from datarax.distributed import setup_devices
from datarax.errors import HostMismatchError
from datarax.pipeline import Pipeline, prefetch_to_device
from datarax.sharding import ArraySharder, JaxProcessSharder, pad_to_multiple

MESH = jax.make_mesh((8,), ("data",))
ROWS = NamedSharding(MESH, P("data"))


def _assert_unchanged(tree: Any, before: Any) -> None:
    assert snapshot(tree) == before


def _same_placement(ours: jax.Array, reference: jax.Array) -> None:
    assert ours.dtype == reference.dtype and ours.shape == reference.shape
    assert ours.sharding.is_equivalent_to(reference.sharding, reference.ndim)
    assert np.asarray(ours).tobytes() == np.asarray(reference).tobytes()


class _Shard(nnx.Module):
    def __init__(self, sharding: NamedSharding):
        self.sharder, self.sharding = ArraySharder(), sharding

    def __call__(self, batch: Any) -> Any:
        return self.sharder.shard(batch, self.sharding)


# 1. Dtypes: any dtype jax.device_put accepts, through every entry point.

LOW_PRECISION = [
    jnp.bfloat16,
    jnp.int4,
    jnp.uint4,
    ml_dtypes.int2,
    jnp.float8_e4m3fn,
    ml_dtypes.float4_e2m1fn,
]


def _through(entry: str, batch: dict[str, np.ndarray]) -> Any:
    if entry == "shard":
        return ArraySharder().shard(batch, ROWS)
    if entry == "pad_to_multiple":
        return ArraySharder().shard(pad_to_multiple({"x": batch["x"][:13]}, 8)[0], ROWS)
    if entry == "parallel_transform":
        return ArraySharder().parallel_transform(batch, lambda b: b, MESH, P("data"))
    if entry == "pipeline stage":
        return next(iter(Pipeline(source=batch, stages=[_Shard(ROWS)], batch_size=16)))
    if entry == "shard_data":
        host = JaxProcessSharder(process_index=1, process_count=2).shard_data(batch)
        return ArraySharder().shard({k: np.concatenate([v, v]) for k, v in host.items()}, ROWS)
    return JaxProcessSharder().shard(JaxProcessSharder().shard_data(batch, ROWS), ROWS)


@pytest.mark.parametrize("dtype", LOW_PRECISION, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize(
    "entry",
    [
        "shard",
        "pad_to_multiple",
        "parallel_transform",
        "pipeline stage",
        "shard_data",
        "JaxProcessSharder.shard",
    ],
)
def test_low_precision_dtypes_go_wherever_device_put_takes_them(dtype, entry: str) -> None:
    x = (np.arange(16 * 2) % 3).reshape(16, 2).astype(dtype)
    batch = {"x": x}
    before = snapshot(batch)
    out = _through(entry, batch)
    expected = {
        "pad_to_multiple": np.concatenate([x[:13], np.zeros((3, 2), dtype)]),
        "shard_data": np.concatenate([x[8:], x[8:]]),
    }.get(entry, x)
    _same_placement(out["x"], jax.device_put(expected, ROWS))
    assert out["x"].dtype == np.dtype(dtype)
    _assert_unchanged(batch, before)


# 2. Iterators: a superseded iterator raises, never ends silently.


def _counting_pipeline(**options: Any) -> Pipeline:
    return Pipeline(source={"x": np.arange(20)}, batch_size=5, **options)


def test_set_state_supersedes_the_iterators_made_before() -> None:
    pipeline = _counting_pipeline(shuffle=True, rngs=nnx.Rngs(0))
    old = iter(pipeline)
    next(old)
    saved = pipeline.get_state()
    next(old)
    pipeline.set_state(saved | {"epoch": 3})
    with pytest.raises(RuntimeError, match="superseded"):
        next(old)
    resumed = next(iter(pipeline))["x"]
    np.testing.assert_array_equal(resumed, pipeline.epoch_order(3)[5:10])


def test_after_a_failing_stage_the_iterator_retries_that_batch() -> None:
    failures = [OSError("disk hiccup")]

    def flaky(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if batch["x"][0] == 5 and failures:
            raise failures.pop()
        return batch

    pipeline = _counting_pipeline(stages=[flaky])
    iterator = iter(pipeline)
    assert next(iterator)["x"][0] == 0
    with pytest.raises(OSError, match="disk hiccup"):
        next(iterator)
    assert pipeline.get_state()["batch_index"] == 1
    assert [b["x"][0] for b in iterator] == [5, 10, 15]


# 3. Host data: never written by the library or a stage; a failed batch is not consumed.


@pytest.mark.parametrize("layout", ["per host", "shuffled", "global"])
def test_a_stage_cannot_write_into_the_source(layout: str) -> None:
    source = {"x": np.arange(16), "y": np.arange(16) * 10}
    before = snapshot(source)

    def double_in_place(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        batch["x"] *= 2
        return batch

    options: dict[str, Any] = {"shuffle": True, "rngs": nnx.Rngs(0)} if layout == "shuffled" else {}
    if layout == "global":
        options["sharding"] = ROWS
    pipeline = Pipeline(source=source, stages=[double_in_place], batch_size=8, **options)
    note = r"Raised by stages\[0\] .* read-only arrays .* must return new arrays instead"
    with pytest.raises(ValueError, match=note):
        next(iter(pipeline))
    _assert_unchanged(source, before)
    assert pipeline.get_state()["batch_index"] == 0  # the failed batch was not consumed
    seen = []
    pipeline = Pipeline(
        source=source, stages=[lambda b: seen.append(b) or b], batch_size=8, **options
    )
    next(iter(pipeline))
    assert all(not leaf.flags.writeable for leaf in jax.tree.leaves(seen))


def test_placing_and_padding_leave_the_callers_arrays_alone() -> None:
    batch = {"x": np.arange(10.0), "y": np.asfortranarray(np.ones((10, 3)))}
    before = snapshot(batch)
    padded, _ = pad_to_multiple(batch, 8)
    ArraySharder().shard(padded, ROWS)
    JaxProcessSharder(process_index=0, process_count=2).shard_data(batch)
    _assert_unchanged(batch, before)


# 4. Containers: inside a pytree, tuples and lists are containers; top level, rows.


@pytest.mark.parametrize("host", [0, 1])
def test_tuples_and_lists_inside_a_dict_are_containers(host: int) -> None:
    images, labels = np.arange(20).reshape(10, 2), np.arange(10) * 10
    data = {"pair": (images, labels), "more": [labels, {"deep": (labels,)}]}
    before = snapshot(data)
    local = JaxProcessSharder(process_index=host, process_count=2).shard_data(data)
    rows = slice(5 * host, 5 * host + 5)
    assert isinstance(local["pair"], tuple) and len(local["pair"]) == 2
    np.testing.assert_array_equal(local["pair"][0], images[rows])
    np.testing.assert_array_equal(local["pair"][1], labels[rows])
    np.testing.assert_array_equal(local["more"][1]["deep"][0], labels[rows])
    _assert_unchanged(data, before)
    top = JaxProcessSharder(process_index=host, process_count=2).shard_data((images, labels))
    assert isinstance(top, tuple) and len(top) == 1  # at the top level, a tuple is rows
    assert top[0] is (images, labels)[host]
    with pytest.raises(TypeError, match=r"data\['ids'\]\[0\] is a int .* np\.asarray"):
        JaxProcessSharder(process_index=host, process_count=2).shard_data({"ids": [1, 2, 3]})


# 5. Scalars that differ per host: the replica check covers 0-d leaves (the cluster
# test is tests/sharding/test_multiprocess.py::test_replicas_that_differ_raise_on_every_host).


def test_the_replica_check_compares_0d_leaves_across_hosts() -> None:
    from datarax.sharding._batch_agreement import check_agreement, digest

    leaves = [("batch['lr']", NamedSharding(MESH, P()))]

    def message(value: float) -> dict[str, Any]:
        leaf = {"dtype": "float32", "local": [], "global": [], "error": None}
        digests = {"": digest(np.float32(value), ())}
        return {"tree": "t", "sharding": "s", "leaves": [leaf], "digests": [digests]}

    same = [json.loads(json.dumps(message(1.0))) for _ in range(2)]
    check_agreement(same, leaves)
    with pytest.raises(
        HostMismatchError,
        match=r"Processes \[0, 1\] all hold batch\['lr'\] \(a 0-d leaf, .*\.shard_data\(",
    ) as caught:
        check_agreement([message(1.0), message(2.0)], leaves)
    assert (caught.value.what, caught.value.leaf) == ("replicated data", "batch['lr']")


# 6. Caches keep no user object alive, and never return a stale result.


class _Scale(nnx.Module):
    def __init__(self, factor: float):
        self.factor = nnx.Param(jnp.asarray(factor))

    def __call__(self, block: jax.Array) -> jax.Array:
        return block * self.factor[...]

    def shifted(self, block: jax.Array) -> jax.Array:
        return block + self.factor[...]


def test_parallel_transform_keeps_no_closure_alive() -> None:
    x = np.ones((8, 2), np.float32)
    alive = []
    for step in range(6):
        weights = np.full(1 << 18, float(step), np.float32)  # 1 MiB each
        alive.append(weakref.ref(weights))
        out = ArraySharder().parallel_transform(x, lambda b, w=weights: b * w[0], MESH, P("data"))
        assert float(np.asarray(out)[0, 0]) == step
        del weights, out
    gc.collect()
    assert [ref() for ref in alive] == [None] * 6


class _Holder:
    def __init__(self, module: _Scale):
        self.module = module

    def __call__(self, block: jax.Array) -> jax.Array:
        return self.module(block)


_GLOBAL_MODULES: dict[str, _Scale] = {}


def _through_a_global(block: jax.Array) -> jax.Array:
    return _GLOBAL_MODULES["scale"](block)


def _nested(module: _Scale) -> Any:
    def outer() -> Any:
        def inner(block: jax.Array) -> jax.Array:
            return module(block)

        return inner

    return outer()


def _calls(module: _Scale) -> dict[str, Any]:
    listed, named, held = [module], {"scale": module}, SimpleNamespace(scale=module)
    _GLOBAL_MODULES["scale"] = module
    return {
        "module": module,
        "method": module.shifted,
        "closure": lambda b: module(b),
        "list": lambda b: listed[0](b),
        "dict": lambda b: named["scale"](b),
        "global": _through_a_global,
        "attribute": _Holder(module),
        "partial": functools.partial(_Scale.__call__, module),
        "nested_closure": _nested(module),
        "default": lambda b, scale=module: scale(b),
        "namespace": lambda b: held.scale(b),
    }


CALLS = list(_calls(_Scale(1.0)))


@pytest.mark.parametrize("rebind", [False, True], ids=["in_place", "rebound"])
@pytest.mark.parametrize("call", CALLS)
def test_parallel_transform_uses_a_modules_current_parameters(call: str, rebind: bool) -> None:
    """However the module is reached, a changed parameter gives the new result."""
    x = np.full((8, 2), 32.0, np.float32)
    module = _Scale(2.0)
    fn = _calls(module)[call]
    sharder = ArraySharder()

    before = sharder.parallel_transform(x, fn, MESH, P("data"))
    if rebind:
        module.factor = nnx.Param(jnp.asarray(5.0))
    else:
        module.factor[...] = jnp.asarray(5.0)
    after = sharder.parallel_transform(x, fn, MESH, P("data"))
    expected = (34.0, 37.0) if call == "method" else (64.0, 160.0)
    assert (np.asarray(before)[0, 0], np.asarray(after)[0, 0]) == expected
    owner = weakref.ref(module)
    _GLOBAL_MODULES.clear()
    del module, fn
    gc.collect()
    assert owner() is None


def test_a_modules_transform_is_compiled_once() -> None:
    module = _Scale(2.0)
    x = np.ones((8, 2), np.float32)
    traces = []
    original = _Scale.__call__

    def counting(self: _Scale, block: jax.Array) -> jax.Array:
        traces.append(1)
        return original(self, block)

    datarax.clear_caches()  # earlier tests compiled modules of the same graph
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_Scale, "__call__", counting)
        for factor in (2.0, 3.0, 4.0):
            module.factor[...] = jnp.asarray(factor)
            out = ArraySharder().parallel_transform(x, module, MESH, P("data"))
            assert float(np.asarray(out)[0, 0]) == factor
    assert len(traces) == 1


# 8. Loose arguments: bools take only bools; ints take numpy ints, not bools or floats.


@pytest.mark.parametrize("option", ["shuffle", "drop_remainder"])
@pytest.mark.parametrize("value", ["no", 0, None])
def test_a_bool_option_accepts_only_bools(option: str, value: Any) -> None:
    with pytest.raises(TypeError, match=f"{option} must be True or False, got"):
        Pipeline(source={"x": np.arange(8)}, batch_size=2, rngs=nnx.Rngs(0), **{option: value})
    with pytest.raises(TypeError, match="drop_remainder must be True or False"):
        JaxProcessSharder(drop_remainder=value)


def test_integer_arguments_take_numpy_ints_and_refuse_bools_and_floats() -> None:
    with pytest.raises(ValueError, match=r"needed must be an int in \[1, 4096\] .*100000"):
        setup_devices(100000)
    pipeline = Pipeline(source={"x": np.arange(20)}, batch_size=5)
    state = pipeline.get_state()
    pipeline.set_state(state | {"epoch": np.int64(1), "batch_index": np.int32(2)})
    assert pipeline.get_state()["epoch"] == 1
    for key, value in [("epoch", True), ("batch_index", 1.0), ("source_length", 20.0)]:
        with pytest.raises(TypeError, match=rf"state\['{key}'\] must be an int"):
            pipeline.set_state(state | {key: value})
    host = JaxProcessSharder(process_index=1, process_count=2)
    assert host.bounds(np.int64(10)) == (5, 10)
    with pytest.raises(TypeError, match=r"num_rows must be an int >= 0, got float: 10\.0"):
        host.bounds(10.0)
    data = defaultdict(list, {"x": np.arange(4)})
    local = host.shard_data(data)
    assert isinstance(local, defaultdict) and local["x"].tolist() == [2, 3]


# 9. Unclear errors: ours, naming the leaf or record and the way out.

REFUSED = {
    "datetime64": (np.arange(8).astype("datetime64[s]"), "astype('int64')"),
    "timedelta64": (np.arange(8).astype("timedelta64[ms]"), "astype('int64')"),
    "longdouble": (np.arange(8).astype(np.longdouble), "float64 or float32"),
    "byte-swapped": (np.arange(8).astype(">i4"), "native byte order"),
}
ENTRIES = ["shard", "pipeline", "parallel_transform", "prefetch"]


def _place_through(entry: str, batch: dict[str, Any]) -> Any:
    """`batch` through one of the library's entry points, as a list of placed batches."""
    if entry == "shard":
        return [ArraySharder().shard(batch, ROWS)]
    if entry == "pipeline":
        return list(Pipeline(source=batch, sharding=ROWS, batch_size=8))
    if entry == "parallel_transform":
        return [ArraySharder().parallel_transform(batch, lambda b: b, MESH, P("data"))]
    return list(prefetch_to_device([batch], sharding=ROWS))


@pytest.mark.parametrize("kind", list(REFUSED))
@pytest.mark.parametrize("entry", ENTRIES)
def test_a_dtype_jax_cannot_place_is_named_with_the_fix(kind: str, entry: str) -> None:
    x, fix = REFUSED[kind]
    batch = {"x": x, "ok": np.arange(8)}
    before = snapshot(batch)
    with pytest.raises(TypeError, match=r"batch\['x'\] has dtype .*" + re.escape(fix)):
        _place_through(entry, batch)
    _assert_unchanged(batch, before)


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_dtype_the_backend_may_lack_goes_where_device_put_goes(entry: str) -> None:
    # JAX knows float6; CPU devices take it from jax 0.12 on and refuse it before. Every
    # entry point then does what jax.device_put does: place it, or name the leaf.
    batch = {"x": np.arange(8).astype(ml_dtypes.float6_e2m3fn), "ok": np.arange(8)}
    before = snapshot(batch)
    try:
        expected = jax.device_put(batch["x"], ROWS)
    except Exception:  # any refusal: its type differs between jax versions
        with pytest.raises(TypeError, match=r"batch\['x'\] has dtype float6_e2m3fn.*Convert it to"):
            _place_through(entry, batch)
    else:
        for placed in _place_through(entry, batch):
            assert placed["x"].dtype == expected.dtype
            np.testing.assert_array_equal(np.asarray(placed["x"]), np.asarray(expected))
    _assert_unchanged(batch, before)


def test_deleted_or_donated_arrays_are_named() -> None:
    donated = jnp.arange(8.0)
    jax.jit(lambda a: a * 2, donate_argnums=0)(donated)
    assert donated.is_deleted()
    where = r"is a jax\.Array that has been deleted or donated .* donate_argnums"
    with pytest.raises(TypeError, match=r"batch\['x'\] " + where):
        ArraySharder().shard({"x": donated}, ROWS)
    with pytest.raises(TypeError, match=r"batch\['x'\] " + where):
        pad_to_multiple({"x": donated}, 8)
    host = JaxProcessSharder(process_index=0, process_count=2)
    with pytest.raises(TypeError, match=r"data\['x'\] " + where):
        host.shard_data({"x": donated})
    with pytest.raises(TypeError, match=r"data " + where):
        host.shard_data(donated)
    with pytest.raises(TypeError, match=r"data\['x'\] " + where):
        JaxProcessSharder().shard_data({"x": donated}, ROWS)
    with pytest.raises(TypeError, match=r"source\['x'\] " + where):
        Pipeline(source={"x": donated}, batch_size=4)


def _gone(how: str, live: jax.Array) -> jax.Array:
    """`live`, deleted by hand or donated to a jitted function."""
    if how == "delete":
        live.delete()
    else:
        jax.jit(lambda a: a * 2, donate_argnums=0)(live)
    assert live.is_deleted()
    return live


@pytest.mark.parametrize("how", ["delete", "donate"])
@pytest.mark.parametrize("where", ["ArraySharder.shard", "a Pipeline stage", "JaxProcessSharder"])
def test_a_deleted_array_is_named_when_its_signature_is_cached(how: str, where: str) -> None:
    """A live batch of the same signature is placed first, so the placement plan is
    cached; the deleted leaf is refused all the same, on the target sharding already
    (where device_put returned it as it was) and on another one (a RuntimeError)."""
    sharder = JaxProcessSharder() if where == "JaxProcessSharder" else ArraySharder()
    labels = np.arange(8)
    for start in (ROWS, NamedSharding(MESH, P())):
        held = {"x": jax.device_put(jnp.arange(8.0), start), "y": labels}
        if where == "a Pipeline stage":
            pipeline = Pipeline(
                source={"i": np.arange(16)},
                stages=[lambda batch, held=held: dict(held), _Shard(ROWS)],
                batch_size=8,
            )
            batches = iter(pipeline)
            assert not next(batches)["x"].is_deleted()
            _gone(how, held["x"])
            with pytest.raises(TypeError, match=r"batch\['x'\] is a jax\.Array that has been"):
                next(batches)
            continue
        assert not sharder.shard(held, ROWS)["x"].is_deleted()
        held["x"] = _gone(how, jax.device_put(jnp.arange(8.0), start))
        with pytest.raises(TypeError, match=r"batch\['x'\] is a jax\.Array that has been"):
            sharder.shard(held, ROWS)
        assert held["y"] is labels


class _Records:
    def __init__(self, records: list[Any]):
        self.records = records

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> Any:
        return self.records[index]


@pytest.mark.parametrize(
    ("records", "match"),
    [
        ([{"x": np.zeros(2)}, {"x": np.zeros(3)}], r"source\[0\]\['x'\] has shape \(2,\), .*"),
        ([{"x": 1}, {"y": 2}], r"source\[1\] has structure .* but source\[0\] has"),
        ([{"x": 1}, {"x": 2, 3: 4}], r"source\[1\] is a dict with keys of different types"),
    ],
)
def test_records_that_differ_are_named(records: list[Any], match: str) -> None:
    before = snapshot(records)
    with pytest.raises((TypeError, ValueError), match=match):
        list(Pipeline(source=_Records(records), batch_size=2))
    _assert_unchanged(records, before)


@pytest.mark.parametrize(
    "entry",
    [
        "shard",
        "shard to one device",
        "pad_to_multiple",
        "shard_data",
        "shard_data with sharding",
        "JaxProcessSharder.shard",
        "parallel_transform",
        "prefetch",
        "Pipeline source",
    ],
)
def test_dict_keys_of_mixed_types_are_named_at_every_entry(entry: str) -> None:
    batch = {"inputs": {"a": np.arange(8), 1: np.arange(8)}}
    before = snapshot(batch)
    root = "source" if entry == "Pipeline source" else "data" if "shard_data" in entry else "batch"
    calls = {
        "shard": lambda: ArraySharder().shard(batch, ROWS),
        "shard to one device": lambda: ArraySharder().shard(
            batch, single_device_sharding(jax.devices()[0])
        ),
        "pad_to_multiple": lambda: pad_to_multiple(batch, 8),
        "shard_data": lambda: JaxProcessSharder(process_index=0, process_count=2).shard_data(batch),
        "shard_data with sharding": lambda: JaxProcessSharder().shard_data(batch, ROWS),
        "JaxProcessSharder.shard": lambda: JaxProcessSharder().shard(batch, ROWS),
        "parallel_transform": lambda: ArraySharder().parallel_transform(
            batch, lambda b: b, MESH, P("data")
        ),
        "prefetch": lambda: list(prefetch_to_device([batch], sharding=ROWS)),
        "Pipeline source": lambda: Pipeline(source=batch, batch_size=4),
    }
    with pytest.raises(
        TypeError,
        match=rf"{root}\['inputs'\] is a dict with keys of different types .*all strings",
    ):
        calls[entry]()
    _assert_unchanged(batch, before)


def test_divisibility_advice_fits_the_dimension() -> None:
    mesh = jax.make_mesh((4, 2), ("data", "model"))
    batch = {"x": np.zeros((8, 3))}
    with pytest.raises(ValueError) as info:
        ArraySharder().shard(batch, NamedSharding(mesh, P("data", "model")))
    message = str(info.value)
    assert "batch['x'] has size 3 in dimension 1 (shape (8, 3))" in message
    assert "mesh axis 'model' (2 devices)" in message
    assert "Pad or crop dimension 1 to a multiple of 2" in message
    assert "batch size" not in message


def test_a_python_int_too_large_for_jax_is_named() -> None:
    batch = {"step": 2**40, "x": np.arange(8)}
    sharder = ArraySharder()
    sharder.shard({"step": 3, "x": np.arange(8)}, ROWS)  # the same signature, planned
    with pytest.raises(ValueError, match=r"batch\['step'\] is the python int 1099511627776, wh"):
        sharder.shard(batch, ROWS)
    assert batch["step"] == 2**40


# 10. viz: empty arrays are refused clearly; uneven holdings are not averaged.


def test_viz_refuses_empty_arrays_and_reports_uneven_holdings() -> None:
    with pytest.raises(ValueError, match="size 0"):
        viz.plot_sharding(jax.device_put(np.zeros((8, 0)), ROWS))
    tree = {
        "alone": jax.device_put(np.zeros(16, np.float32), single_device_sharding(jax.devices()[0])),
        "split": jax.device_put(np.zeros(64, np.float32), ROWS),
    }
    assert viz.summarize(tree).splitlines()[-1] == (
        "device 0 holds 96 bytes; devices 1-7 hold 32 bytes each"
    )


# 11. Documents, Mixture and Packed: one index rule and one lengths rule for all three.


def _sources() -> dict[str, Any]:
    from datarax.pipeline import Documents, Mixture, Packed

    documents = Documents([np.arange(5), np.arange(3), np.arange(7)])
    return {
        "documents": documents,
        "documents of the mixture": Mixture({"a": documents}, [1], rngs=nnx.Rngs(0)),
        "packed rows": Packed(documents, 4),
    }


@pytest.mark.parametrize("what", ["documents", "documents of the mixture", "packed rows"])
def test_every_documents_class_takes_one_int_and_nothing_else(what: str) -> None:
    source = _sources()[what]
    count = len(source)
    tokens = (lambda item: item["tokens"]) if what == "packed rows" else (lambda item: item)
    assert np.array_equal(tokens(source[np.int64(0)]), tokens(source[0]))
    assert np.array_equal(tokens(source[-1]), tokens(source[count - 1]))
    for index in (True, np.bool_(False), 1.5, "0", None, [0]):
        with pytest.raises(TypeError, match=f"{what.capitalize()} are indexed by one int, got"):
            source[index]
    for index in (count, -count - 1):
        with pytest.raises(IndexError, match=f"Index {index} is out of range for {count} {what}"):
            source[index]


@pytest.mark.parametrize(
    ("read", "what"),
    [("documents", "documents"), ("documents of the mixture", "documents of the mixture")],
)
def test_batched_reads_take_a_1d_sequence_of_ints_and_nothing_else(read: str, what: str) -> None:
    source = _sources()[read]
    assert len(source.read(np.array([0, -1, 0]))) == 3
    for indices in ([True, False], [0.5], [[0]], 0, None):
        with pytest.raises(TypeError, match=f"Indices of {what} must be a 1-D sequence of ints"):
            source.read(indices)
    with pytest.raises(IndexError, match=f"Index 9 is out of range for {len(source)} {what}"):
        source.read([0, 9])


class _Lengths:
    """A documents source whose lengths are whatever it is given."""

    def __init__(self, lengths: Any):
        self.lengths = lengths

    def __len__(self) -> int:
        return 2

    def __getitem__(self, index: int) -> np.ndarray:
        return np.arange(3)

    def read(self, indices: Any) -> list[np.ndarray]:
        return [np.arange(3) for _ in indices]


@pytest.mark.parametrize(
    ("lengths", "error", "match"),
    [
        ([1.0, 2.0], TypeError, "must hold integers"),
        ([[1, 2]], ValueError, "must be 1-D"),
        ([1, -2], ValueError, r"\[1\] is -2; a document's length cannot be negative"),
        ([1, 2, 3], ValueError, "has 3 entries for 2 documents"),
    ],
)
def test_one_lengths_rule_gives_one_error_type_wherever_lengths_enter(
    lengths: Any, error: type[Exception], match: str
) -> None:
    from datarax.pipeline import Documents, Mixture, Packed

    with pytest.raises(error, match=match):
        Documents([np.arange(3), np.arange(3)], lengths=lengths)
    with pytest.raises(error, match=match):
        Packed(_Lengths(lengths), 4)
    with pytest.raises(error, match=match):
        Mixture({"a": _Lengths(lengths)}, [1], rngs=nnx.Rngs(0))
