"""A pipeline's state: where iteration stands, as a small dict that JSON can hold.

`PipelineState` is the epoch and the next batch, plus what must match on resume (batch
size, source length, shuffle seed), and nothing about processes or devices, so a state
saved on 2 hosts resumes on 1 or 4. Over a source whose records change by epoch it also
holds the epoch's basis (`datarax.pipeline._epochs`), so that epoch resumes as it was.
`check_pipeline_state` checks the form of a state on its own: exactly the keys
`Pipeline.get_state` gives, each count a non-negative int and the seed None or a list of
ints. `PipelineState.check_fits` then compares it with the
pipeline it resumes; `Checkpoints.save` refuses a state that fails the form before it
writes or deletes anything.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from datarax._validate import check_int
from datarax.errors import PipelineStateError

STATE_KEYS = ("epoch", "batch_index", "batch_size", "source_length", "seed")
FINGERPRINT = "fingerprint"  # only where the source has one (`Packed`)
EPOCH_BASIS = "epoch_basis"  # only where the source changes by epoch (`Mixture`)
_MUST_MATCH = ("batch_size", "source_length", "seed")


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def check_pipeline_state(state: Any) -> dict[str, Any]:
    """Returns `state` as a plain dict when it has the form `Pipeline.get_state` gives.

    Raises:
        PipelineStateError: `state` is not a mapping with exactly the keys of a pipeline
            state, a count is negative, or the seed is not None or a list of ints.
        TypeError: a count is not an int (bools and floats are not).

    Example:
        >>> state = {"epoch": 0, "batch_index": 1, "batch_size": 2, "source_length": 4,
        ...          "seed": None}
        >>> check_pipeline_state(state) == state
        True
    """
    keys = set(state) - {FINGERPRINT, EPOCH_BASIS} if isinstance(state, Mapping) else None
    if keys != set(STATE_KEYS):
        got = sorted(map(str, state)) if isinstance(state, Mapping) else type(state).__name__
        raise PipelineStateError(
            f"state must be the dict get_state() returns, with keys {list(STATE_KEYS)} (and "
            f"{FINGERPRINT!r}, {EPOCH_BASIS!r} where the source has them); got {got}."
        )
    checked: dict[str, Any] = {}
    for key in ("epoch", "batch_index", "batch_size", "source_length"):
        try:
            checked[key] = check_int(f"state[{key!r}]", state[key], minimum=0)
        except ValueError as error:
            raise PipelineStateError(str(error), key=key) from None
    seed = state["seed"]
    if seed is not None and not (isinstance(seed, list) and all(map(_is_int, seed))):
        raise PipelineStateError(
            f"state['seed'] must be None (no shuffle) or the list of ints get_state() "
            f"gives, got {type(seed).__name__}: {seed!r:.100}.",
            key="seed",
        )
    checked["seed"] = None if seed is None else [int(word) for word in seed]
    if FINGERPRINT in state:
        if not isinstance(state[FINGERPRINT], str):
            raise PipelineStateError(
                f"state[{FINGERPRINT!r}] must be the str get_state() gives, got "
                f"{type(state[FINGERPRINT]).__name__}.",
                key=FINGERPRINT,
            )
        checked[FINGERPRINT] = state[FINGERPRINT]
    if EPOCH_BASIS in state:
        if not isinstance(state[EPOCH_BASIS], Mapping):
            raise PipelineStateError(
                f"state[{EPOCH_BASIS!r}] must be the dict get_state() gives, got "
                f"{type(state[EPOCH_BASIS]).__name__}.",
                key=EPOCH_BASIS,
            )
        checked[EPOCH_BASIS] = dict(state[EPOCH_BASIS])
    return checked


@dataclasses.dataclass(frozen=True)
class PipelineState:
    """Where a pipeline stands: the next batch is `batch_index` of `epoch`."""

    epoch: int
    batch_index: int
    batch_size: int
    source_length: int
    seed: tuple[int, ...] | None
    fingerprint: str | None = None  # what the source's records depend on, where it says
    epoch_basis: dict[str, Any] | None = None  # what fixes the epoch, where it changes

    @classmethod
    def from_dict(cls, state: Any) -> PipelineState:
        """The state of a dict `get_state` gave (checked by `check_pipeline_state`)."""
        checked = check_pipeline_state(state)
        seed = checked["seed"]
        return cls(**{**checked, "seed": None if seed is None else tuple(seed)})

    def to_dict(self) -> dict[str, Any]:
        """The state as `Pipeline.get_state` returns it (JSON-serialisable)."""
        as_dict = dataclasses.asdict(self)
        as_dict["seed"] = None if self.seed is None else list(self.seed)
        for key in (FINGERPRINT, EPOCH_BASIS):
            if as_dict[key] is None:
                del as_dict[key]
        return as_dict

    def check_fits(self, pipeline: PipelineState, num_batches: int) -> None:
        """Raises unless this state can resume a pipeline whose own state is `pipeline`
        and whose epochs have `num_batches` batches.

        Raises:
            PipelineStateError: the batch index is out of range, or the state was made by
                a pipeline with another batch size, source length or shuffle seed, or over
                a source of another fingerprint (where both states have one).
        """
        if self.batch_index > num_batches:
            raise PipelineStateError(
                f"state['batch_index'] must be in [0, {num_batches}], got {self.batch_index}.",
                key="batch_index",
            )
        mine, saved = pipeline.to_dict(), self.to_dict()
        if None not in (self.fingerprint, pipeline.fingerprint) and (
            self.fingerprint != pipeline.fingerprint
        ):
            raise PipelineStateError(
                f"This state was saved by a pipeline over another source: its records "
                f"depended on {self.fingerprint!r}, this source's on {pipeline.fingerprint!r} "
                "(a Packed built with another length, method, seed or documents has other "
                "rows). Build the source as it was before set_state.",
                key=FINGERPRINT,
            )
        for key in _MUST_MATCH:
            if saved[key] != mine[key]:
                raise PipelineStateError(
                    f"This state was saved by a pipeline with {key}={saved[key]!r}, but this "
                    f"one has {key}={mine[key]!r}: resuming would give other batches than "
                    "the saved run. Build the pipeline as it was (the same source, "
                    "batch_size and rngs seed) before set_state.",
                    key=key,
                )


class Position:
    """Where a pipeline stands: the epoch and its next batch, whether the next ``iter()``
    resumes there (before the first, and after a `set_state`) or begins the next epoch,
    and a generation that grows with every ``iter()`` and `set_state`, so an iterator
    made before knows it was superseded."""

    def __init__(self) -> None:
        self.epoch, self.next, self.resume, self.generation = 0, 0, True, 0

    def at(self, num_batches: int) -> tuple[int, int]:
        """The epoch and batch the pipeline stands at: at the end of an epoch, the start
        of the next."""
        if self.next >= num_batches:
            return self.epoch + 1, 0
        return self.epoch, self.next

    def begin_iteration(self, at: tuple[int, int]) -> None:
        """An ``iter()``: resume at `at` (the epoch and batch this position stands at), or
        begin the next epoch."""
        if self.resume:
            (self.epoch, self.next), self.resume = at, False
        else:
            self.epoch, self.next = self.epoch + 1, 0
        self.generation += 1

    def move_to(self, state: PipelineState) -> None:
        """A `set_state`: the next ``iter()`` resumes at `state`."""
        self.epoch, self.next, self.resume = state.epoch, state.batch_index, True
        self.generation += 1  # an iterator made before would go on from elsewhere
