"""Decisions the hosts of a pipeline take together.

`agree` is one small exchange through the coordinator, bounded in time: every host
learns every host's value, and a disagreement is an error on every host, never a
hang. `EpochEnds` decides when a pipeline takes part, from what it does, never by
searching its stages: a pipeline of global batches compares its state with the other
hosts' once (and again after each `set_state`); a per-host pipeline agrees on each
epoch's number of batches from the moment one of its batches is about to become global
arrays (or always, with ``multihost=True``; never, with ``multihost=False``).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import jax

from datarax._exchange import at_odds, exchange
from datarax.errors import HostMismatchError
from datarax.pipeline._options import HostOptions


def agree(text: str, what: str | None) -> list[str]:
    """Every process's `text`, in process order (all processes must call it).

    Args:
        text: this process's value.
        what: when given, the values must be equal, and a `HostMismatchError` naming
            `what` and each process's value is raised on every host when they are not.
    """
    texts = exchange(text, "Pipeline iteration")
    if what is not None and len(set(texts)) > 1:
        listed = "; ".join(f"process {p}: {t}" for p, t in enumerate(texts))
        raise HostMismatchError(
            f"The hosts disagree on {what} ({listed}). Build the pipeline the same way on "
            "every host (the same source, batch_size and rngs) and resume it from the "
            "same state.",
            what=what,
            values=texts,
            processes=at_odds(texts),
        )
    return texts


def agree_on_batches_left(left: int, epoch: int, uneven_hosts: str) -> int:
    """How many batches every host runs when each has `left` of `epoch` to go.

    ``"stop"``: the smallest count; ``"raise"``: a `HostMismatchError` on every host
    naming each host's count when they differ. Hosts built with different
    `uneven_hosts` get a `HostMismatchError` on every host too.
    """
    texts = agree(json.dumps([left, uneven_hosts]), None)
    counts, policies = zip(*(json.loads(text) for text in texts), strict=True)
    if len(set(policies)) > 1:
        listed = ", ".join(f"{p!r} on process {i}" for i, p in enumerate(policies))
        raise HostMismatchError(
            f"The hosts' pipelines were built with different uneven_hosts: {listed}. "
            "Pass the same uneven_hosts to Pipeline on every host.",
            what="uneven_hosts",
            values=list(policies),
            processes=at_odds(list(policies)),
        )
    if len(set(counts)) > 1 and uneven_hosts == "raise":
        listed = ", ".join(f"{c} on process {p}" for p, c in enumerate(counts))
        raise HostMismatchError(
            f"The hosts' pipelines have different numbers of batches left in epoch {epoch}: "
            f"{listed}. Give every host the same number of rows (JaxProcessSharder("
            "drop_remainder=True) does), or use uneven_hosts='stop' to stop every host at "
            "the smallest count.",
            what="batches left",
            values=list(counts),
            processes=at_odds(list(counts)),
        )
    return min(counts)


class EpochEnds:
    """Where each epoch of a pipeline ends, agreed with the other hosts when it must be.

    `begin` starts an epoch at batch `start` of `num_batches`; `end` is then the batch
    the epoch stops before. `crossing_hosts` is called when one of the pipeline's
    batches is about to become global arrays; `forget_state` after a `set_state`.
    """

    def __init__(self, options: HostOptions, is_global: bool):
        self._options, self._global = options, is_global
        self._feeds_hosts = bool(options.multihost)  # its batches have crossed hosts (or True)
        self._state_agreed = False  # whether global hosts have compared their states
        self._epoch, self._start, self.end, self._end_agreed = 0, 0, 0, False

    def begin(self, epoch: int, start: int, num_batches: int, state: Callable[[], str]) -> None:
        """Begins `epoch` at batch `start`; `state()` is the pipeline's state as JSON."""
        self._epoch, self._start, self.end, self._end_agreed = epoch, start, num_batches, False
        if jax.process_count() == 1:
            return
        if self._global:
            # A global epoch's batches follow from the state; once the hosts have found
            # their states equal, the epochs after it stay equal without an exchange.
            if not self._state_agreed:
                agree(state(), "the pipeline's state")
                self._state_agreed = True
            self._end_agreed = True
        elif self._feeds_hosts:  # never set for multihost=False
            self._agree_on_end(num_batches)

    def _agree_on_end(self, num_batches: int) -> None:
        left = num_batches - self._start
        agreed = agree_on_batches_left(left, self._epoch, self._options.uneven_hosts)
        self.end, self._end_agreed = self._start + agreed, True

    def crossing_hosts(self) -> None:
        """One of the pipeline's batches is about to become global arrays: from now on the
        hosts agree on each epoch's end, this one included."""
        if self._global or self._options.multihost is False:
            return
        self._feeds_hosts = True
        if not self._end_agreed:
            self._agree_on_end(self.end)

    def forget_state(self) -> None:
        """The state changed (`set_state`): global hosts compare it again."""
        self._state_agreed = False
