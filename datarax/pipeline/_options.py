"""A pipeline's options, as small frozen dataclasses checked once, when they are made.

`BatchOptions` says how rows become batches, `HostOptions` how the hosts' pipelines agree,
`WorkerOptions` where host batches are made. Each holds plain Python values that were
checked against the allowed range, so the rest of the pipeline trusts them.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from datarax._validate import check_bool, check_int

UnevenHosts = Literal["stop", "raise"]


def _set(options: object, name: str, checked: object) -> None:
    """Stores the checked (plain Python) value in a frozen dataclass, once."""
    object.__setattr__(options, name, checked)


@dataclasses.dataclass(frozen=True)
class BatchOptions:
    """How the rows of a source become batches.

    Example:
        >>> options = BatchOptions(batch_size=4, drop_remainder=False)
        >>> options.count(10), options.size(2, 10)
        (3, 2)
    """

    batch_size: int
    shuffle: bool = False
    drop_remainder: bool = True

    def __post_init__(self) -> None:
        _set(self, "batch_size", check_int("batch_size", self.batch_size))
        _set(self, "shuffle", check_bool("shuffle", self.shuffle))
        _set(self, "drop_remainder", check_bool("drop_remainder", self.drop_remainder))

    def count(self, rows: int) -> int:
        """How many batches an epoch over `rows` rows has.

        Raises:
            ValueError: no batch at all would be made of a non-empty source.
        """
        batch = self.batch_size
        count = rows // batch if self.drop_remainder else -(-rows // batch)
        if count == 0 and rows:
            raise ValueError(
                f"batch_size={batch} is larger than the source ({rows} rows) and "
                "drop_remainder=True, so no batch would be produced. Use a smaller "
                "batch_size or drop_remainder=False."
            )
        return count

    def size(self, index: int, rows: int) -> int:
        """How many rows batch `index` of an epoch over `rows` rows holds."""
        return min(self.batch_size, rows - index * self.batch_size)

    def remainder(self, rows: int) -> int:
        """The rows of the last, partial batch that is kept (0 when none is)."""
        return 0 if self.drop_remainder else rows % self.batch_size


@dataclasses.dataclass(frozen=True)
class HostOptions:
    """When the hosts' pipelines agree on an epoch's number of batches, and what they do
    when the counts differ (see `Pipeline`'s ``multihost`` and ``uneven_hosts``)."""

    multihost: bool | None = None
    uneven_hosts: UnevenHosts = "stop"

    def __post_init__(self) -> None:
        if self.multihost is not None:
            _set(self, "multihost", check_bool("multihost", self.multihost))
        if self.uneven_hosts not in ("stop", "raise"):
            raise ValueError(f"uneven_hosts must be 'stop' or 'raise', got {self.uneven_hosts!r}.")


@dataclasses.dataclass(frozen=True)
class WorkerOptions:
    """Where host batches are made: in this process (0) or in `workers` processes."""

    workers: int = 0

    def __post_init__(self) -> None:
        _set(self, "workers", check_int("workers", self.workers, minimum=0))
