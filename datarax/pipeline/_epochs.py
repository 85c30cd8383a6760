"""Sources whose records change from epoch to epoch: a `Mixture`, or a `Packed` over one.

Such a source says so (``changes_by_epoch`` is True) and has two methods.
``epoch_basis(previous=None)`` returns what fixes an epoch, as a small dict that JSON
holds: None asks for the first epoch's, a basis for the epoch after it.
``for_epoch(basis)`` returns that epoch's records, a random-access source with a length
of its own. A `Pipeline` keeps the basis of each epoch it reads and saves it in its
state, so a resumed pipeline reads the epoch under way as it was planned, and the source
(perhaps rebuilt with new weights) decides the epochs after it.
Rows are read as `EpochRows` (the basis with the rows), so a worker process builds the
same epoch from its own copy of the source.
"""

from __future__ import annotations

import json
from typing import Any

from datarax.pipeline._sources import EpochRows, Rows


def changes_by_epoch(source: Any) -> bool:
    """Whether `source` has records of its own in every epoch (see the module)."""
    return getattr(source, "changes_by_epoch", False) is True


class SourceEpochs:
    """A pipeline's source, epoch by epoch: for a source that changes by epoch, each
    epoch's basis (from the source, or from a resumed state) and records; for any other,
    the source itself every epoch.

    Example:
        >>> epochs = SourceEpochs({"x": [1, 2, 3]}, length=3)
        >>> epochs.length(5), epochs.basis(5)
        (3, None)
    """

    _KEPT = 4  # bases remembered besides the one resumed

    def __init__(self, source: Any, length: int):
        self.source, self.changes = source, changes_by_epoch(source)
        self._length = length
        self._bases: dict[int, str] = {}
        self._resumed = 0  # the epoch whose basis came from a state (or the first)
        self._views: dict[int, Any] = {}

    def basis(self, epoch: int) -> dict[str, Any] | None:
        """The basis of `epoch`, from the nearest epoch before it whose basis is known (the
        one a state resumed, else the source's first)."""
        if not self.changes:
            return None
        if epoch not in self._bases:
            known = [k for k in self._bases if k < epoch]
            at = max(known) if known else 0
            if at not in self._bases:
                self._bases[at] = json.dumps(self.source.epoch_basis(), sort_keys=True)
            basis = json.loads(self._bases[at])
            for number in range(at + 1, epoch + 1):
                basis = self.source.epoch_basis(basis)
                self._bases[number] = json.dumps(basis, sort_keys=True)
            self._forget(keep=epoch)
        return json.loads(self._bases[epoch])

    def _forget(self, keep: int) -> None:
        for number in sorted(self._bases):
            if number not in (self._resumed, keep) and len(self._bases) > self._KEPT + 1:
                del self._bases[number]

    def of(self, epoch: int) -> Any:
        """The records of `epoch` (the last few asked are kept)."""
        if not self.changes:
            return self.source
        if epoch not in self._views:
            if len(self._views) >= 2:
                del self._views[next(iter(self._views))]
            self._views[epoch] = self.source.for_epoch(self.basis(epoch))
        return self._views[epoch]

    def length(self, epoch: int) -> int:
        """How many records `epoch` has."""
        return len(self.of(epoch)) if self.changes else self._length

    def rows(self, epoch: int, rows: Rows) -> Rows | EpochRows:
        """`rows` of `epoch`, as the reading side needs them."""
        if not self.changes:
            return rows
        return EpochRows(self._json(epoch), rows)

    def _json(self, epoch: int) -> str:
        self.basis(epoch)
        return self._bases[epoch]

    def resume(self, epoch: int, basis: Any) -> None:
        """Makes `epoch` the one `basis` describes, and later epochs follow from it.

        Raises:
            ValueError: the source does not take `basis` (see its ``for_epoch``).
        """
        self.source.for_epoch(basis)  # raises where it is not one of the source's
        self._bases, self._resumed = {epoch: json.dumps(basis, sort_keys=True)}, epoch
        self._views = {}
