"""The global side of a `Pipeline`: which rows of each global batch this host reads,
and how they become the global batch.

For a sharding and a global batch size, the `RowLedger` says which rows of the batch
this host's devices hold; `GlobalBatches` turns that into the source rows to read for
batch k (in batch order), and places the rows it read as global `jax.Array`s. Both
are computed once per batch size (and leaf shape), not once per batch. With a padded
last batch (`datarax.pipeline._padding`), `row_mask` places each batch's mask like its
rows.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec, Sharding

from datarax._trees import leaf_name
from datarax.pipeline._padding import RowOrder
from datarax.pipeline._sources import Rows
from datarax.sharding._global_arrays import SINGLE_PROCESS, CheckedSignatures, make_global
from datarax.sharding._ledger import RowLedger
from datarax.sharding._placement import blocks_to_index, local_index
from datarax.sharding._sharding_checks import named_leaf_sharding

Index = tuple[slice | np.ndarray, ...]


class GlobalBatches:
    """This host's part of every global batch of `batch_size` rows under `sharding`.

    Raises:
        ValueError: the global batch (or, when kept, the last partial one of
            `remainder` rows) does not split the way the sharding needs.
    """

    def __init__(self, sharding: Sharding, batch_size: int, remainder: int = 0):
        self.sharding, self.batch_size = sharding, batch_size
        self._checked = CheckedSignatures()  # this pipeline's own: checked on its first batch
        self._ledgers: dict[int, RowLedger] = {}
        self._positions: dict[int, slice | np.ndarray] = {}
        self._trailing: dict[tuple[int, tuple[int, ...]], Index] = {}
        # Only a spec with entries after the first can split dimensions 1+ across hosts.
        spec = getattr(sharding, "spec", None)
        self._splits_trailing = spec is None or any(entry is not None for entry in spec[1:])
        if batch_size:
            self.ledger(batch_size)  # raises now, not at the first batch
        self.check_last_batch(remainder)

    def check_last_batch(self, remainder: int) -> None:
        """Raises unless a kept last batch of `remainder` rows (0: none) splits the way
        the sharding needs.

        Raises:
            ValueError: it does not; the message names ``pad_remainder=True`` as a way out.
        """
        if not remainder:
            return
        try:
            self.ledger(remainder)
        except ValueError as error:
            raise ValueError(
                f"The last batch of an epoch keeps {remainder} rows: {error} Or keep every "
                "row and fill the last batch up to batch_size, with a mask: "
                "pad_remainder=True."
            ) from None

    def ledger(self, rows: int) -> RowLedger:
        """The ledger of a global batch of `rows` rows."""
        if rows not in self._ledgers:
            self._ledgers[rows] = RowLedger(self.sharding, rows)
        return self._ledgers[rows]

    def positions(self, rows: int) -> slice | np.ndarray:
        """Where this host's rows sit in a global batch of `rows` rows."""
        if rows not in self._positions:
            mine = self.ledger(rows).blocks_of_host(jax.process_index())
            self._positions[rows] = blocks_to_index(mine)
        return self._positions[rows]

    def rows(self, order: RowOrder | None, start: int, stop: int) -> Rows:
        """The source rows this host reads of the batch ``order[start:stop]``, in order."""
        positions = self.positions(stop - start)
        if isinstance(positions, slice):
            shifted = slice(start + positions.start, start + positions.stop)
            return shifted if order is None else order[shifted]
        return start + positions if order is None else order[start + positions]

    def _trailing_part(self, name: str, rows: int, shape: tuple[int, ...]) -> Index:
        """This host's part of dimensions 1+ of leaf `name`; empty when it holds them whole.

        Raises:
            ValueError: the leaf's rank or shape does not fit the sharding.
        """
        key = (rows, shape)
        if key not in self._trailing:
            sharding = self.sharding
            if isinstance(sharding, NamedSharding):
                sharding = named_leaf_sharding(name, (rows, *shape), sharding)
            index = local_index(sharding, (rows, *shape))
            whole = [
                isinstance(p, slice) and p == slice(0, n)
                for p, n in zip(index[1:], shape, strict=True)
            ]
            self._trailing[key] = () if all(whole) else index[1:]
        return self._trailing[key]

    def place(self, batch: Any, rows: int) -> Any:
        """This host's rows of a `rows`-row global batch, as global arrays."""
        if jax.process_count() == 1:
            return SINGLE_PROCESS.shard(batch, self.sharding)
        if not self._splits_trailing:
            return make_global(batch, self.sharding, self._checked)

        def trailing(path: Any, leaf: Any) -> Any:
            if np.ndim(leaf) < 2:
                return leaf
            part = self._trailing_part(leaf_name(path), rows, np.shape(leaf)[1:])
            for dim, cut in enumerate(part, start=1):
                leaf = leaf[(slice(None),) * dim + (cut,)]
            return leaf

        return make_global(
            jax.tree_util.tree_map_with_path(trailing, batch), self.sharding, self._checked
        )

    def row_mask(self, real: int) -> jax.Array:
        """The global ``"row_mask"`` of a padded batch whose first `real` rows are the
        source's: a bool array of `batch_size` rows, its rows placed as the sharding
        places the batch's rows (later dimensions of the sharding left out)."""
        rows = self.sharding
        if isinstance(rows, NamedSharding) and len(rows.spec) > 1:
            rows = NamedSharding(rows.mesh, PartitionSpec(rows.spec[0]))
        mine = np.arange(self.batch_size)[self.positions(self.batch_size)] < real
        return jax.make_array_from_process_local_data(rows, mine, (self.batch_size,))
