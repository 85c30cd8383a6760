"""`JaxProcessSharderModule`: give each JAX process (host) its slice of the data."""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any, TypeVar

import jax
import numpy as np
from flax import nnx
from jax.sharding import Sharding

from datarax.sharding._base import AxisRules, SharderModule
from datarax.sharding._global import make_global, single_host_shard

Data = TypeVar("Data")


def _check_count_and_index(process_index: Any, process_count: Any) -> None:
    for name, value in (("process_count", process_count), ("process_index", process_index)):
        if not isinstance(value, numbers.Integral) or isinstance(value, bool):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}: {value!r}.")
    if process_count < 1:
        raise ValueError(f"process_count must be at least 1, got {process_count}.")
    if not 0 <= process_index < process_count:
        raise ValueError(
            f"process_index must be in [0, {process_count - 1}] for process_count="
            f"{process_count}, got {process_index}."
        )


def shard_bounds(
    num_rows: int, process_index: int, process_count: int, drop_remainder: bool = True
) -> tuple[int, int]:
    """Rows [start, stop) that host `process_index` reads out of `num_rows`.

    Hosts get contiguous, disjoint ranges, exactly as Grain's ``ShardByJaxProcess``
    splits them. With `drop_remainder` every host gets ``num_rows // process_count``
    rows and the last ``num_rows % process_count`` rows go unread; without it the
    first ``num_rows % process_count`` hosts get one row more, so together the hosts
    cover every row.

    Raises:
        ValueError: `num_rows` is negative or `process_index` is outside
            ``[0, process_count)``.

    Example:
        >>> shard_bounds(10, 2, 3, drop_remainder=False)
        (7, 10)
        >>> shard_bounds(10, 2, 3)
        (6, 9)
    """
    _check_count_and_index(process_index, process_count)
    if num_rows < 0:
        raise ValueError(f"num_rows must be non-negative, got {num_rows}.")
    per_host, remainder = divmod(num_rows, process_count)
    start, stop = per_host * process_index, per_host * (process_index + 1)
    if not drop_remainder:
        start += min(process_index, remainder)
        stop += min(process_index + 1, remainder)
    return start, stop


def _num_rows(data: Any, name: str) -> int:
    is_sequence = isinstance(data, (list, tuple))
    if isinstance(data, (str, bytes)) or (np.ndim(data) == 0 and not is_sequence):
        raise TypeError(
            f"{name} is a {type(data).__name__} ({data!r:.40}), which has no rows to split "
            "between hosts. Pass an array, a list, a tuple or a dict of those."
        )
    return len(data)


class JaxProcessSharderModule(SharderModule):
    """Gives each JAX process its contiguous slice of the data.

    The process index and count are read from ``jax.process_index()`` and
    ``jax.process_count()`` when the module is built; pass `process_index` and
    `process_count` to play the part of host ``i`` of ``P`` on one machine.

    Args:
        drop_remainder: give every host the same number of rows (default), dropping
            up to ``process_count - 1`` rows; otherwise the first hosts get one more.
        check_every_batch: make `shard` compare every batch's signature across
            hosts, not only each new one. It catches a host whose batch changes to a
            signature the other hosts have already seen, at a price: a round trip
            through the coordinator per batch (2 to 4 ms in a 2-process cluster on
            a 2-core machine), during which each host waits for the slowest.
        process_index: override of ``jax.process_index()``.
        process_count: override of ``jax.process_count()``.
        axis_rules: optional logical-to-mesh axis rules (see `SharderModule`).
        rngs: accepted and unused.

    Example:
        >>> host = JaxProcessSharderModule(process_index=1, process_count=4)
        >>> host.shard_data(np.arange(10))
        array([2, 3])
        >>> host.bounds(10)
        (2, 4)
    """

    def __init__(
        self,
        *,
        drop_remainder: bool = True,
        check_every_batch: bool = False,
        process_index: int | None = None,
        process_count: int | None = None,
        axis_rules: AxisRules | None = None,
        rngs: nnx.Rngs | None = None,
    ):
        super().__init__(axis_rules=axis_rules, rngs=rngs)
        count = jax.process_count() if process_count is None else process_count
        index = jax.process_index() if process_index is None else process_index
        _check_count_and_index(index, count)
        self.drop_remainder = bool(drop_remainder)
        self.check_every_batch = bool(check_every_batch)
        self.process_index = int(index)
        self.process_count = int(count)

    def bounds(self, num_rows: int) -> tuple[int, int]:
        """This host's rows [start, stop) out of `num_rows` (see `shard_bounds`)."""
        return shard_bounds(num_rows, self.process_index, self.process_count, self.drop_remainder)

    def shard_data(self, data: Data) -> Data:
        """This host's rows of `data`.

        Arrays are sliced along their first axis (a view for numpy, no copy); lists
        and tuples keep their type; a dict is sliced leaf by leaf, after checking
        that all its leaves have the same number of rows.

        Raises:
            TypeError: `data` is a scalar or a string.
            ValueError: the leaves of a dict differ in length.
        """
        if isinstance(data, Mapping):
            lengths = self._dict_lengths(data, "data")
            if not lengths:
                return data
            start, stop = self.bounds(next(iter(lengths.values())))
            return self._slice(data, start, stop)  # type: ignore[return-value]
        start, stop = self.bounds(_num_rows(data, "data"))
        return self._slice(data, start, stop)

    def _dict_lengths(self, data: Mapping[Any, Any], name: str) -> dict[str, int]:
        lengths: dict[str, int] = {}
        for key, value in data.items():
            leaf = f"{name}[{key!r}]"
            if isinstance(value, Mapping):
                lengths.update(self._dict_lengths(value, leaf))
            else:
                lengths[leaf] = _num_rows(value, leaf)
        if len(set(lengths.values())) > 1:
            listed = ", ".join(f"{leaf} has {n}" for leaf, n in lengths.items())
            raise ValueError(
                f"The leaves of {name} have different numbers of rows ({listed}), so "
                "hosts would get misaligned slices. Give every leaf the same length."
            )
        return lengths

    def _slice(self, data: Any, start: int, stop: int) -> Any:
        if isinstance(data, Mapping):
            return type(data)({k: self._slice(v, start, stop) for k, v in data.items()})  # type: ignore[call-arg]
        return data[start:stop]

    def shard(self, batch: Any, sharding: Sharding) -> Any:
        """Builds the global `jax.Array` pytree from this host's part of the batch.

        Every process calls it with its own rows (as `shard_data` returns them) and
        the same global `sharding`; each leaf becomes one global array, built with
        ``jax.make_array_from_process_local_data``, whose rows are the hosts' rows in
        process order. The first call with a new batch signature checks, across
        processes, that every host passes the same tree structure, per-host shapes,
        dtypes and sharding; later calls with that signature skip the check (unless
        `check_every_batch`), so all processes must call `shard` the same number of
        times, in the same order. A host that then switches to a signature the others
        have already seen is caught only with `check_every_batch`: without it, it
        waits for a check the others skip and fails after two minutes. On one
        process the result is exactly `ArraySharder().shard(batch, sharding)`.

        Args:
            batch: this host's pytree of numpy arrays, jax arrays or numbers.
            sharding: the global sharding, usually ``NamedSharding(mesh, P("data"))``
                over a mesh of all processes' devices.

        Returns:
            A pytree of the same structure with global `jax.Array` leaves.

        Raises:
            TypeError: `sharding` is not a Sharding, or a leaf is a string or object.
            ValueError: hosts disagree on the batch (the message names the leaf and
                each host's shape), a leaf does not fit the sharding, or this sharder
                plays a host other than the one it runs on.

        Example:
            >>> mesh = jax.make_mesh((len(jax.devices()),), ("data",))
            >>> sharder = JaxProcessSharderModule()
            >>> local_batch = sharder.shard_data({"label": np.arange(16)})
            >>> sharder.shard(local_batch, NamedSharding(mesh, P("data")))["label"].shape
            (16,)
        """
        runtime = (jax.process_index(), jax.process_count())
        if (self.process_index, self.process_count) != runtime:
            raise ValueError(
                f"This sharder plays host {self.process_index} of {self.process_count}, but "
                f"it runs as process {runtime[0]} of {runtime[1]}. shard() builds real "
                "global arrays, so build the sharder without process_index/process_count "
                "(use the overrides only with shard_data and bounds)."
            )
        if runtime[1] == 1:
            return single_host_shard(batch, sharding)
        return make_global(batch, sharding, every_batch=self.check_every_batch)
