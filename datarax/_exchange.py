"""One small exchange of text between all processes, bounded in time, and the signal
that a batch is about to cross hosts.

Every process publishes a text and reads everyone else's through the coordinator's
key-value store, so a process that never arrives gives an error after a time-out
instead of a hang. This is the only user of the coordinator client
(`datarax._compat.coordinator_client`), which raises a clear error where a JAX release
moved it rather than fall back to an exchange without a time limit.

`crossing_hosts` is what a pipeline learns its batches reach other hosts from: a
pipeline runs its stages with its callback in `FEEDING`, and every builder of global
arrays calls `crossing_hosts()` before its own exchange, however the sharder that
calls it is held.
"""

from __future__ import annotations

import collections
import contextvars
from collections.abc import Callable, Hashable, Sequence

import jax

from datarax._compat import coordinator_client
from datarax.errors import ExchangeTimeoutError

EXCHANGE_TIMEOUT_S = 120.0
_KEY_PREFIX = "datarax/exchange"
_BLOCK = 64  # rounds whose keys are removed together, once all processes are past them
_rounds_done = [0]
# What `crossing_hosts` calls in this thread: a pipeline sets it around its stages (and
# a prefetcher around its placement) with FEEDING.set(callback) / FEEDING.reset(token).
FEEDING: contextvars.ContextVar[Callable[[], None] | None] = contextvars.ContextVar(
    "datarax_feeding", default=None
)


def crossing_hosts() -> None:
    """Says that a batch is about to become global arrays: the pipeline whose stage (or
    prefetcher) runs this, if any, then agrees with the other hosts on its epoch."""
    callback = FEEDING.get()
    if callback is not None:
        callback()


def exchange(text: str, what: str = "shard()", timeout_s: float = EXCHANGE_TIMEOUT_S) -> list[str]:
    """Every process's `text`, in process order (a collective: all must call it).

    Args:
        text: what this process contributes.
        what: the call that exchanges, named in the time-out error.
        timeout_s: how long to wait for the other processes.

    Raises:
        ExchangeTimeoutError: a process did not arrive within `timeout_s`.
    """
    count, me = jax.process_count(), jax.process_index()
    if count == 1:
        return [text]
    client = coordinator_client()
    round_index = _rounds_done[0]
    _rounds_done[0] += 1
    block, place = divmod(round_index, _BLOCK)
    key = f"{_KEY_PREFIX}/{block}/{place}"
    client.key_value_set(f"{key}/{me}", text)
    texts = []
    for process in range(count):
        if process == me:
            texts.append(text)
            continue
        try:
            texts.append(client.blocking_key_value_get(f"{key}/{process}", int(timeout_s * 1000)))
        except Exception as error:  # the client raises its own runtime error type
            raise ExchangeTimeoutError(
                f"Process {process} did not reach exchange #{round_index} of {what} within "
                f"{timeout_s:g} s (this is process {me}). Every process must call {what} the "
                "same number of times, in the same order, with batches of the same "
                f"structure. ({type(error).__name__}: {error})",
                process=process,
                what=what,
            ) from None
    if me == 0 and place == 0 and block >= 2:
        # Every peer has published this round, so every earlier block has been read in
        # full: one call removes a whole block of finished rounds (a directory).
        client.key_value_delete(f"{_KEY_PREFIX}/{block - 2}")
    return texts


def at_odds(values: Sequence[Hashable | None]) -> tuple[int, ...]:
    """The processes whose value (one per process, in process order) differs from the
    most common one; every process that has one when no value is the most common. A
    process whose value is None has nothing to compare, and is never at odds.

    Example:
        >>> at_odds(["float32", "float32", "int32"]), at_odds([(8, 3), (4, 3), None])
        ((2,), (0, 1))
    """
    counts = collections.Counter(value for value in values if value is not None)
    ranked = counts.most_common(2)
    common = ranked[0][0] if len(ranked) == 1 or ranked[0][1] > ranked[1][1] else None
    return tuple(
        process
        for process, value in enumerate(values)
        if value is not None and (common is None or value != common)
    )
