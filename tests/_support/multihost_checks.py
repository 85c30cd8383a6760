"""Functions that every process of a local cluster runs for `sharding/test_multiprocess.py`.

Each returns plain numpy/python values; the test process makes the assertions.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import threading
import time
from typing import Any

import jax
import numpy as np
from flax import nnx
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from datarax._exchange import exchange
from datarax.pipeline import Pipeline, prefetch_to_device
from datarax.sharding import ArraySharder, JaxProcessSharder, RowLedger

GLOBAL_ROWS = 16


def _global_data() -> dict[str, np.ndarray]:
    return {
        "x": np.arange(GLOBAL_ROWS * 3, dtype=np.float32).reshape(GLOBAL_ROWS, 3),
        "id": np.arange(GLOBAL_ROWS, dtype=np.int32),
    }


def _gather(array: jax.Array) -> np.ndarray:
    """The whole global array on this host."""
    return np.asarray(multihost_utils.process_allgather(array, tiled=True))


def _shards_match(array: jax.Array, expected: np.ndarray) -> bool:
    return all(
        np.array_equal(np.asarray(shard.data), expected[shard.index])
        for shard in array.addressable_shards
    )


def _said(error: Exception) -> dict[str, Any]:
    """What the tests read of an error: its type, its message and its fields."""
    return {"type": type(error).__name__, "text": str(error), **vars(error)}


def one_d_checks() -> dict[str, Any]:
    """Bounds, a global batch on a 1D mesh, and jitted reductions over it."""
    sharder = JaxProcessSharder()
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    sharding = NamedSharding(mesh, P("data"))
    data = _global_data()
    local = sharder.shard_data(data)
    batch = sharder.shard(local, sharding)
    return {
        "process": (jax.process_index(), jax.process_count(), jax.device_count()),
        "bounds": sharder.bounds(10),
        "bounds_keep": JaxProcessSharder(drop_remainder=False).bounds(10),
        "local_ids": local["id"].tolist(),
        "global_shape": batch["x"].shape,
        "global_x": _gather(batch["x"]),
        "shards_match": _shards_match(batch["x"], data["x"]),
        "sum": float(jax.jit(jnp_sum)(batch["x"])),
        "mean": float(jax.jit(jnp_mean)(batch["x"])),
        "id_sum": int(jax.jit(jnp_sum)(batch["id"])),
        "again_same": np.array_equal(_gather(sharder.shard(local, sharding)["x"]), data["x"]),
        "device_hosts": {device.id: device.process_index for device in jax.devices()},
        "plot_labels": _plot_labels(batch["x"]),
    }


def _plot_labels(array: jax.Array) -> dict[int, str]:
    from datarax import viz  # here, not at the top: a bare GPU machine may lack matplotlib

    return {device: label.get_text() for device, label in viz.plot_sharding(array).labels.items()}


def jnp_sum(x: jax.Array) -> jax.Array:
    return x.sum()


def jnp_mean(x: jax.Array) -> jax.Array:
    return x.mean()


def two_d_checks() -> dict[str, Any]:
    """A data x model mesh whose 'data' axis spans processes, and one whose 'model' does."""
    sharder = JaxProcessSharder()
    matrix = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)
    devices = np.array(jax.devices()).reshape(jax.process_count(), -1)
    data_across = Mesh(devices, ("data", "model"))
    model_across = Mesh(devices.T, ("data", "model"))
    results: dict[str, Any] = {}
    rows = sharder.shard_data(matrix)
    for name, spec in (("rows", P("data", "model")), ("rows_replicated", P("data"))):
        array = sharder.shard(rows, NamedSharding(data_across, spec))
        results[name] = (array.shape, _gather(array), _shards_match(array, matrix))
    # Here each host holds a block of columns (all rows) of the global matrix.
    per_host_columns = matrix.shape[1] // jax.process_count()
    start = jax.process_index() * per_host_columns
    columns = matrix[:, start : start + per_host_columns]
    array = sharder.shard(columns, NamedSharding(model_across, P("data", "model")))
    results["columns"] = (array.shape, _gather(array), _shards_match(array, matrix))
    results["column_sums"] = np.asarray(
        multihost_utils.process_allgather(jax.jit(lambda m: m.sum(axis=0))(array), tiled=True)
    )
    return results


def pipeline_checks(seed: int = 0) -> dict[str, Any]:
    """One shuffled epoch of a per-host pipeline: host slicing, then the shard stage."""
    sharder = JaxProcessSharder()
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    sharding = NamedSharding(mesh, P("data"))
    rows = 48
    source = {"id": np.arange(rows, dtype=np.int32), "x": np.arange(rows * 2.0).reshape(rows, 2)}
    local_ids: list[list[int]] = []

    def remember(local_batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        local_ids.append(local_batch["id"].tolist())
        return local_batch

    pipeline = Pipeline(
        source=source,
        stages=[sharder.shard_data, remember, lambda b: sharder.shard(b, sharding)],
        batch_size=8,
        rngs=nnx.Rngs(seed),
        shuffle=True,
    )
    global_ids = [_gather(batch["id"]).tolist() for batch in pipeline]
    return {"local_ids": local_ids, "global_ids": global_ids, "order": pipeline.epoch_order(0)}


def prefetch_checks() -> dict[str, Any]:
    """Each host's rows, made into global batches by prefetch_to_device's thread."""
    sharder = JaxProcessSharder()
    sharding = NamedSharding(jax.make_mesh((jax.device_count(),), ("data",)), P("data"))
    local_rows = sharder.shard_data(_global_data())
    pipeline = Pipeline(source=local_rows, batch_size=2)
    with prefetch_to_device(pipeline, size=2, sharding=sharding, sharder=sharder) as batches:
        global_ids = [_gather(batch["id"]).tolist() for batch in batches]
    # Stopping early: the thread has placed batches ahead; close() must still return.
    early = prefetch_to_device(pipeline, size=2, sharding=sharding, sharder=sharder)
    first = _gather(next(early)["id"]).tolist()
    early.close()
    left = [thread.name for thread in threading.enumerate() if thread.name == "datarax-prefetch"]
    return {"global_ids": global_ids, "first": first, "prefetch_threads_left": left}


def mismatch_checks() -> dict[str, Any]:
    """Hosts that disagree get a ValueError each; afterwards the cluster still works."""
    sharder = JaxProcessSharder()
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    sharding = NamedSharding(mesh, P("data"))
    messages = {}
    rows = 4 if jax.process_index() == 0 else 2
    cases = {
        "shape": {"x": np.zeros((rows, 3), np.float32)},
        "dtype": {"x": np.zeros((4, 3), np.float32 if jax.process_index() else np.int32)},
        "structure": {"x": np.zeros((4, 3))} if jax.process_index() else {"y": np.zeros((4, 3))},
        "per_host_rows": {"x": np.zeros((3, 3), np.float32)},
    }
    for case, batch in cases.items():
        try:
            sharder.shard(batch, sharding)
            messages[case] = None
        except ValueError as error:
            messages[case] = _said(error)
    fine = sharder.shard({"x": np.ones((4, 3), np.float32)}, sharding)
    # Host 1 switches to a shape it has not seen while host 0 repeats one it has: only
    # a sharder that checks every batch makes host 0 take part in the check.
    strict = JaxProcessSharder(check_every_batch=True)
    strict.shard({"x": np.ones((4, 3), np.float32)}, sharding)
    try:
        strict.shard(
            {"x": np.ones((4 if jax.process_index() == 0 else 2, 3), np.float32)}, sharding
        )
        messages["changed_later"] = None
    except ValueError as error:
        messages["changed_later"] = _said(error)
    # A jax leaf deleted after its signature was checked is named on every host, and a
    # live leaf of that signature is placed again afterwards.
    held = {"x": jax.numpy.ones((4, 3))}
    sharder.shard(held, sharding)
    held["x"].delete()
    try:
        sharder.shard(held, sharding)
        messages["deleted"] = None
    except TypeError as error:
        messages["deleted"] = _said(error)
    messages["live_again"] = sharder.shard({"x": jax.numpy.ones((4, 3))}, sharding)["x"].shape
    texts = exchange(f"hello from {jax.process_index()}" * (1 + jax.process_index()))
    return {"messages": messages, "after": float(jax.jit(jnp_sum)(fine["x"])), "texts": texts}


def checkpoint_refusals(folder: str) -> dict[str, Any]:
    """Both processes save step 1, then step 1 again, then step 2 while something else
    holds the directory's save lock on process 0: each refusal reaches both processes.
    Then step 2 saves."""
    import fcntl

    from datarax.pipeline import Checkpoints

    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    weights = {"w": jax.device_put(np.zeros(4, np.float32), NamedSharding(mesh, P()))}
    pipeline = Pipeline(source={"x": np.arange(8.0)}, batch_size=2)
    said: dict[str, Any] = {}
    with Checkpoints(folder) as checkpoints:
        checkpoints.save(1, model=weights, pipeline=pipeline)
        for case, step in (("again", 1), ("locked", 2)):
            lock = None
            if case == "locked" and jax.process_index() == 0:
                lock = os.open(os.path.join(folder, ".datarax-save.lock"), os.O_RDWR)
                fcntl.flock(lock, fcntl.LOCK_EX)
            started = time.monotonic()
            try:
                checkpoints.save(step, model=weights, pipeline=pipeline)
                said[case] = None
            except ValueError as error:
                said[case] = str(error)
            said[f"{case}_s"] = time.monotonic() - started
            if lock is not None:
                os.close(lock)
        checkpoints.save(2, model=weights, pipeline=pipeline)
        said["latest"] = checkpoints.latest_step()
    return said


def raise_on_process_one() -> int:
    """Process 1 raises; process 0 waits for it in a collective."""
    print(f"pid {os.getpid()}", flush=True)
    if jax.process_index() == 1:
        raise RuntimeError("process one gives up")
    multihost_utils.sync_global_devices("never completes")
    return 0


def busy_on_process_one() -> int:
    """Process 1 works far longer than the launcher's time limit; process 0 returns."""
    print(f"pid {os.getpid()}", flush=True)
    if jax.process_index() == 1:
        time.sleep(300)
    return 0


def start_a_straggler() -> int:
    """Starts a child that outlives this process unless the launcher kills its group."""
    child = subprocess.Popen(["sleep", "300"], start_new_session=False)
    print(f"pid {os.getpid()}", flush=True)
    return child.pid


def _layouts() -> dict[str, tuple[NamedSharding, dict[str, Any]]]:
    """Meshes people use on pods, each with the global batch it shards.

    Every process has 2 devices; ``by_host[h]`` lists host h's two devices.
    """
    count = jax.process_count()
    by_host = np.array(sorted(jax.devices(), key=lambda d: (d.process_index, d.id))).reshape(
        count, 2
    )
    data = _global_data() | {"scale": np.float32(0.5)}
    matrix = {"m": np.arange(16 * 4 * count, dtype=np.float32).reshape(16, 4 * count)}
    data_in_host = Mesh(by_host.T, ("data", "model"))  # 'model' spans the hosts
    return {
        "all_hosts_1d": (NamedSharding(jax.make_mesh((2 * count,), ("data",)), P("data")), data),
        "model_across_hosts": (NamedSharding(data_in_host, P("data")), data),
        "interleaved": (NamedSharding(Mesh(by_host.T.reshape(-1), ("data",)), P("data")), data),
        "combined_axes": (NamedSharding(data_in_host, P(("data", "model"))), data),
        "replicated": (NamedSharding(data_in_host, P()), data),
        "one_device_per_host": (NamedSharding(Mesh(by_host[:, 0], ("data",)), P("data")), data),
        "host0_only": (NamedSharding(Mesh(by_host[0], ("data",)), P("data")), data),
        "columns_across_hosts": (NamedSharding(data_in_host, P("data", "model")), matrix),
    }


def layout_checks() -> dict[str, Any]:
    """shard_data(data, sharding) then shard, for every layout of `_layouts`."""
    sharder = JaxProcessSharder()
    results: dict[str, Any] = {}
    for name, (sharding, data) in _layouts().items():
        local = sharder.shard_data(data, sharding)
        batch = sharder.shard(local, sharding)
        leaves = {key: value for key, value in batch.items() if np.ndim(data[key])}
        results[name] = {
            "local_rows": np.shape(next(iter(local.values())))[0],
            "local_ids": local["id"].tolist() if "id" in local else None,
            "ledger_rows": RowLedger(sharding, 16).rows_of_host(jax.process_index()).tolist(),
            "shapes": {key: value.shape for key, value in batch.items()},
            "shards_match": all(_shards_match(batch[k], data[k]) for k in leaves),
            "gathered_match": all(np.array_equal(_gather(batch[k]), data[k]) for k in leaves)
            if name != "host0_only"
            else None,
            "scale": float(np.asarray(batch["scale"].addressable_data(0)))
            if "scale" in batch and batch["scale"].addressable_shards
            else None,
            "sum": float(jax.jit(jnp_sum)(batch["x"]))
            if "x" in batch and name != "host0_only"
            else None,
        }
    return results


def conflict_checks() -> dict[str, Any]:
    """Replicas across hosts that pass different data raise on every host, in time."""
    sharder = JaxProcessSharder()
    sharding, data = _layouts()["model_across_hosts"]
    messages: dict[str, Any] = {}
    start = time.monotonic()
    try:  # Grain's bounds give each host half the rows, but both hosts hold all of them
        sharder.shard(sharder.shard_data(data), sharding)
        messages["grain_bounds"] = None
    except ValueError as error:
        messages["grain_bounds"] = _said(error)
    messages["seconds"] = time.monotonic() - start
    try:
        sharder.shard({"lr": np.float32(1 + jax.process_index())}, sharding)
        messages["scalar"] = None
    except ValueError as error:
        messages["scalar"] = _said(error)
    strict = JaxProcessSharder(check_every_batch=True)
    same = {"x": np.ones((16, 3), np.float32)}
    strict.shard(same, sharding)
    sharder.shard(same, sharding)  # the default sharder checks this signature once
    later = {"x": np.full((16, 3), float(jax.process_index()), np.float32)}
    messages["later_default_passes"] = sharder.shard(later, sharding)["x"].shape
    try:
        strict.shard(later, sharding)
        messages["later_strict"] = None
    except ValueError as error:
        messages["later_strict"] = _said(error)
    # Three devices: host 0 holds two row blocks, host 1 one; equal slices do not fit.
    by_host = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    uneven = NamedSharding(Mesh(np.array(by_host[:3]), ("data",)), P("data"))
    try:
        sharder.shard({"x": np.zeros((6, 2), np.float32)}, uneven)
        messages["uneven"] = None
    except ValueError as error:
        messages["uneven"] = _said(error)
    fitting = sharder.shard_data({"x": np.arange(12.0)}, uneven)
    messages["uneven_fixed"] = (len(fitting["x"]), sharder.shard(fitting, uneven)["x"].shape)
    # A second sharder with the same shapes (an eval loop, say) checks its own first
    # batch: its replicas that differ raise on every host.
    JaxProcessSharder().shard(same, sharding)
    try:
        JaxProcessSharder().shard(later, sharding)
        messages["second_sharder"] = None
    except ValueError as error:
        messages["second_sharder"] = _said(error)
    return messages


class CountingSource:
    """A record-by-record source that remembers which rows this host read."""

    def __init__(self, rows: int):
        self.data = {
            "id": np.arange(rows, dtype=np.int32),
            "x": np.arange(rows * 2.0).reshape(rows, 2),
        }
        self.reads: list[int] = []

    def __len__(self) -> int:
        return len(self.data["id"])

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        self.reads.append(index)
        return {key: value[index] for key, value in self.data.items()}


def global_pipeline_checks() -> dict[str, Any]:
    """Pipeline(sharding=...): global batches; each host reads only its ledger rows."""
    results: dict[str, Any] = {}
    for name in ("all_hosts_1d", "model_across_hosts", "interleaved"):
        sharding, _ = _layouts()[name]
        source = CountingSource(64)
        pipeline = Pipeline(
            source=source, batch_size=16, shuffle=True, rngs=nnx.Rngs(5), sharding=sharding
        )
        global_ids, reads = [], []
        for batch in pipeline:
            global_ids.append(_gather(batch["id"]).tolist())
            reads.append(sorted(source.reads))
            source.reads.clear()
        results[name] = {
            "global_ids": global_ids,
            "reads": reads,
            "order": pipeline.epoch_order(0).tolist(),
            "ledger": [RowLedger(sharding, 16).rows_of_host(jax.process_index()).tolist()],
        }
    return results


class PlainShard:
    """A stage that holds a sharder and is no nnx.Module."""

    def __init__(self, sharder: JaxProcessSharder, sharding: NamedSharding):
        self.sharder, self.sharding = sharder, sharding

    def __call__(self, batch: Any) -> Any:
        return self.sharder.shard(batch, self.sharding)


def _held_sharder_epochs(policy: str, rows: int) -> dict[str, Any]:
    """One epoch per way of holding the sharder, a jitted step after every batch."""
    sharding = NamedSharding(jax.make_mesh((jax.device_count(),), ("data",)), P("data"))
    held = {"sharder": JaxProcessSharder()}
    holders = {
        "plain_class": [PlainShard(JaxProcessSharder(), sharding)],
        "dict": [lambda b: held["sharder"].shard(b, sharding)],
    }
    step = jax.jit(jnp_sum)
    results: dict[str, Any] = {}
    for name, stages in holders.items():
        pipeline = Pipeline(
            source={"x": np.ones((rows, 2), np.float32)},
            stages=stages,
            batch_size=8,
            uneven_hosts=policy,  # type: ignore[arg-type]
        )
        count = 0
        try:
            for batch in pipeline:
                step(batch["x"]).block_until_ready()
                count += 1
            results[name] = count
        except ValueError as error:
            results[name] = str(error)
    return results


def held_sharder_checks() -> dict[str, Any]:
    """40 and 24 rows (5 and 3 batches): however the sharder is held, the hosts stop
    together or raise together; hosts built with different uneven_hosts raise."""
    rows = 40 if jax.process_index() == 0 else 24
    results = {policy: _held_sharder_epochs(policy, rows) for policy in ("stop", "raise")}
    mixed = "stop" if jax.process_index() == 0 else "raise"
    results["mixed"] = _held_sharder_epochs(mixed, rows)["plain_class"]
    # A spec longer than a leaf's rank: the named error on every host, not JAX's IndexError.
    mesh = Mesh(np.array(jax.devices()).reshape(2, -1), ("data", "model"))
    wide = NamedSharding(mesh, P("data", None, "model"))
    try:
        next(iter(Pipeline(source={"x": np.ones((8, 4), np.float32)}, batch_size=4, sharding=wide)))
        results["rank"] = None
    except ValueError as error:
        results["rank"] = str(error)
    return results


def epoch_end_checks() -> dict[str, Any]:
    """Per-host pipelines with different row counts agree instead of hanging."""
    sharder = JaxProcessSharder()
    sharding = NamedSharding(jax.make_mesh((jax.device_count(),), ("data",)), P("data"))
    rows = 40 if jax.process_index() == 0 else 48  # 5 and 6 batches of 8
    source = {"x": np.zeros((rows, 2), np.float32)}
    results: dict[str, Any] = {}
    for policy in ("stop", "raise"):
        pipeline = Pipeline(
            source=source,
            stages=[lambda b: sharder.shard(b, sharding)],
            batch_size=8,
            uneven_hosts=policy,  # type: ignore[arg-type]
        )
        start, count = time.monotonic(), 0
        try:
            for _ in pipeline:
                count += 1
            results[policy] = count
        except ValueError as error:
            results[policy] = str(error)
        results[f"{policy}_seconds"] = time.monotonic() - start
    # A pipeline that only process 0 iterates, feeding nothing across hosts, never waits.
    local = NamedSharding(Mesh(np.array(jax.local_devices()), ("data",)), P("data"))
    if jax.process_index() == 0:
        alone = Pipeline(
            source=source, stages=[lambda b: ArraySharder().shard(b, local)], batch_size=8
        )
        results["alone"] = sum(1 for _ in alone)
    multihost_utils.sync_global_devices("after the pipeline on process 0")
    return results


class CountingDocuments:
    """Token documents of lengths 1-40 (document i holds 1000 * i + 0, 1, ...) that
    remember which documents this host read."""

    def __init__(self, count: int, seed: int):
        self.lengths = np.random.default_rng(seed).integers(1, 41, count)
        self.reads: list[int] = []

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, index: int) -> np.ndarray:
        self.reads.append(int(index))
        return 1000 * int(index) + np.arange(self.lengths[index])

    def read(self, indices: np.ndarray) -> list[np.ndarray]:
        return [self[int(index)] for index in indices]


def packed_checks(batches_before_save: int = 2) -> dict[str, Any]:
    """Pipeline(sharding=...) over rows packed from a mixture of two document sources:
    each host's global batches, the documents it read for each, and the batches after
    resuming from the state saved after `batches_before_save` batches."""
    from datarax.pipeline import Mixture, Packed

    sharding, _ = _layouts()["all_hosts_1d"]
    sources = {"web": CountingDocuments(300, 1), "code": CountingDocuments(200, 2)}
    packed = Packed(Mixture(sources, {"web": 3, "code": 1}, rngs=nnx.Rngs(4)), 32)

    def pipeline() -> Pipeline:
        return Pipeline(
            source=packed, batch_size=16, shuffle=True, rngs=nnx.Rngs(6), sharding=sharding
        )

    tokens, reads = [], []
    for batch in pipeline():
        tokens.append(_gather(batch["tokens"]).tolist())
        reads.append({name: sorted(set(source.reads)) for name, source in sources.items()})
        for source in sources.values():
            source.reads.clear()
    first = pipeline()
    for _ in itertools.islice(iter(first), batches_before_save):
        pass
    resumed = pipeline()
    resumed.set_state(first.get_state())
    rest = [_gather(batch["tokens"]).tolist() for batch in resumed]
    mine = RowLedger(sharding, 16).rows_of_host(jax.process_index())
    return {
        "tokens": tokens,
        "reads": reads,
        "order": pipeline().epoch_order(0).tolist(),
        "mine": mine.tolist(),
        "state": first.get_state(),
        "resumed": rest,
    }


def mixture_epochs(weights: dict[str, int], sharding: Any = None) -> Pipeline:
    """A pipeline of packed rows over a mixture whose code source restarts, so epochs
    differ; the state saved over these weights resumes over others."""
    from datarax.pipeline import Mixture, Packed

    sources = {"web": CountingDocuments(300, 1), "code": CountingDocuments(40, 2)}
    mixture = Mixture(sources, weights, rngs=nnx.Rngs(4), restart=["code"], epoch_size=3000)
    packed = Packed(mixture, 32, rngs=nnx.Rngs(5))
    return Pipeline(source=packed, batch_size=16, shuffle=True, rngs=nnx.Rngs(6), sharding=sharding)


def mixture_resume_checks() -> dict[str, Any]:
    """The state after 3 batches over weights 3:1, and the rest of that epoch and the next
    read by a pipeline over weights 1:1 resumed from it, on this cluster."""
    sharding, _ = _layouts()["all_hosts_1d"]
    first = mixture_epochs({"web": 3, "code": 1}, sharding)
    before = [_gather(batch["tokens"]).tolist() for batch in itertools.islice(iter(first), 3)]
    state = first.get_state()
    resumed = mixture_epochs({"web": 1, "code": 1}, sharding)
    resumed.set_state(state)
    rest = [_gather(batch["tokens"]).tolist() for batch in resumed]
    after = [_gather(batch["tokens"]).tolist() for batch in resumed]
    return {"before": before, "state": state, "rest": rest, "after": after}


def two_host_checks() -> dict[str, Any]:
    """Every 2-process check in one cluster, so the tests start it only once."""
    return {
        "one_d": one_d_checks(),
        "two_d": two_d_checks(),
        "pipeline": pipeline_checks(),
        "prefetch": prefetch_checks(),
        "mismatch": mismatch_checks(),
        "layouts": layout_checks(),
        "conflicts": conflict_checks(),
        "global_pipeline": global_pipeline_checks(),
        "epoch_end": epoch_end_checks(),
        "held_sharder": held_sharder_checks(),
        "packed": packed_checks(),
        "mixture_resume": mixture_resume_checks(),
    }


def four_host_checks() -> dict[str, Any]:
    """The 4-process checks in one cluster."""
    return {
        "one_d": one_d_checks(),
        "layouts": layout_checks(),
        "global_pipeline": global_pipeline_checks(),
        "packed": packed_checks(),
    }
