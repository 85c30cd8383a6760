"""`Pipeline`: batches from a source, passed through stages such as a shard stage.

Data stays on the host (numpy) until a stage puts it on devices, so each step
places exactly one batch.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import jax
import numpy as np
from flax import nnx

from datarax.sharding._checks import leaf_name

Batch = Any
Stage = Callable[[Batch], Batch]


class RandomAccessSource(Protocol):
    """Anything with a length and integer indexing that returns one record."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> Any: ...


class ArraySource:
    """An in-memory source: a pytree (usually a dict) of arrays with equal row counts.

    Indexing with an int returns one record; with a slice or an integer array it
    returns a whole batch in one gather per leaf.

    Example:
        >>> source = ArraySource({"x": np.arange(6), "y": np.arange(6) * 10})
        >>> len(source), source[2]
        (6, {'x': np.int64(2), 'y': np.int64(20)})
        >>> source[np.array([0, 5])]["y"]
        array([ 0, 50])
    """

    def __init__(self, data: Any):
        path_leaves, self._treedef = jax.tree_util.tree_flatten_with_path(data)
        if not path_leaves:
            raise ValueError("source has no arrays; pass e.g. {'image': images, 'label': labels}.")
        self._leaves = [np.asarray(leaf) if np.ndim(leaf) else leaf for _, leaf in path_leaves]
        lengths = {}
        for (path, _), leaf in zip(path_leaves, self._leaves, strict=True):
            name = leaf_name(path, root="source")
            if np.ndim(leaf) == 0:
                raise ValueError(
                    f"{name} is a scalar; every leaf of a source needs one row per example."
                )
            lengths[name] = len(leaf)
        if len(set(lengths.values())) > 1:
            listed = ", ".join(f"{name} has {n}" for name, n in lengths.items())
            raise ValueError(
                f"The leaves of the source differ in length ({listed}). Every leaf needs "
                "one row per example; trim or fix the arrays so their lengths match."
            )
        self._length = next(iter(lengths.values()))

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: int | slice | np.ndarray) -> Any:
        return jax.tree_util.tree_unflatten(self._treedef, [leaf[index] for leaf in self._leaves])


def _shuffle_seed(rngs: nnx.Rngs) -> list[int]:
    key = rngs.shuffle()  # the 'shuffle' stream when there is one, else 'default'
    return [int(word) for word in np.asarray(jax.random.key_data(key)).ravel()]


class Pipeline:
    """Iterates over batches of `source`, applying `stages` in order to each.

    Every ``iter()`` begins a new epoch, unless `set_state` was called since, in
    which case it resumes exactly there. With ``shuffle=True`` each epoch has its
    own permutation, derived from `rngs` and the epoch number only, so every host
    built with the same `rngs` sees the same global order.

    Args:
        source: a dict (or other pytree) of equal-length arrays, an `ArraySource`,
            or any object with ``__len__`` and ``__getitem__`` returning records.
        stages: callables (functions or ``nnx.Module`` instances) applied to each batch.
        batch_size: rows per batch, a positive int.
        rngs: seeds the shuffle; required when ``shuffle=True``.
        shuffle: visit the rows in a new random order every epoch.
        drop_remainder: drop the last partial batch (default) or keep it.

    Example:
        >>> pipeline = Pipeline(source={"x": np.arange(10)}, stages=[lambda b: b["x"] * 2],
        ...                     batch_size=4)
        >>> [batch.tolist() for batch in pipeline]
        [[0, 2, 4, 6], [8, 10, 12, 14]]
    """

    def __init__(
        self,
        *,
        source: Mapping[str, Any] | ArraySource | RandomAccessSource,
        stages: Sequence[Stage] = (),
        batch_size: int,
        rngs: nnx.Rngs | None = None,
        shuffle: bool = False,
        drop_remainder: bool = True,
    ):
        if (
            not isinstance(batch_size, numbers.Integral)
            or isinstance(batch_size, bool)
            or batch_size <= 0
        ):
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}.")
        for position, stage in enumerate(stages):
            if not callable(stage):
                raise TypeError(
                    f"stages[{position}] is a {type(stage).__name__}, which is not callable. "
                    "A stage is a function or an nnx.Module with __call__(batch) -> batch."
                )
        if shuffle and rngs is None:
            raise ValueError("shuffle=True needs a seed: pass rngs=nnx.Rngs(seed).")
        if isinstance(source, (Mapping, np.ndarray, jax.Array)):
            source = ArraySource(source)
        elif not (hasattr(source, "__len__") and hasattr(source, "__getitem__")):
            raise TypeError(
                f"source must be a dict of arrays or have __len__ and __getitem__, got "
                f"{type(source).__name__}."
            )
        self.source: ArraySource | RandomAccessSource = source
        self.stages = tuple(stages)
        self.batch_size = int(batch_size)
        self.shuffle = shuffle
        self.drop_remainder = drop_remainder
        self._seed = _shuffle_seed(rngs) if shuffle and rngs is not None else None
        rows = len(source)
        self.num_batches = (
            rows // self.batch_size if drop_remainder else -(-rows // self.batch_size)
        )
        if self.num_batches == 0 and rows:
            raise ValueError(
                f"batch_size={batch_size} is larger than the source ({rows} rows) and "
                "drop_remainder=True, so no batch would be produced. Use a smaller "
                "batch_size or drop_remainder=False."
            )
        self._epoch = 0
        self._next_batch = 0
        self._resume = True  # the next iter() continues at (_epoch, _next_batch)
        self._generation = 0

    def __len__(self) -> int:
        return self.num_batches

    def epoch_order(self, epoch: int) -> np.ndarray | None:
        """The row order of `epoch` (None when not shuffling: rows in order)."""
        if self._seed is None:
            return None
        return np.random.default_rng([*self._seed, epoch]).permutation(len(self.source))

    def get_state(self) -> dict[str, int]:
        """Where iteration stands: the epoch and the index of the next batch."""
        if self._next_batch >= self.num_batches:
            return {"epoch": self._epoch + 1, "batch_index": 0}
        return {"epoch": self._epoch, "batch_index": self._next_batch}

    def set_state(self, state: Mapping[str, int]) -> None:
        """Makes the next ``iter()`` resume at `state` (as returned by `get_state`)."""
        epoch, batch_index = state.get("epoch"), state.get("batch_index")
        if not (
            isinstance(epoch, int)
            and epoch >= 0
            and isinstance(batch_index, int)
            and 0 <= batch_index <= self.num_batches
        ):
            raise ValueError(
                "state must be {'epoch': int >= 0, 'batch_index': int in [0, "
                f"{self.num_batches}]}} as returned by get_state(), got {dict(state)!r}."
            )
        self._epoch, self._next_batch = epoch, batch_index
        self._resume = True

    def __iter__(self) -> Iterator[Batch]:
        if self._resume:
            state = self.get_state()
            self._epoch, self._next_batch = state["epoch"], state["batch_index"]
        else:
            self._epoch, self._next_batch = self._epoch + 1, 0
        self._resume = False
        self._generation += 1
        return self._run(self._generation)

    def _rows(self, order: np.ndarray | None, batch_index: int) -> slice | np.ndarray:
        start = batch_index * self.batch_size
        stop = min(start + self.batch_size, len(self.source))
        return slice(start, stop) if order is None else order[start:stop]

    def _read(self, rows: slice | np.ndarray) -> Batch:
        if isinstance(self.source, ArraySource):
            return self.source[rows]
        indices = range(*rows.indices(len(self.source))) if isinstance(rows, slice) else rows
        records = [self.source[int(i)] for i in indices]
        return jax.tree_util.tree_map(lambda *leaves: np.stack(leaves), *records)

    def _run(self, generation: int) -> Iterator[Batch]:
        order = self.epoch_order(self._epoch)
        while generation == self._generation and self._next_batch < self.num_batches:
            batch = self._read(self._rows(order, self._next_batch))
            self._next_batch += 1
            for stage in self.stages:
                batch = stage(batch)
            yield batch
