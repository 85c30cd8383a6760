"""A pipeline's options, as small frozen dataclasses checked once, when they are made.

`BatchOptions` says how rows become batches, `HostOptions` how the hosts' pipelines agree,
`Workers` where host batches are made. Each holds plain Python values that were checked
against the allowed range, so the rest of the pipeline trusts them.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from datarax._validate import check_bool, check_int
from datarax.pipeline._memory import DEFAULT_KEEP_BYTES

UnevenHosts = Literal["stop", "raise"]


def _set(options: object, name: str, checked: object) -> None:
    """Stores the checked (plain Python) value in a frozen dataclass, once."""
    object.__setattr__(options, name, checked)


@dataclasses.dataclass(frozen=True)
class BatchOptions:
    """How the rows of a source become batches.

    With `pad_remainder` the last, partial batch is filled up to `batch_size` rows (see
    `datarax.pipeline._padding`): it holds `real_rows` rows of the source and `size` rows
    in all.

    Example:
        >>> options = BatchOptions(batch_size=4, drop_remainder=False)
        >>> options.count(10), options.size(2, 10)
        (3, 2)
        >>> padded = BatchOptions(batch_size=4, drop_remainder=False, pad_remainder=True)
        >>> padded.count(10), padded.size(2, 10), padded.real_rows(2, 10)
        (3, 4, 2)
    """

    batch_size: int
    shuffle: bool = False
    drop_remainder: bool = True
    pad_remainder: bool = False

    def __post_init__(self) -> None:
        _set(self, "batch_size", check_int("batch_size", self.batch_size))
        _set(self, "shuffle", check_bool("shuffle", self.shuffle))
        _set(self, "drop_remainder", check_bool("drop_remainder", self.drop_remainder))
        _set(self, "pad_remainder", check_bool("pad_remainder", self.pad_remainder))
        if self.pad_remainder and self.drop_remainder:
            raise ValueError(
                "pad_remainder=True fills the last partial batch up to batch_size rows, but "
                "drop_remainder=True drops that batch. Pass drop_remainder=False to keep "
                "every row and pad the last batch, or pad_remainder=False to drop it."
            )

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
        """How many rows batch `index` of an epoch over `rows` rows holds (filling
        rows included)."""
        return self.batch_size if self.pad_remainder else self.real_rows(index, rows)

    def real_rows(self, index: int, rows: int) -> int:
        """How many rows of the source batch `index` of an epoch over `rows` rows holds."""
        return min(self.batch_size, rows - index * self.batch_size)

    def remainder(self, rows: int) -> int:
        """The rows of the last, partial batch that is kept (0 when none is, or when it
        is padded to a whole batch)."""
        return 0 if self.drop_remainder or self.pad_remainder else rows % self.batch_size


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
class Workers:
    """Where a pipeline makes its host batches: in this process, or in worker processes.

    ``Pipeline(workers=4)`` is ``Pipeline(workers=Workers(4))``. Workers make up to two
    batches each ahead of the one you take, in order, and give the batches of
    ``workers=0``.

    Attributes:
        count: 0 reads the rows and runs the stages in this process; N > 0 in N worker
            processes; ``"auto"`` makes the first three batches in this process, timing
            them, and then picks a count from their median time and the usable cores
            (none on one core, or for stages that return jax.Arrays), pickling the
            source and stages only then; the workers start in the background while this
            process goes on making batches, and take over once they are ready (the
            choice, its reason and that batch are in `Pipeline.workers_choice`).
        read_next_epoch: let workers start the next epoch's first batches before this
            epoch ends, so a new epoch starts without a wait. Off by default: then the
            workers read nothing of an epoch before it begins, so a change made to a
            memory-mapped source between epochs is seen, as with ``workers=0``.
        keep_freed_memory: bytes of freed memory each worker keeps for reuse (glibc; see
            `keep_freed_memory`), so a stage that makes large arrays for every batch runs
            as fast as in one undisturbed process; 0 leaves the C library's default.

    Example:
        >>> Workers(4, read_next_epoch=True).count
        4
    """

    count: int | Literal["auto"] = "auto"
    read_next_epoch: bool = False
    keep_freed_memory: int = DEFAULT_KEEP_BYTES

    def __post_init__(self) -> None:
        if self.count != "auto":
            if isinstance(self.count, str):
                raise ValueError(
                    f"workers must be an int >= 0, 'auto' or a Workers(...), got {self.count!r}."
                )
            meaning = "or 'auto', or a Workers(...)"
            _set(self, "count", check_int("workers", self.count, minimum=0, meaning=meaning))
        _set(self, "read_next_epoch", check_bool("read_next_epoch", self.read_next_epoch))
        keep = check_int("keep_freed_memory", self.keep_freed_memory, minimum=0)
        _set(self, "keep_freed_memory", keep)

    @classmethod
    def of(cls, workers: int | str | Workers) -> Workers:
        """`workers` as `Pipeline` takes it (a count, ``"auto"`` or a `Workers`)."""
        return workers if isinstance(workers, Workers) else cls(workers)  # type: ignore[arg-type]
