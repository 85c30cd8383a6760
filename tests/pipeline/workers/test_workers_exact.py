"""Workers give exactly the batches of workers=0 (dtypes, flags and empty arrays included,
and a source changed between epochs), hold shared memory only while it is used, name
what cannot cross processes, and leave nothing behind: no file, semaphore or process."""

from __future__ import annotations

import functools
import gc
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
from _support.processes import running, script_environment, still_running, write_script
from _support.worker_stages import (
    StartsSleep,
    as_generator,
    environment_of,
    fails,
    no_boxes_from,
    page_faults,
    scale,
    sizes_from,
    slow,
    typed,
    with_lambda,
    with_pid,
)
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from datarax.errors import NotPicklableError
from datarax.pipeline import Pipeline, Workers
from datarax.pipeline.workers._owners import shared_folder, this_owner
from datarax.pipeline.workers._slots import Slots
from datarax.sharding import ArraySharder

SOURCE = {"x": np.arange(64)}


def _pipeline(workers: Any, stages: list[Any], source: Any = None, **options: Any) -> Pipeline:
    return Pipeline(
        source=source or SOURCE, stages=stages, batch_size=8, workers=workers, **options
    )


def _assert_same(got: list[Any], want: list[Any]) -> None:
    """The same batches: structure, and for each array its type, dtype (byte order
    included), shape, writeable flag and values."""
    assert len(got) == len(want)
    for ours, theirs in zip(got, want, strict=True):
        assert jax.tree.structure(ours) == jax.tree.structure(theirs)
        for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
            assert type(a) is type(b), (type(a), type(b))
            if isinstance(b, np.ndarray):
                assert (a.dtype, a.shape, a.flags.writeable) == (
                    b.dtype,
                    b.shape,
                    b.flags.writeable,
                )
                np.testing.assert_array_equal(a, b)


def test_a_batch_of_empty_arrays_after_one_with_bytes_comes_back_as_arrays() -> None:
    stages = [no_boxes_from(32)]  # batches 4-7 have images without detections: (8, 0)
    _assert_same(list(_pipeline(2, stages)), list(_pipeline(0, stages)))


def test_every_batch_keeps_its_byte_order_and_read_only_flags_the_first_included() -> None:
    got = list(_pipeline(2, [typed]))
    assert got[0]["big_endian"].dtype == np.dtype(">i4") and not got[0]["fixed"].flags.writeable
    _assert_same(got, list(_pipeline(0, [typed])))


def test_a_write_to_the_source_between_epochs_is_seen_as_without_workers(tmp_path: Path) -> None:
    epochs = {}
    for workers in (0, 2):
        path = tmp_path / f"x{workers}.npy"
        np.save(path, np.arange(64))
        mapped = np.load(path, mmap_mode="r+")
        pipeline = _pipeline(workers, [], source={"x": mapped})
        first = [batch["x"].tolist() for batch in pipeline]
        mapped[:] += 1000  # between epochs, through the pipeline's own source file
        epochs[workers] = first, [batch["x"].tolist() for batch in pipeline]
    assert epochs[2] == epochs[0]
    assert epochs[2][1][0] == list(range(1000, 1008))


def test_reading_the_next_epoch_ahead_is_asked_for_explicitly() -> None:
    for read_next_epoch in (False, True):
        pipeline = _pipeline(Workers(2, read_next_epoch=read_next_epoch), [scale])
        iterator = iter(pipeline)
        for _ in range(6):
            next(iterator)
        workers = pipeline._host._workers  # type: ignore[attr-defined]
        in_flight = {epoch for epoch, _ in workers._pending}
        assert (1 in in_flight) == read_next_epoch, in_flight


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm to look into")
def test_files_of_a_process_gone_with_its_workers_are_deleted_by_the_next_start() -> None:
    """A gone owner's lock file is free: its files go, and so do files whose owner's lock
    file is gone; ours stay, and so do names of another form (an earlier release's)."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    folder = shared_folder()
    owner = f"datarax-slots-{gone.pid}-12345-0badf00d"
    lock, left = Path(folder, f"{owner}.lock"), Path(folder, f"{owner}-abc-slot1234")
    orphan = Path(folder, f"datarax-slots-{gone.pid}-12345-5eedf00d-abc-slot1234")
    other_form = Path(folder, f"datarax-slots-{gone.pid}-12345-abc-slot1234")
    earlier_release = Path(folder, f"datarax-batch-{gone.pid}-12345-abc-slot1234")
    mine = Path(folder, f"{this_owner()}abc-slot1234")
    made = [lock, left, orphan, other_form, earlier_release, mine]
    for path in made:
        path.write_bytes(b"x" * 4096)
    try:
        Slots().close()
        assert [path.exists() for path in made] == [False, False, False, True, True, True]
    finally:
        for path in made:
            path.unlink(missing_ok=True)


GROUP_KILLED = """
import sys
import numpy as np
from _support.worker_stages import StartsSleep, with_pid
from datarax.pipeline import Pipeline
if __name__ == "__main__":
    pipeline = Pipeline(source={"x": np.arange(64)}, stages=[with_pid, StartsSleep(sys.argv[1])],
                        batch_size=8, workers=2)
    iterator = iter(pipeline)
    pids = {int(pid) for _ in range(4) for pid in next(iterator)["pid"]}
    print(*sorted(pids), flush=True)
    sys.stdin.readline()
"""


def _shm_names() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


@pytest.mark.skipif(sys.platform != "linux", reason="process groups and /dev/shm of Linux")
def test_a_kill_of_the_whole_process_group_leaves_no_file_semaphore_or_process(
    tmp_path: Path,
) -> None:
    """What a Jupyter kernel restart does: SIGKILL to the kernel's process group."""
    script, env = write_script(tmp_path, GROUP_KILLED)
    record = tmp_path / "sleeps"
    before = _shm_names()
    parent = subprocess.Popen(
        [sys.executable, str(script), str(record)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        start_new_session=True,  # its own group, as a kernel has
    )
    try:
        assert parent.stdout is not None
        workers = [int(pid) for pid in parent.stdout.readline().split()]
        sleeps = [int(pid) for pid in record.read_text().split()]
        assert workers and sleeps and all(map(running, workers + sleeps))
        assert any(name.startswith(f"datarax-slots-{parent.pid}-") for name in _shm_names())
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait(timeout=30)
        assert still_running(workers + sleeps) == []
        # Its own slot files (named by its pid: a test on the other worker makes others).
        left = [n for n in _shm_names() - before if f"-{parent.pid}-" in n or "sem." in n]
        assert not left
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
            parent.wait(timeout=10)


def _shared_resident_bytes() -> int:
    """The shared memory this process maps and has resident (RssShmem)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssShmem:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no RssShmem in /proc/self/status")


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/status")
def test_kept_small_batches_after_a_large_one_hold_little_shared_memory() -> None:
    gc.collect()
    before = _shared_resident_bytes()
    pipeline = _pipeline(2, [sizes_from(8, 2_000_000)], source={"x": np.arange(8 * 41)})
    kept = list(pipeline)  # one batch of 16 MB, then 40 of 16 floats, all kept
    assert [batch["data"].size for batch in kept] == [2_000_000] + [16] * 40
    del kept[0]
    gc.collect()
    held = _shared_resident_bytes() - before
    assert held < 4 * 2**20, f"{held / 2**20:.1f} MiB held for 40 batches of 16 floats"
    for index, batch in enumerate(kept, start=1):
        np.testing.assert_array_equal(batch["data"], np.full(16, 8.0 * index))


def test_a_stage_that_returns_what_cannot_be_pickled_is_named() -> None:
    with pytest.raises(NotPicklableError, match=r"the batch stages\[0\] returned") as raised:
        next(iter(_pipeline(2, [as_generator])))
    assert raised.value.part == "the batch"
    with pytest.raises(NotPicklableError, match=r"batch\['f'\], returned by stages\[1\],"):
        next(iter(_pipeline(2, [scale, with_lambda])))


def test_a_stage_holding_a_sharding_is_refused_naming_it() -> None:
    sharding = NamedSharding(jax.make_mesh((8,), ("data",)), P("data"))
    place = functools.partial(ArraySharder.shard, ArraySharder(), sharding=sharding)
    with pytest.raises(NotPicklableError, match=r"keywords\['sharding'\] is a NamedSharding"):
        _pipeline(2, [place])


def test_processes_a_stage_starts_end_with_the_pipeline(tmp_path: Path) -> None:
    record = tmp_path / "sleeps"
    pipeline = _pipeline(2, [StartsSleep(record)])
    assert len(list(pipeline)) == 8
    sleeps = [int(pid) for pid in record.read_text().split()]
    assert len(sleeps) == 8 and all(map(running, sleeps))
    del pipeline
    gc.collect()
    assert still_running(sleeps) == []


def test_workers_see_the_environment_as_it_is_when_they_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name = "DATARAX_SET_LATER"
    monkeypatch.delenv(name, raising=False)
    first = list(_pipeline(1, [environment_of(name)]))  # starts the forkserver without it
    assert {str(value) for batch in first for value in batch["env"]} == {""}
    monkeypatch.setenv(name, "set later")
    later = list(_pipeline(1, [environment_of(name)]))
    assert {str(value) for batch in later for value in batch["env"]} == {"set later"}


def test_workers_keep_freed_memory_so_a_fresh_array_per_batch_takes_no_page_faults() -> None:
    faults = {}
    for keep in (Workers(1).keep_freed_memory, 0):
        batches = list(_pipeline(Workers(1, keep_freed_memory=keep), [page_faults]))
        faults[keep] = sorted(int(batch["faults"][0]) for batch in batches[2:])
    kept, default = faults.values()
    assert kept[len(kept) // 2] <= 2, faults  # memory faulted in once, then reused
    assert default[len(default) // 2] >= 10, faults  # 40 MB faulted in again every batch


def test_keep_freed_memory_is_a_call_for_this_process_too() -> None:
    code = (
        "import sys; import numpy as np; "
        "from _support.worker_stages import page_faults; "
        "from datarax.pipeline import keep_freed_memory; "
        "kept = keep_freed_memory() if sys.argv[1] == 'keep' else None; "
        "print(sorted(int(page_faults({'x': np.arange(8)})['faults'][0]) for _ in range(9))[4])"
    )
    faults = {}
    for mode in ("keep", "default"):
        done = subprocess.run(
            [sys.executable, "-c", code, mode],
            capture_output=True,
            text=True,
            timeout=120,
            env=script_environment(),
        )
        assert done.returncode == 0, done.stderr
        faults[mode] = int(done.stdout)
    assert faults["keep"] <= 2 and faults["default"] >= 10, faults


def test_auto_chooses_no_workers_for_a_cheap_stage_and_says_why() -> None:
    pipeline = _pipeline("auto", [scale])
    assert pipeline.workers == "auto"
    _assert_same(list(pipeline), list(_pipeline(0, [scale])))
    assert pipeline.workers == 0
    assert pipeline.workers_choice.startswith("workers='auto' chose 0: a batch took")


def test_auto_chooses_a_worker_per_core_for_a_slow_stage() -> None:
    pipeline = _pipeline("auto", [slow])
    _assert_same(list(pipeline), list(_pipeline(0, [slow])))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    chosen = cores if cores and cores > 1 else 0  # one core: workers would only share it
    assert pipeline.workers == chosen
    assert f"chose {chosen}: a batch took" in pipeline.workers_choice
    assert pipeline.time_report().workers == chosen


def test_auto_with_a_stage_that_raises_reports_the_stages_error() -> None:
    pipeline = _pipeline("auto", [fails])
    with pytest.raises(ValueError, match="this stage always fails"):
        next(iter(pipeline))
    assert pipeline.workers == "auto"  # nothing chosen from a batch that was not made


@pytest.mark.parametrize(
    ("workers", "error"),
    [(2.5, TypeError), (-1, ValueError), ("many", ValueError), (None, TypeError)],
)
def test_workers_of_another_kind_names_the_accepted_values(workers: Any, error: type) -> None:
    with pytest.raises(error, match=r"workers must be an int >= 0.*'auto'.*Workers\(\.\.\.\)"):
        _pipeline(workers, [scale])


@pytest.mark.parametrize("workers", [0, 2])
def test_the_time_report_says_where_the_time_went(workers: int) -> None:
    pipeline = _pipeline(workers, [slow])
    for _batch in pipeline:
        time.sleep(0.02)  # the caller's step
    report = pipeline.time_report()
    assert (report.batches, report.workers) == (8, workers)
    # Sleeps never end early: 60 ms stages, and 7 steps of 20 ms over 8 batches (the
    # first batch follows no step).
    assert report.ms["stages"] >= 60 and report.ms["step"] >= 7 * 20 / 8, report.ms
    assert ("stages" in report.in_workers) == bool(workers)
    assert "host stages" in report.table()


def test_a_new_epoch_begun_while_workers_make_the_last_ones_batches_is_exact() -> None:
    """An iterator left after one batch, its batches still in the workers' hands, then a
    new epoch: the workers finish what they hold, which nobody takes, and make the new."""
    pipeline, reference = _pipeline(2, [slow]), _pipeline(0, [slow])
    first = next(iter(pipeline))
    _assert_same([first], [next(iter(reference))])
    _assert_same(list(pipeline), list(reference))  # epoch 1, all of it
    pipeline.set_state({**pipeline.get_state(), "epoch": 5, "batch_index": 3})
    reference.set_state(pipeline.get_state())
    _assert_same(list(pipeline), list(reference))


def test_a_worker_left_holding_a_dropped_iterators_batches_takes_new_ones() -> None:
    """The batches a dropped iterator left in a worker are read and discarded as they come
    back, so that worker takes the new epoch's batches too: both workers make them, not
    the one that happened to have a free place."""
    pipeline = _pipeline(2, [slow, with_pid])
    next(iter(pipeline))  # the workers now hold the next 3 batches, which nobody takes
    pids = [int(batch["pid"][0]) for batch in pipeline]
    assert len(set(pids)) == 2, pids
