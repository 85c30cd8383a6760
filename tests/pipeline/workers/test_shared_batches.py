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
from _support.processes import running, still_running, write_script
from _support.worker_stages import PARENT, as_lists
from flax import nnx

from datarax.pipeline import Pipeline, Workers
from datarax.pipeline.workers._owners import pid_prefix, sweep, sweep_after, this_owner
from datarax.pipeline.workers._slots import Lent, Slots
from datarax.pipeline.workers._worker_side import WorkerSide

IMAGES = np.arange(40 * 16 * 16 * 3, dtype=np.uint8).reshape(40, 16, 16, 3)


def _mapped(array: np.ndarray) -> bool:
    """Whether `array`'s memory is a shared mapping (a slot), not a pickle's bytes."""
    base: Any = array
    while isinstance(base, np.ndarray):
        base = base.base
    return isinstance(base.obj if isinstance(base, memoryview) else base, mmap.mmap)


def _round_trip(slots: Slots, side: WorkerSide, batch: Any) -> tuple[Any, Lent | None]:
    """`batch` sent as a worker would, through the slot `slots` lends (or one the worker
    makes); returns the batch and the slot its arrays are in."""
    answer = side.answer(batch, slots.lend(), slots.prefix)
    return slots.batch(answer, answer.slot), answer.slot


def _flip(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {**batch, "image": batch["image"][:, :, ::-1]}


def _images(workers: int | Workers, shuffle: bool = True) -> Pipeline:
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
    batch = {  # "pixels" fills most of the slot: a small batch would be copied out of it
        "pixels": np.arange(3000, dtype=np.uint16).astype(np.uint8),
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
    made = None
    for _ in range(2):  # no slot lent yet: the worker makes one, which is then lent
        got_batch, slot = _round_trip(slots, side, batch)
        assert slot is not None and slot == (made or slot)
        for name, leaf in batch.items():
            got = got_batch[name]
            if isinstance(leaf, np.ndarray):
                assert got.dtype == leaf.dtype and got.shape == leaf.shape, name
                assert got.flags.writeable == leaf.flags.writeable, name
                np.testing.assert_array_equal(got, leaf)
                assert _mapped(got) == (not leaf.dtype.hasobject), name
            else:
                assert got == leaf, name
        made = slot
        del got_batch, got
        gc.collect()
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


def test_a_larger_batch_gets_a_slot_of_its_own_and_sizes_follow_the_recent_batches() -> None:
    slots, side = Slots(), WorkerSide()
    _round_trip(slots, side, {"x": np.zeros(1000)})
    small, small_slot = _round_trip(slots, side, {"x": np.zeros(1000)})  # kept: slot held
    big, big_slot = _round_trip(slots, side, {"x": np.arange(5000.0)})
    assert _mapped(big["x"]) and big_slot is not None and big_slot.size >= 5000 * 8
    assert small_slot is not None and small_slot.size < big_slot.size
    np.testing.assert_array_equal(big["x"], np.arange(5000.0))
    del small
    gc.collect()
    slots.lend()  # finds the small slot given back, too small now: deleted
    assert not os.path.exists(small_slot.path)
    del big
    for _ in range(16):  # the large batch leaves the recent sizes: large slots go
        _round_trip(slots, side, {"x": np.zeros(1000)})
    assert not os.path.exists(big_slot.path)
    slots.close()


def test_batches_without_arrays_come_back_pickled_and_two_per_worker_are_in_flight() -> None:
    slots, side = Slots(), WorkerSide()
    batch, slot = _round_trip(slots, side, {"names": ["a", "b"]})
    assert batch == {"names": ["a", "b"]} and slot is None and slots.lend() is None
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
    assert slots.lend() is None  # a closed set lends nothing


def test_a_workers_clean_up_deletes_the_files_of_a_gone_process_only() -> None:
    slots, side = Slots(), WorkerSide()
    _round_trip(slots, side, {"x": np.zeros(100)})
    lent = slots.lend()
    assert lent is not None and os.path.basename(lent.path).startswith(this_owner())
    assert this_owner().startswith(pid_prefix(os.getpid()))
    started = time.monotonic()
    sweep_after(pid_prefix(os.getpid()), 0.3)  # ours: the lock is held, so the files stay
    assert time.monotonic() - started >= 0.3 and os.path.exists(lent.path)
    sweep()
    assert os.path.exists(lent.path)
    slots.close()
    assert not os.path.exists(lent.path)


def test_workers_batches_are_slot_views_equal_to_workers_0_and_kept_ones_stay() -> None:
    pipeline, reference = _images(2), _images(0)
    kept, expected = [], []
    for _ in range(3):  # three epochs, every batch kept: none may be overwritten
        kept += list(pipeline)
        expected += list(reference)
    assert len(kept) == len(expected) == 15
    assert all(_mapped(batch["image"]) for batch in kept)  # the first batch included
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


def test_workers_asked_to_start_the_next_epoch_early_resume_exactly() -> None:
    pipeline, reference = _images(Workers(2, read_next_epoch=True)), _images(0)
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
    script, env = write_script(tmp_path, PARENT)
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
        assert folder is not None and pids and all(running(pid) for pid in pids)
        prefix = f"datarax-slots-{parent.pid}-"
        assert any(name.startswith(prefix) for name in os.listdir(folder))
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=30)
        assert not still_running(pids)
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
