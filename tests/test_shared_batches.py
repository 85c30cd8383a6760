"""Worker batches through shared-memory slots: exact, never overwritten while kept, bounded."""

from __future__ import annotations

import gc
import mmap
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
from _worker_stages import as_lists
from flax import nnx
from test_pipeline_workers import PARENT, _gone, _running, _script

from datarax.pipeline import Pipeline
from datarax.pipeline.workers._slots import Lent, Slots, WorkerSide, delete_files_of

IMAGES = np.arange(40 * 16 * 16 * 3, dtype=np.uint8).reshape(40, 16, 16, 3)


def _mapped(array: np.ndarray) -> bool:
    """Whether `array`'s memory is a shared mapping (a slot), not a pickle's bytes."""
    base: Any = array
    while isinstance(base, np.ndarray):
        base = base.base
    return isinstance(base.obj if isinstance(base, memoryview) else base, mmap.mmap)


def _round_trip(slots: Slots, side: WorkerSide, batch: Any) -> tuple[Any, Lent | None]:
    """`batch` sent as a worker would, through the slot `slots` lends."""
    lent = slots.lend()
    return slots.batch(side.answer(batch, lent), lent), lent


def _flip(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {**batch, "image": batch["image"][:, :, ::-1]}


def _images(workers: int, shuffle: bool = True) -> Pipeline:
    return Pipeline(
        source={"image": IMAGES, "label": np.arange(40)},
        stages=[_flip],
        batch_size=8,
        shuffle=shuffle,
        rngs=nnx.Rngs(5) if shuffle else None,
        workers=workers,
    )


def test_every_kind_of_leaf_comes_back_exactly_and_arrays_as_views_of_the_slot() -> None:
    slots, side = Slots(), WorkerSide()
    read_only = np.arange(6.0).reshape(2, 3)
    read_only.flags.writeable = False
    batch = {
        "big_endian": np.arange(5, dtype=">i2"),
        "fortran": np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4)),
        "strided": np.arange(20)[::3],
        "empty": np.zeros((0, 4), np.int8),
        "scalar": np.array(2.5, np.float16),
        "flags": np.array([True, False]),
        "read_only": read_only,
        "objects": np.array(["a", None], dtype=object),
        "text": "name",
        "count": 7,
        "nothing": None,
    }
    first, _ = _round_trip(slots, side, batch)  # no size known yet: pickled
    assert not any(_mapped(leaf) for leaf in jax.tree.leaves(first) if type(leaf) is np.ndarray)
    again, _ = _round_trip(slots, side, batch)
    for name, leaf in batch.items():
        got = again[name]
        if isinstance(leaf, np.ndarray):
            assert got.dtype == leaf.dtype and got.shape == leaf.shape, name
            assert got.flags.writeable == leaf.flags.writeable, name
            np.testing.assert_array_equal(got, leaf)
            assert _mapped(got) == (not leaf.dtype.hasobject), name
        else:
            assert got == leaf, name
    slots.close()


def test_a_kept_batch_is_never_overwritten_and_a_dropped_one_gives_its_slot_back() -> None:
    slots, side = Slots(), WorkerSide()
    _round_trip(slots, side, {"x": np.zeros(1000)})  # learns the size
    kept, _ = _round_trip(slots, side, {"x": np.full(1000, 1.0)})
    view = kept["x"][10:20]  # a view of the batch keeps its slot too
    del kept
    for value in range(2, 6):  # each batch dropped at once: one more slot serves them all
        _round_trip(slots, side, {"x": np.full(1000, float(value))})
    assert len(slots) == 2
    np.testing.assert_array_equal(view, 1.0)
    del view
    gc.collect()
    _round_trip(slots, side, {"x": np.full(1000, 9.0)})
    assert len(slots) == 2  # the kept slot was lent again, no third one made
    slots.close()


def test_a_larger_batch_is_pickled_once_then_slots_grow_and_small_ones_go() -> None:
    slots, side = Slots(), WorkerSide()
    _round_trip(slots, side, {"x": np.zeros(10)})
    small, small_lent = _round_trip(slots, side, {"x": np.zeros(10)})  # kept: its slot lent
    big, _ = _round_trip(slots, side, {"x": np.arange(5000.0)})
    assert not _mapped(big["x"])  # it did not fit: pickled, and now the size is known
    bigger, lent = _round_trip(slots, side, {"x": np.arange(5000.0)})
    assert _mapped(bigger["x"]) and lent is not None and lent.size >= 5000 * 8
    np.testing.assert_array_equal(bigger["x"], np.arange(5000.0))
    assert small_lent is not None and os.path.exists(small_lent.path)
    del small
    gc.collect()
    slots.lend()  # finds the small slot given back, too small now: deleted
    assert not os.path.exists(small_lent.path)
    slots.close()


def test_the_first_batch_is_made_alone_then_batches_without_arrays_go_ahead_too() -> None:
    slots, side = Slots(), WorkerSide()
    assert not slots.sized  # the pipeline asks for one batch only
    _round_trip(slots, side, {"names": ["a", "b"]})
    assert slots.sized and slots.lend() is None  # no array: nothing to lend, pickled
    pipeline = Pipeline(source={"x": np.arange(64)}, stages=[as_lists], batch_size=8, workers=2)
    iterator = iter(pipeline)
    assert next(iterator) == {"x": list(range(8))}
    workers = pipeline._host._workers
    assert workers is not None and len(workers._pending) == 4  # 2 per worker in flight
    assert list(iterator) == [{"x": list(range(k, k + 8))} for k in range(8, 64, 8)]


def test_closing_deletes_every_slot_file_and_a_kept_batch_stays_readable() -> None:
    slots, side = Slots(), WorkerSide()
    _round_trip(slots, side, {"x": np.zeros(100)})
    kept, lent = _round_trip(slots, side, {"x": np.arange(100.0)})
    assert lent is not None and os.path.exists(lent.path)
    slots.close()
    assert not os.path.exists(lent.path) and len(slots) == 0
    np.testing.assert_array_equal(kept["x"], np.arange(100.0))
    assert slots.lend() is None  # a closed set lends nothing: batches come pickled


def test_a_workers_clean_up_deletes_the_files_of_a_gone_process_only() -> None:
    slots, side = Slots(), WorkerSide()
    _round_trip(slots, side, {"x": np.zeros(100)})
    lent = slots.lend()
    assert lent is not None and f"-{os.getpid()}-" in os.path.basename(lent.path)
    delete_files_of(os.getpid() + 1_000_000)  # no such process: nothing of ours goes
    assert os.path.exists(lent.path)
    delete_files_of(os.getpid())
    assert not os.path.exists(lent.path)
    slots.close()


def test_workers_batches_are_slot_views_equal_to_workers_0_and_kept_ones_stay() -> None:
    pipeline, reference = _images(2), _images(0)
    kept, expected = [], []
    for _ in range(3):  # three epochs, every batch kept: none may be overwritten
        kept += list(pipeline)
        expected += list(reference)
    assert len(kept) == len(expected) == 15
    # Only the first batch, asked for alone before any batch size was known, is pickled.
    assert [_mapped(batch["image"]) for batch in kept] == [False] + [True] * 14
    for got, want in zip(kept, expected, strict=True):
        np.testing.assert_array_equal(got["image"], want["image"])
        np.testing.assert_array_equal(got["label"], want["label"])
    workers = pipeline._host._workers
    assert workers is not None
    kept_slots = len(workers._slots)
    del kept
    gc.collect()
    for _ in range(4):  # batches dropped as they come: the slots made already suffice
        for _batch in pipeline:
            pass
    assert len(workers._slots) <= kept_slots


def test_a_placed_batch_outlives_its_numpy_views() -> None:
    pipeline = _images(2, shuffle=False)
    placed = [jax.device_put(batch["image"]) for batch in pipeline]  # numpy views dropped
    for _ in range(2):
        for _batch in pipeline:  # slots lent again and written over
            pass
    reference = [batch["image"] for batch in _images(0, shuffle=False)]
    for got, want in zip(placed, reference, strict=True):
        np.testing.assert_array_equal(np.asarray(got), want)


def test_workers_start_the_next_epoch_before_this_one_ends_and_resume_exactly() -> None:
    pipeline, reference = _images(2), _images(0)
    iterator = iter(pipeline)
    for _ in range(4):
        next(iterator)
    workers = pipeline._host._workers
    assert workers is not None
    assert {epoch for epoch, _ in workers._pending} == {0, 1}  # epoch 1's batches in flight
    state = pipeline.get_state()
    assert next(iterator)["label"].tolist() == list(reference)[4]["label"].tolist()
    resumed = _images(2)
    resumed.set_state(state)
    reference.set_state(state)
    for got, want in zip([*resumed, *resumed], [*reference, *reference], strict=True):
        np.testing.assert_array_equal(got["image"], want["image"])


def test_a_killed_parents_slot_files_are_deleted_by_its_workers(tmp_path: Path) -> None:
    script, env = _script(tmp_path, PARENT)
    parent = subprocess.Popen(
        [sys.executable, str(script), "SIGKILL"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    try:
        assert parent.stdout is not None
        pids = [int(pid) for pid in parent.stdout.readline().split()]
        folder = "/dev/shm" if os.path.isdir("/dev/shm") else None
        assert folder is not None and pids and all(_running(pid) for pid in pids)
        prefix = f"datarax-batch-{parent.pid}-"
        assert any(name.startswith(prefix) for name in os.listdir(folder))
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=30)
        assert not _gone(pids)
        deadline = time.monotonic() + 10
        while any(name.startswith(prefix) for name in os.listdir(folder)):
            assert time.monotonic() < deadline, "a killed parent's slot files were left"
            time.sleep(0.1)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(timeout=10)


def test_a_gone_pipelines_slot_files_are_deleted() -> None:
    pipeline = _images(2)
    assert sum(1 for _ in pipeline) == 5
    workers = pipeline._host._workers
    assert workers is not None
    paths = list(workers._slots._files)
    assert paths and all(os.path.exists(path) for path in paths)
    del pipeline, workers
    gc.collect()
    assert not [path for path in paths if os.path.exists(path)]
