"""`JaxProcessSharder`: each JAX process (host) takes its part of the data, and the
hosts' parts become global arrays.

Two ways to choose a host's rows:

- Without a sharding, contiguous blocks in process order, exactly as Grain's
  ``ShardByJaxProcess`` splits them (`shard_bounds`): right when the batch axis is
  split over every process, in process order.
- With ``sharding=``, the rows (and, for leaves whose trailing dimensions are split
  across hosts, the columns) this host's devices hold under that sharding, read off
  the `RowLedger`: right for every mesh, including meshes whose model axis spans
  hosts (hosts that share rows get the same rows) and meshes whose device order
  interleaves the hosts (a host gets non-adjacent blocks).

`shard` then builds the global arrays (see `datarax.sharding._global_arrays`).
"""

from __future__ import annotations

from typing import Any, TypeVar

import jax
import numpy as np
from flax import nnx
from jax.sharding import Sharding

from datarax._deprecated import UNSET, JaxProcessSharderConfig, Unset, from_config
from datarax._trees import (
    check_keys_sortable,
    check_known_container,
    check_not_deleted,
    check_rows_agree,
    flatten_with_path,
    leaf_name,
)
from datarax._validate import AxisRules, check_bool, check_int, check_process
from datarax.sharding._base import SharderModule
from datarax.sharding._global_arrays import SINGLE_PROCESS, CheckedSignatures, make_global
from datarax.sharding._placement import host_index
from datarax.sharding._sharding_checks import check_sharding, leaf_sharding

Data = TypeVar("Data")


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
        TypeError: an argument is not an int (or `drop_remainder` not a bool).
        ValueError: `num_rows` is negative or `process_index` is outside
            ``[0, process_count)``.

    Example:
        >>> shard_bounds(10, 2, 3, drop_remainder=False)
        (7, 10)
        >>> shard_bounds(10, 2, 3)
        (6, 9)
    """
    process_index, process_count = check_process(process_index, process_count)
    num_rows = check_int("num_rows", num_rows, minimum=0)
    per_host, remainder = divmod(num_rows, process_count)
    start, stop = per_host * process_index, per_host * (process_index + 1)
    if not check_bool("drop_remainder", drop_remainder):
        start += min(process_index, remainder)
        stop += min(process_index + 1, remainder)
    return start, stop


def _rows_of(value: Any, name: str, in_sequence: bool = False) -> int:
    """The number of rows of a leaf (arrays) or of top-level data (also lists, tuples)."""
    if isinstance(value, (list, tuple)):
        return len(value)
    check_not_deleted(name, value)
    if isinstance(value, (str, bytes)) or np.ndim(value) == 0:
        hint = ""
        if in_sequence:
            hint = (
                " Inside a dict, lists and tuples are containers, as in any JAX pytree: make "
                "a list of values one array with np.asarray."
            )
        raise TypeError(
            f"{name} is a {type(value).__name__} ({value!r:.40}), which has no rows to split "
            f"between hosts. Pass an array, a list, a tuple or a dict of arrays.{hint}"
        )
    return len(value)


def _leaves(data: Any) -> tuple[list[tuple[str, Any, bool]], Any]:
    """A pytree's leaves: name, value, and whether a list or tuple holds it (a container)."""
    path_leaves, treedef = flatten_with_path(data, "data")
    for path, leaf in path_leaves:
        check_not_deleted(leaf_name(path, "data"), leaf)
        check_known_container(leaf_name(path, "data"), leaf)
    named = [
        (
            leaf_name(path, "data"),
            leaf,
            any(isinstance(key, jax.tree_util.SequenceKey) for key in path),
        )
        for path, leaf in path_leaves
    ]
    return named, treedef


def _take(value: Any, index: tuple[slice | np.ndarray, ...]) -> Any:
    """``value`` restricted to `index` per dimension; whole dimensions are left alone."""
    for dim, part in enumerate(index):
        if isinstance(part, slice) and part.indices(np.shape(value)[dim]) == (
            0,
            np.shape(value)[dim],
            1,
        ):
            continue
        if isinstance(value, (list, tuple)):
            rows = range(*part.indices(len(value))) if isinstance(part, slice) else part
            value = type(value)(value[int(i)] for i in rows)
        else:
            value = value[(slice(None),) * dim + (part,)]
    return value


def _mine(name: str, value: Any, shape: tuple[int, ...], sharding: Sharding) -> Any:
    """This host's part of `value` (a leaf or a list of rows, of `shape`) under `sharding`."""
    index = host_index(leaf_sharding(name, shape, sharding), shape, jax.process_index())
    return _take(value, index)


class JaxProcessSharder(SharderModule):
    """Gives each JAX process its part of the data and builds global arrays from the parts.

    The process index and count are read from ``jax.process_index()`` and
    ``jax.process_count()`` when the module is built. `process_index` and
    `process_count` let it play host ``i`` of ``P`` on one machine, for `shard_data`
    and `bounds` without a sharding only (to plan a pod with a sharding, use
    `RowLedger` with ``host_of=``).

    Also exported as ``JaxProcessSharderModule``.

    Args:
        config: deprecated: the settings as a `JaxProcessSharderConfig` (the original
            datarax API's form), or None; giving a setting both there and as a keyword
            is an error. Pass them as keywords instead.
        drop_remainder: without a sharding, give every host the same number of rows
            (the default), dropping up to ``process_count - 1`` rows; otherwise the
            first hosts get one more.
        check_every_batch: make `shard` check every batch across hosts, not only the
            first of each batch signature: it catches a host that switches to a
            signature the others have already seen, and replicas whose data differ in
            a later batch, at the cost of one round trip through the coordinator per
            batch (2 to 4 ms in a 2-process cluster on a 2-core machine) plus, where
            hosts hold replicas of each other's rows, a digest of those rows (about
            10 to 30 ms per 19 MB replicated on each host).
        process_index: override of ``jax.process_index()`` (a pretend host).
        process_count: override of ``jax.process_count()``.
        axis_rules: optional logical-to-mesh axis rules (see `SharderModule`).
        rngs: accepted and unused.
        name: an optional name for the module.

    Example:
        >>> host = JaxProcessSharder(process_index=1, process_count=4)
        >>> host.shard_data(np.arange(10))
        array([2, 3])
        >>> host.bounds(10)
        (2, 4)
    """

    _config_class = JaxProcessSharderConfig

    def __init__(
        self,
        config: JaxProcessSharderConfig | None = None,
        *,
        drop_remainder: bool | Unset = UNSET,
        check_every_batch: bool = False,
        process_index: int | None = None,
        process_count: int | None = None,
        axis_rules: AxisRules | None = None,
        rngs: nnx.Rngs | None = None,
        name: str | None = None,
    ):
        rules, drop_remainder = from_config(
            config, JaxProcessSharderConfig, axis_rules, drop_remainder
        )
        super().__init__(axis_rules=rules, rngs=rngs, name=name)
        self.drop_remainder = check_bool("drop_remainder", drop_remainder)
        count = jax.process_count() if process_count is None else process_count
        index = jax.process_index() if process_index is None else process_index
        self.process_index, self.process_count = check_process(index, count)
        self.local_device_count = jax.local_device_count()
        self.check_every_batch = check_bool("check_every_batch", check_every_batch)
        self._checked = CheckedSignatures()  # this sharder's own: a new one checks again

    def _is_pretend(self) -> bool:
        return (self.process_index, self.process_count) != (
            jax.process_index(),
            jax.process_count(),
        )

    def _refuse_pretend(self, what: str) -> None:
        if self._is_pretend():
            raise ValueError(
                f"This sharder plays host {self.process_index} of {self.process_count}, but "
                f"it runs as process {jax.process_index()} of {jax.process_count()}. {what} "
                "needs the real host, so build the sharder without process_index/"
                "process_count. To see what host i of a pod would read under a sharding, "
                "use datarax.sharding.RowLedger(sharding, num_rows, host_of=...)."
            )

    def bounds(self, num_rows: int) -> tuple[int, int]:
        """This host's rows [start, stop) out of `num_rows` (see `shard_bounds`)."""
        return shard_bounds(num_rows, self.process_index, self.process_count, self.drop_remainder)

    def shard_data(self, data: Data, sharding: Sharding | None = None) -> Data:
        """This host's part of `data`, a global batch.

        Without `sharding`: rows ``bounds(len(data))``. Arrays are sliced along their
        first axis (a view for numpy, no copy); a plain list or tuple at the top level
        is a sequence of rows and keeps its type. Anything else is split as
        ``jax.tree_util`` sees it: in a dict, a namedtuple or any registered pytree
        every array leaf is sliced, 0-d leaves are kept whole on every host, and tuples
        and lists are containers. A mapping or set that ``jax.tree_util`` does not know
        (a ``types.MappingProxyType``, say), or a masked array (whose mask would be
        lost), is refused, never split as one leaf.

        With `sharding` (the sharding of the global batch): exactly the part of each
        leaf that this host's devices hold under it, in global order: all rows when
        the batch is replicated, the same rows on hosts that share a replica, and
        non-adjacent blocks when the mesh interleaves the hosts. 0-d leaves are
        replicated, so every host keeps them. Pass the result to `shard`.

        Raises:
            TypeError: `data` or a leaf has no rows or was deleted (donated), is a
                container ``jax.tree_util`` does not know, a dict's keys cannot be
                sorted, or `sharding` is not a Sharding.
            ValueError: the leaves differ in rows, the rows do not split the way the
                sharding needs, or a pretend host is given a sharding.

        Example:
            >>> mesh = jax.make_mesh((len(jax.devices()),), ("data",))
            >>> JaxProcessSharder().shard_data(np.arange(8), NamedSharding(mesh, P("data")))
            array([0, 1, 2, 3, 4, 5, 6, 7])
        """
        if sharding is not None:
            self._refuse_pretend("shard_data(data, sharding=...)")
            check_sharding(sharding)
        rows_of_records = type(data) in (list, tuple)  # a namedtuple is a container
        if rows_of_records or jax.tree_util.treedef_is_leaf(flatten_with_path(data, "data")[1]):
            check_known_container("data", data)
            rows = _rows_of(data, "data")
            if sharding is None:
                start, stop = self.bounds(rows)
                return data[start:stop]  # type: ignore[index]
            shape = (rows,) if rows_of_records else tuple(np.shape(data))  # type: ignore[arg-type]
            return _mine("data", data, shape, sharding)
        named, treedef = _leaves(data)
        arrays = [leaf for leaf in named if np.ndim(leaf[1]) or leaf[2]]
        rows = [(name, _rows_of(leaf, name, inner)) for name, leaf, inner in arrays]
        check_rows_agree(rows)
        if not rows:
            return data
        if sharding is None:
            start, stop = self.bounds(rows[0][1])
            parts = [leaf[start:stop] if np.ndim(leaf) else leaf for _, leaf, _ in named]
        else:
            parts = [
                _mine(name, leaf, np.shape(leaf), sharding) if np.ndim(leaf) else leaf
                for name, leaf, _ in named
            ]
        return jax.tree_util.tree_unflatten(treedef, parts)

    def shard(self, batch: Any, sharding: Sharding) -> Any:
        """Builds the global `jax.Array` pytree from this host's part of the batch.

        Every process calls it with its own part (as ``shard_data(data, sharding)``
        returns it; without a sharding, its rows when the batch axis is split over all
        processes in order) and the same global `sharding`. Before placing, the hosts
        check together that they pass the same structure and dtypes, row counts that
        make one global batch, and identical data wherever they hold the same part (a
        digest of each shared part): on the first call of each batch signature, or on
        every call with `check_every_batch`. All processes must call `shard` the same
        number of times, in the same order. On one process the result is exactly
        ``ArraySharder().shard(batch, sharding)``.

        Args:
            batch: this host's pytree of numpy arrays, jax arrays or numbers.
            sharding: the global sharding, e.g. ``NamedSharding(mesh, P("data"))``
                over a mesh of all processes' devices.

        Returns:
            A pytree of the same structure with global `jax.Array` leaves.

        Raises:
            TypeError: `sharding` is not a Sharding, or a leaf cannot be placed.
            ValueError: hosts disagree on the batch (the message names the leaf, the
                processes and the fix; raised on every host), a leaf does not fit the
                sharding, or this sharder plays a pretend host.

        Example:
            >>> mesh = jax.make_mesh((len(jax.devices()),), ("data",))
            >>> sharder = JaxProcessSharder()
            >>> local_batch = sharder.shard_data({"label": np.arange(16)})
            >>> sharder.shard(local_batch, NamedSharding(mesh, P("data")))["label"].shape
            (16,)
        """
        self._refuse_pretend("shard()")
        if jax.process_count() == 1:
            return SINGLE_PROCESS.shard(batch, sharding)
        try:
            return make_global(batch, sharding, self._checked, self.check_every_batch)
        except (TypeError, ValueError):
            check_keys_sortable(batch)
            raise


JaxProcessSharderModule = JaxProcessSharder
