"""Stages for the worker tests: top-level, so worker processes can unpickle them."""

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
