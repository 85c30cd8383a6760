"""Stages for the worker tests: top-level, so worker processes can unpickle them; and
`PARENT`, a training script whose pipeline runs one of them in two workers."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np


def scale(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {**batch, "x": batch["x"] * 3 + 1}


def with_pid(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {**batch, "pid": np.full(len(batch["x"]), os.getpid())}


def stop(batch: Any) -> Any:
    raise StopIteration


class FailOnce:
    """Raises the first time it sees row `row`; a marker file remembers across processes."""

    def __init__(self, row: int, marker: Path):
        self.row, self.marker = row, marker

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.row in batch["x"] and not self.marker.exists():
            self.marker.touch()
            raise ValueError(f"row {self.row} is broken")
        return batch


class _Picky(Exception):
    def __init__(self, *, reason: str):
        super().__init__(reason)


def picky(batch: Any) -> Any:
    raise _Picky(reason="cannot be rebuilt from its args")


def exit_once(marker: Path) -> Any:
    return _ExitOnce(marker)


class _ExitOnce:
    def __init__(self, marker: Path):
        self.marker = marker

    def __call__(self, batch: Any) -> Any:
        if not self.marker.exists():
            self.marker.touch()
            os._exit(3)  # a worker that dies, as if killed
        return batch


def rows_read(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each row carries how many rows this host read of its batch."""
    return {**batch, "read": np.full(len(batch["x"]), len(batch["x"]))}


def two_host_check() -> dict[int, list[Any]]:
    """On each host of a cluster: its shards of every global batch, workers=0 and =2."""
    import jax
    from flax import nnx
    from jax.sharding import NamedSharding, PartitionSpec

    from datarax.pipeline import Pipeline

    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    sharding = NamedSharding(mesh, PartitionSpec("data"))
    shards = {}
    for workers in (0, 2):
        pipeline = Pipeline(
            source={"x": np.arange(64)},
            stages=[scale, rows_read],
            batch_size=8,
            shuffle=True,
            rngs=nnx.Rngs(2),
            sharding=sharding,
            workers=workers,
        )
        shards[workers] = [
            [
                (np.asarray(s.data).tolist(), np.asarray(r.data).tolist())
                for s, r in zip(
                    b["x"].addressable_shards, b["read"].addressable_shards, strict=True
                )
            ]
            for b in pipeline
        ]
    return shards


def to_device(batch: dict[str, np.ndarray]) -> Any:
    import jax

    return jax.device_put(batch)


class HangFrom:
    """Never returns once it sees a row of `row` or more (a stuck decoder, say), and then
    ignores SIGTERM if `ignore_sigterm`."""

    def __init__(self, row: int, ignore_sigterm: bool = False):
        self.row, self.ignore_sigterm = row, ignore_sigterm

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if batch["x"].max() >= self.row:
            if self.ignore_sigterm:
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
            while True:
                time.sleep(1)
        return batch


class Count:
    """Counts its calls: each batch carries the count and the process that made it."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.calls += 1
        rows = len(batch["x"])
        return {**batch, "call": np.full(rows, self.calls), "pid": np.full(rows, os.getpid())}


def noise_from_rows(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Adds noise drawn from a generator seeded by each row's index, not one it keeps."""
    noise = [np.random.default_rng([7, int(row)]).normal() for row in batch["x"]]
    return {**batch, "y": batch["y"] + np.asarray(noise)}


class Lookup:
    """Adds the rows of `tables` (arrays it holds, memmaps say) that each row's "i" names."""

    def __init__(self, tables: list[np.ndarray]):
        self.tables = tables

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        looked = np.stack([table[batch["i"]] for table in self.tables], axis=1)
        return {**batch, "looked": looked}


def as_lists(batch: dict[str, np.ndarray]) -> dict[str, list[int]]:
    """A batch with no numpy array left in it."""
    return {name: column.tolist() for name, column in batch.items()}


def as_generator(batch: Any) -> Any:
    """Returns a generator instead of a batch (cannot be sent back from a worker)."""
    return (row for row in batch["x"])


def with_lambda(batch: dict[str, np.ndarray]) -> dict[str, Any]:
    """Returns a batch holding a lambda (cannot be pickled)."""
    return {**batch, "f": lambda row: row}


def no_boxes_from(row: int) -> Any:
    return _NoBoxes(row)


class _NoBoxes:
    """Images with detections until row `row`, then images without any: a (rows, 0) leaf."""

    def __init__(self, row: int):
        self.row = row

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        boxes = 0 if batch["x"].min() >= self.row else 4
        return {**batch, "boxes": np.ones((len(batch["x"]), boxes), np.float32)}


def typed(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A big-endian leaf and a read-only one, besides the rows."""
    fixed = np.arange(len(batch["x"]) * 3.0).reshape(-1, 3)
    fixed.flags.writeable = False
    return {**batch, "big_endian": batch["x"].astype(">i4"), "fixed": fixed}


def sizes_from(row: int, big: int) -> Any:
    return _Sizes(row, big)


class _Sizes:
    """Batches of `big` floats until row `row`, then batches of 16 floats."""

    def __init__(self, row: int, big: int):
        self.row, self.big = row, big

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        size = 16 if batch["x"].min() >= self.row else self.big
        return {"x": batch["x"], "data": np.full(size, float(batch["x"][0]))}


class StartsSleep:
    """Starts a `sleep` process (a decoder's helper, say) and records its pid."""

    def __init__(self, record: Path):
        self.record = record

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import subprocess

        child = subprocess.Popen(["sleep", "300"])
        with open(self.record, "a") as record:
            record.write(f"{child.pid}\n")
        return batch


def environment_of(name: str) -> Any:
    return _Environment(name)


class _Environment:
    """Each row carries whether the worker's environment holds `name`."""

    def __init__(self, name: str):
        self.name = name

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        value = os.environ.get(self.name, "")
        return {**batch, "env": np.full(len(batch["x"]), value, dtype="U16")}


def page_faults(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Makes fresh 40 MB arrays (larger than what glibc ever serves from its heap by
    default), as an image stage does, and records the page faults
    this process took making it."""
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    scratch = np.ones(5_000_000, np.float64) * float(batch["x"][0])
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    return {**batch, "faults": np.full(len(batch["x"]), faults), "sum": np.array(scratch.sum())}


def slow(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A stage of about 60 ms a batch."""
    time.sleep(0.06)
    return batch


def fails(batch: Any) -> Any:
    raise ValueError("this stage always fails")


# Run with `processes.write_script`: prints its workers' pids on its first line, then waits
# for a line on stdin (or a signal), and ends as sys.argv[1] says: "exit" or "exception".
PARENT = """
import select, signal, sys
# Ctrl-C ends Python as it does from a terminal, even where the tests were started in
# the background by a shell without job control, which has children ignore SIGINT.
signal.signal(signal.SIGINT, signal.default_int_handler)
import numpy as np
from _support.worker_stages import with_pid
from datarax.pipeline import Pipeline
if __name__ == "__main__":
    pipeline = Pipeline(source={"x": np.arange(64)}, stages=[with_pid], batch_size=8,
                        workers=2)
    iterator = iter(pipeline)
    pids = {int(pid) for _ in range(4) for pid in next(iterator)["pid"]}
    print(*sorted(pids), flush=True)
    # The test sends its signal, or a line to go on. Waited for as a training loop
    # waits, running Python between short blocking calls: a Ctrl-C that lands after
    # Python last looked for signals and before a blocking read starts would leave a
    # bare sys.stdin.readline() blocked for good (1 of 400 plain Python parents under
    # load did so, without this library).
    while not select.select([sys.stdin], [], [], 0.05)[0]:
        pass
    if sys.argv[1] == "exception":
        raise ValueError("the training loop failed")
"""
