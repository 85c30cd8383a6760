"""The rules a pipeline state obeys, checked before it is used or saved.

`check_pipeline_state` checks the form of a state on its own: exactly the keys
`Pipeline.get_state` gives, each count a non-negative int and the seed None or a
list of ints, and nothing that JSON cannot hold. `Pipeline.set_state` then also
compares it with the pipeline it resumes; `Checkpoints.save` refuses a state that
fails here before it writes or deletes anything.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from datarax._validate import check_int

STATE_KEYS = ("epoch", "batch_index", "batch_size", "source_length", "seed")


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def check_pipeline_state(state: Any) -> dict[str, Any]:
    """Returns `state` as a plain dict when it has the form `Pipeline.get_state` gives.

    Raises:
        ValueError: `state` is not a mapping with exactly the keys of a pipeline
            state, a count is negative, or the seed is not None or a list of ints.
        TypeError: a count is not an int (bools and floats are not).

    Example:
        >>> state = {"epoch": 0, "batch_index": 1, "batch_size": 2, "source_length": 4,
        ...          "seed": None}
        >>> check_pipeline_state(state) == state
        True
    """
    if not isinstance(state, Mapping) or set(state) != set(STATE_KEYS):
        got = sorted(map(str, state)) if isinstance(state, Mapping) else type(state).__name__
        raise ValueError(
            f"state must be the dict get_state() returns, with keys {list(STATE_KEYS)}; got {got}."
        )
    checked: dict[str, Any] = {
        key: check_int(f"state[{key!r}]", state[key], minimum=0)
        for key in ("epoch", "batch_index", "batch_size", "source_length")
    }
    seed = state["seed"]
    if seed is not None and not (isinstance(seed, list) and all(map(_is_int, seed))):
        raise ValueError(
            f"state['seed'] must be None (no shuffle) or the list of ints get_state() "
            f"gives, got {type(seed).__name__}: {seed!r:.100}."
        )
    checked["seed"] = None if seed is None else [int(word) for word in seed]
    return checked
