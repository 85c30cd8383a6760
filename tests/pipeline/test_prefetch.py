"""prefetch_to_device: order, bounded buffer, errors, shutdown, placing callables."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from datarax import prefetch_to_device
from datarax.pipeline import DevicePrefetcher, Pipeline
from datarax.pipeline._prefetch import CLOSE_WAIT_S
from datarax.sharding import ArraySharder, JaxProcessSharder


def _prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "datarax-prefetch"]


def _wait_for_no_prefetch_threads(timeout_s: float = 10.0) -> list[threading.Thread]:
    deadline = time.monotonic() + timeout_s
    for thread in _prefetch_threads():
        thread.join(max(0.0, deadline - time.monotonic()))
    return _prefetch_threads()


def _inside(thread: threading.Thread, *functions: Callable[..., Any]) -> bool:
    """Whether `thread` runs inside each of `functions` now, as its stack says."""
    frame = sys._current_frames().get(thread.ident or 0)
    running = set()
    while frame is not None:
        running.add(frame.f_code)
        frame = frame.f_back
    return all(function.__code__ in running for function in functions)


def _wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s} s"
        time.sleep(0.001)


@pytest.fixture(autouse=True)
def _no_thread_left_behind() -> Iterator[None]:
    yield
    assert _wait_for_no_prefetch_threads() == []


def _batches(count: int, rows: int = 8) -> list[dict[str, np.ndarray]]:
    return [
        {"x": np.full((rows, 3), step, np.float32), "y": np.arange(rows) + step}
        for step in range(count)
    ]


class _CountingSource:
    """An iterator that records how many batches were taken and whether it was closed."""

    def __init__(self, count: int, fail_at: int | None = None):
        self.count, self.fail_at = count, fail_at
        self.taken = 0
        self.closed = False

    def __iter__(self) -> _CountingSource:
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        if self.taken == self.fail_at:
            raise KeyError(f"record {self.taken} is missing")
        if self.taken >= self.count:
            raise StopIteration
        self.taken += 1
        return {"x": np.full((8, 2), self.taken - 1, np.int32)}

    def close(self) -> None:
        self.closed = True


def test_order_preserved_and_placed(mesh_1d: Mesh) -> None:
    sharding = NamedSharding(mesh_1d, P("data"))
    source = _batches(6)
    with prefetch_to_device(source, size=2, sharding=sharding) as placed:
        out = list(placed)
    assert len(out) == 6
    for expected, got in zip(source, out, strict=True):
        assert isinstance(got["x"], jax.Array)
        assert got["x"].sharding.is_equivalent_to(sharding, 2)
        np.testing.assert_array_equal(np.asarray(got["x"]), expected["x"])
        np.testing.assert_array_equal(np.asarray(got["y"]), expected["y"])
        assert len(got["x"].addressable_shards) == 8


@pytest.mark.parametrize("size", [1, 2, 4])
def test_buffer_is_bounded(size: int) -> None:
    source = _CountingSource(count=50)
    placed = prefetch_to_device(source, size=size, place=lambda batch: batch)
    first = next(placed)
    # One batch consumed and `size` more taken from the source ahead of it, no more: the
    # thread then waits for a free slot (inside Semaphore.acquire, parked in its wait).
    [thread] = _prefetch_threads()
    parked = (threading.Semaphore.acquire, threading.Condition.wait)
    _wait_until(
        lambda: source.taken >= 1 + size and _inside(thread, *parked),
        "the thread never took its batches and waited for a free slot",
    )
    assert source.taken == 1 + size
    assert int(first["x"][0, 0]) == 0
    placed.close()
    assert source.taken <= 2 + size


def test_producer_exception_reraised_with_original_type() -> None:
    source = _CountingSource(count=10, fail_at=3)
    placed = prefetch_to_device(source, size=2, sharding=NamedSharding(_mesh(), P("data")))
    got = [int(np.asarray(next(placed)["x"])[0, 0]) for _ in range(3)]
    assert got == [0, 1, 2]
    with pytest.raises(KeyError, match="record 3 is missing"):
        next(placed)
    with pytest.raises(StopIteration):
        next(placed)
    assert source.closed


def test_placing_callable_exception_reraised() -> None:
    def place(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if int(batch["x"][0, 0]) == 1:
            raise ValueError("cannot place batch 1")
        return batch

    with prefetch_to_device(_CountingSource(5), place=place) as placed:
        assert int(np.asarray(next(placed)["x"])[0, 0]) == 0
        with pytest.raises(ValueError, match="cannot place batch 1"):
            next(placed)


def test_early_stop_with_close_closes_generator() -> None:
    closed = threading.Event()

    def endless() -> Iterator[dict[str, np.ndarray]]:
        try:
            step = 0
            while True:
                yield {"x": np.full((8,), step)}
                step += 1
        finally:
            closed.set()

    placed = prefetch_to_device(endless(), size=2, sharding=NamedSharding(_mesh(), P("data")))
    for step, batch in enumerate(placed):
        assert int(np.asarray(batch["x"])[0]) == step
        if step == 4:
            break
    placed.close()
    assert _prefetch_threads() == []
    assert closed.is_set()
    with pytest.raises(StopIteration):
        next(placed)
    placed.close()  # a second close is harmless


def test_early_stop_in_with_block_and_on_garbage_collection() -> None:
    source = _CountingSource(count=1000)
    with prefetch_to_device(source, size=3, place=lambda batch: batch) as placed:
        next(placed)
    assert _prefetch_threads() == []
    assert source.closed

    dropped = _CountingSource(count=1000)
    placed = prefetch_to_device(dropped, size=3, place=lambda batch: batch)
    next(placed)
    del placed
    gc.collect()
    assert _wait_for_no_prefetch_threads() == []
    assert dropped.closed


def test_exhausted_source_ends_thread() -> None:
    placed = prefetch_to_device(iter(_batches(3)), size=8, place=lambda batch: batch)
    assert len(list(placed)) == 3
    assert _prefetch_threads() == []


def test_placed_batches_are_ready_before_they_are_handed_over() -> None:
    ready: list[bool] = []

    def place(batch: dict[str, np.ndarray]) -> dict[str, jax.Array]:
        return jax.device_put(batch, NamedSharding(_mesh(), P("data")))

    with prefetch_to_device(_batches(3), place=place) as placed:
        for batch in placed:
            ready.append(all(leaf.is_ready() for leaf in jax.tree_util.tree_leaves(batch)))
    assert ready == [True, True, True]


def test_pipeline_with_shard_stage_runs_ahead() -> None:
    sharding = NamedSharding(_mesh(), P("data"))
    sharder = ArraySharder()
    pipeline = Pipeline(
        source={"x": np.arange(64.0).reshape(32, 2)},
        stages=[lambda batch: sharder.shard(batch, sharding)],
        batch_size=8,
    )
    with prefetch_to_device(pipeline) as placed:
        out = list(placed)
    assert all(batch["x"].sharding.is_equivalent_to(sharding, 2) for batch in out)
    rows = np.concatenate([np.asarray(batch["x"]) for batch in out])
    np.testing.assert_array_equal(rows, np.arange(64.0).reshape(32, 2))


def test_process_sharder_rows_with_placing_callable() -> None:
    # Host 1 of 2 reads its rows; the callable places them (here with ArraySharder on
    # this process's devices, the role JaxProcessSharder.shard plays on a pod).
    host = JaxProcessSharder(process_index=1, process_count=2)
    sharding = NamedSharding(_mesh(), P("data"))
    sharder = ArraySharder()
    global_batches = [{"x": np.arange(16) + 100 * step} for step in range(3)]
    per_host = (host.shard_data(batch) for batch in global_batches)
    with prefetch_to_device(per_host, place=lambda b: sharder.shard(b, sharding)) as placed:
        out = [np.asarray(batch["x"]) for batch in placed]
    assert [row.tolist() for row in out] == [
        list(range(8 + 100 * step, 16 + 100 * step)) for step in range(3)
    ]


def test_custom_sharder_is_used() -> None:
    calls: list[str] = []

    class RecordingSharder(ArraySharder):
        def shard(self, batch, sharding):  # type: ignore[no-untyped-def]
            calls.append("shard")
            return super().shard(batch, sharding)

    sharding = NamedSharding(_mesh(), P("data"))
    with prefetch_to_device(_batches(2), sharding=sharding, sharder=RecordingSharder()) as it:
        assert len(list(it)) == 2
    assert calls == ["shard", "shard"]


@pytest.mark.parametrize("size", [0, -1, 1.5, True, "2"])
def test_bad_size(size: object) -> None:
    error = ValueError if isinstance(size, int) and not isinstance(size, bool) else TypeError
    with pytest.raises(error, match=r"size must be an int >= 1 \(how many batches"):
        prefetch_to_device([], size=size)  # type: ignore[arg-type]


def test_bad_arguments() -> None:
    sharding = NamedSharding(_mesh(), P("data"))
    with pytest.raises(ValueError, match="not both"):
        prefetch_to_device([], sharding=sharding, place=lambda b: b)
    with pytest.raises(TypeError, match="NamedSharding"):
        prefetch_to_device([], sharding=P("data"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="place must be a callable"):
        prefetch_to_device([], place=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="sharder= needs sharding="):
        prefetch_to_device([], sharder=ArraySharder())
    with pytest.raises(TypeError, match="shard"):
        prefetch_to_device([], sharding=sharding, sharder=object())  # type: ignore[arg-type]


def test_is_an_iterator() -> None:
    with prefetch_to_device(_batches(1)) as placed:
        assert isinstance(placed, DevicePrefetcher)
        assert iter(placed) is placed


def _mesh() -> Mesh:
    return jax.make_mesh((len(jax.devices()),), ("data",))


_BLOCKED_CHILD = """
import sys, threading, time
import numpy as np
from datarax import prefetch_to_device

inside = threading.Event()

def source():
    yield {"x": np.zeros(8)}
    inside.set()
    if sys.argv[2] == "block":
        threading.Event().wait()
    if sys.argv[2] == "sleep":
        time.sleep(60)
    yield {"x": np.ones(8)}

how = sys.argv[1]
placed = prefetch_to_device(source(), size=2)
next(placed)
assert inside.wait(60)  # the thread now waits inside the source (or has passed it)
if how == "with":
    with placed:
        print("leaving", time.monotonic(), flush=True)
        raise RuntimeError("the step failed")
print("leaving", time.monotonic(), flush=True)
if how == "raise":
    raise RuntimeError("the step failed")
"""


def _start_child(script: str, how: str, wait: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, script, how, wait],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("how", ["exit", "raise", "with"])
def test_a_blocked_source_does_not_hold_up_exit(tmp_path, how: str) -> None:
    """Interpreters whose source blocks on an event or sleeps exit within 2 s of one
    whose source does not.

    All three run at once, so a loaded machine slows them alike.
    """
    script = tmp_path / "child.py"
    script.write_text(_BLOCKED_CHILD)
    children = {kind: _start_child(str(script), how, kind) for kind in ("block", "sleep", "free")}
    ended: dict[str, float] = {}
    deadline = time.monotonic() + 90
    while len(ended) < len(children) and time.monotonic() < deadline:
        for kind, child in children.items():
            if kind not in ended and child.poll() is not None:
                ended[kind] = time.monotonic()
        time.sleep(0.01)
    took = {}
    for kind, child in children.items():
        child.kill()
        out, err = child.communicate(timeout=30)
        assert kind in ended, f"the {kind} child did not exit within 90 s"
        assert child.returncode == (0 if how == "exit" else 1), err[-2000:]
        if how != "exit":
            assert "RuntimeError: the step failed" in err
        took[kind] = ended[kind] - float(out.split("leaving ")[1].split()[0])
    allowed = 2 + (CLOSE_WAIT_S if how == "with" else 0)
    assert took["block"] - took["free"] < allowed, took
    assert took["sleep"] - took["free"] < allowed, took


def test_a_second_consumer_gets_an_error_and_close_wakes_the_first() -> None:
    release = threading.Event()

    def blocked() -> Iterator[dict[str, np.ndarray]]:
        yield {"x": np.zeros(8)}
        release.wait(timeout=30)
        yield {"x": np.ones(8)}

    placed = prefetch_to_device(blocked(), size=1)
    next(placed)
    first: list[object] = []
    waiting = threading.Thread(target=lambda: first.append(next(placed, "ended")))
    waiting.start()
    _wait_until(lambda: _inside(waiting, DevicePrefetcher._take), "no first consumer waits")
    with pytest.raises(RuntimeError, match="Another thread is inside next"):
        next(placed)
    started = time.monotonic()
    placed.close()  # the source still blocks: close waits at most CLOSE_WAIT_S
    assert time.monotonic() - started < CLOSE_WAIT_S + 1
    waiting.join(timeout=5)
    assert first == ["ended"]  # the first consumer was woken, not left waiting
    release.set()


def test_close_from_another_thread_ends_the_iteration() -> None:
    placed = prefetch_to_device(iter(_batches(3)), size=1, place=lambda batch: batch)
    next(placed)
    closer = threading.Thread(target=placed.close)
    closer.start()
    closer.join(timeout=5)
    assert list(placed) == []
