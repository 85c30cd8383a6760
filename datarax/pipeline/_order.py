"""The epoch order: which rows of the source batch k of epoch e holds.

Without shuffle, the rows in order. With shuffle, a `Permutation` seeded by the seed and
the epoch alone (``[*seed, epoch]``), so every host built with the same ``rngs`` sees the
same global order, and any epoch's order can be made again from the state. It is
computed per position, so a source of a billion rows costs no array of a billion
entries. Batch k is ``order[k*B:(k+1)*B]``; a pipeline of global batches then keeps only
the positions this host reads (`pick`). A source whose records change by epoch has a
length of its own each epoch (`datarax.pipeline._epochs`): the order asks `SourceEpochs`
for it, and hands the rows on with the epoch's basis.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import jax
import numpy as np
from flax import nnx

from datarax.pipeline._epochs import SourceEpochs
from datarax.pipeline._permutation import Permutation
from datarax.pipeline._sources import EpochRows, Rows

Pick = Callable[[Permutation | None, int, int], Rows]  # (order, start, stop) -> rows read here


def shuffle_seed(rngs: nnx.Rngs | None, shuffle: bool) -> list[int] | None:
    """The seed words of the shuffle, drawn from `rngs` ('shuffle' stream, else
    'default'); None without `shuffle`.

    Raises:
        TypeError: `rngs` is neither None nor an `nnx.Rngs`.
        ValueError: `shuffle` without `rngs`, or `rngs` has neither stream.
    """
    if rngs is not None and not isinstance(rngs, nnx.Rngs):
        raise TypeError(
            f"rngs must be an nnx.Rngs, e.g. rngs=nnx.Rngs(0), got {type(rngs).__name__} "
            f"{rngs!r:.40}."
        )
    if not shuffle:
        return None
    if rngs is None:
        raise ValueError("shuffle=True needs a seed: pass rngs=nnx.Rngs(seed).")
    try:
        key = rngs.shuffle()  # the 'shuffle' stream when there is one, else 'default'
    except AttributeError:
        raise ValueError(
            "rngs has neither a 'shuffle' nor a 'default' stream to seed the shuffle; pass "
            "rngs=nnx.Rngs(0) or nnx.Rngs(shuffle=0)."
        ) from None
    return [int(word) for word in np.asarray(jax.random.key_data(key)).ravel()]


BLOCK = 4096  # positions of a shuffled order computed at once, for the batches within them


class BlockOrder(Permutation):
    """A `Permutation` read in blocks of `BLOCK` positions, the last two kept: enciphering
    a few positions costs as much numpy overhead as thousands, so the batches of a few
    rows each that fall in one block are read from it, computed once.

    Example:
        >>> order, blocks = Permutation(10_000, [3]), BlockOrder(10_000, [3])
        >>> bool((blocks[4090:4100] == order[4090:4100]).all())
        True
    """

    def __init__(self, size: int, seed: Sequence[int]):
        super().__init__(size, seed)
        self._blocks: dict[int, np.ndarray] = {}
        self._lock = threading.Lock()

    def _block(self, number: int) -> np.ndarray:
        with self._lock:  # `epoch_order` may read from another thread than the batches'
            block = self._blocks.get(number)
            if block is None:
                if len(self._blocks) >= 2:
                    del self._blocks[next(iter(self._blocks))]  # the older one
                start = number * BLOCK
                block = super().__getitem__(slice(start, min(start + BLOCK, self.size)))
                block.flags.writeable = False  # batches get views of it
                self._blocks[number] = block
            return block

    def __getitem__(self, positions: int | slice | np.ndarray) -> np.ndarray:
        if isinstance(positions, slice):
            start, stop, step = positions.indices(self.size)
            if step == 1 and 0 < stop - start <= BLOCK:
                first, last = start // BLOCK, (stop - 1) // BLOCK
                head = self._block(first)[start - first * BLOCK : stop - first * BLOCK]
                if first == last:
                    return head
                return np.concatenate([head, self._block(last)[: stop - last * BLOCK]])
        return super().__getitem__(positions)


def _all_rows(order: Permutation | None, start: int, stop: int) -> Rows:
    return slice(start, stop) if order is None else order[start:stop]


class EpochOrder:
    """The rows of every batch of every epoch over the source `epochs` gives.

    Example:
        >>> order = EpochOrder(SourceEpochs([0] * 6, length=6), batch_size=4, seed=None)
        >>> order.rows(0, 1)
        slice(4, 6, None)
    """

    def __init__(
        self,
        epochs: SourceEpochs,
        batch_size: int,
        seed: list[int] | None,
        pick: Pick | None = None,
    ):
        self.epochs, self.batch_size, self.seed = epochs, batch_size, seed
        self._pick = pick or _all_rows
        self._last: tuple[int, int, BlockOrder] | None = None  # (epoch, length, its order)
        # Every row, in order, of the same records every epoch: batch k is one slice.
        in_order = seed is None and pick is None and not epochs.changes
        self._in_order_length = epochs.length(0) if in_order else None

    def order(self, epoch: int) -> BlockOrder | None:
        """The row order of `epoch`; None without shuffle (rows in order). The last
        epoch's is kept: building one draws its keys, which costs more than a tiny batch."""
        if self.seed is None:
            return None
        length, last = self.epochs.length(epoch), self._last
        if last is None or last[:2] != (epoch, length):
            order = BlockOrder(length, [*self.seed, epoch])
            last = self._last = (epoch, length, order)
        return last[2]

    def rows(self, epoch: int, index: int) -> Rows | EpochRows:
        """The source rows of batch `index` of `epoch` that this host reads, in batch order."""
        start = index * self.batch_size
        if self._in_order_length is not None:
            return slice(start, min(start + self.batch_size, self._in_order_length))
        stop = min(start + self.batch_size, self.epochs.length(epoch))
        return self.epochs.rows(epoch, self._pick(self.order(epoch), start, stop))
