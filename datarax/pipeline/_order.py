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

from collections.abc import Callable

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

    def order(self, epoch: int) -> Permutation | None:
        """The row order of `epoch`; None without shuffle (rows in order)."""
        length = self.epochs.length(epoch)
        return None if self.seed is None else Permutation(length, [*self.seed, epoch])

    def rows(self, epoch: int, index: int) -> Rows | EpochRows:
        """The source rows of batch `index` of `epoch` that this host reads, in batch order."""
        start = index * self.batch_size
        stop = min(start + self.batch_size, self.epochs.length(epoch))
        return self.epochs.rows(epoch, self._pick(self.order(epoch), start, stop))
