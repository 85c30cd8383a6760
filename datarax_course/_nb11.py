"""Checkers for tutorial 11, language-model data.

``11.attention_mask``: the boolean (n, n) mask a causal language model applies to one
packed row of n tokens, from the row's segment ids: token i may attend to token j only
where both lie in the same piece (equal segment ids, not 0, the padding) and j <= i.

The right answers come from Flax: its ``make_attention_mask`` (neither token is padding;
the same segment) and ``make_causal_mask``, combined with ``combine_masks`` as Flax's
language-model example combines them, by the answer keys
(`datarax_course._keys.segment_mask`, where the keys are) once the reader's function
has answered every row. The prompt asks for the mask without Flax's helpers, so they
(Flax's NNX and Linen ones) are refused while the reader's function runs. The rows tried
include padding, a row of one document, a row of one token, a JAX array, and rows of a
real `Packed` over drawn document lengths (other ones when grading).
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
from flax import nnx

from datarax.pipeline import Documents, Packed
from datarax_course._cases import counted, counted_here, draw
from datarax_course._core import Ban, call, exercise, keys_banned
from datarax_course._feedback import Feedback, right, wrong
from datarax_course._values import array

NAME = "11.attention_mask"
_EXPECTED = "a boolean array of shape (n, n) for a row of n tokens"

# (what the row is, its segment ids); the JAX array is made when the checker runs, so that
# importing the course starts no JAX backend (the grader sets its devices up after).
_ROWS: list[tuple[str, Any]] = [
    ("two documents, then padding", np.array([1, 1, 1, 2, 2, 0, 0, 0], np.int32)),
    ("one document filling the row", np.ones(8, np.int32)),
    ("one document, then padding", np.array([1, 1, 1, 1, 1, 0, 0, 0], np.int32)),
    ("one token per document", np.arange(1, 7, dtype=np.int32)),
    ("a row of a single token", np.ones(1, np.int32)),
    ("three documents as a JAX array", np.array([1, 1, 2, 2, 2, 3, 0, 0], np.int32)),
]
_AS_JAX = "three documents as a JAX array"


def _packed_rows() -> list[tuple[str, np.ndarray]]:
    """Three rows of a `Packed` over drawn document lengths: its first, middle and last."""
    rng = draw(NAME)
    length = int(rng.integers(8, 25))
    lengths = rng.integers(1, length + 8, size=int(rng.integers(6, 15)))
    packed = Packed(Documents([np.ones(n, np.int32) for n in lengths]), length)
    rows = sorted({0, len(packed) // 2, len(packed) - 1})
    return [
        (
            f"row {r} of {len(packed)} rows of {length} tokens packed from documents of "
            f"{lengths.tolist()} tokens",
            packed[r]["segment_ids"],
        )
        for r in rows
    ]


def _without_flax() -> tuple[Ban, ...]:
    """Flax's mask helpers, NNX's and Linen's, which the prompt asks to do without."""
    from flax import linen

    helpers = ("make_attention_mask", "make_causal_mask", "combine_masks")
    return tuple(
        Ban(getattr(module, helper), "__code__", f"Flax's {helper}")
        for module in (nnx, linen)
        for helper in helpers
    )


def _why(ids: np.ndarray, i: int, j: int) -> str:
    """Why token i may or may not attend to token j."""
    if ids[i] == 0:
        return f"token {i} is padding (segment id 0), which attends to nothing"
    if ids[j] == 0:
        return f"token {j} is padding (segment id 0)"
    if ids[i] != ids[j]:
        return f"they lie in different pieces (segments {ids[i]} and {ids[j]})"
    if j > i:
        return f"token {j} comes after token {i}, and a causal model looks only backwards"
    return f"both lie in piece {ids[i]} and token {j} comes no later than token {i}"


def _mistake(got: np.ndarray, ids: np.ndarray, expected: np.ndarray) -> str | None:
    """What a common wrong mask left out, or None when it is none of them."""
    n = len(ids)
    causal = np.tril(np.ones((n, n), bool))
    same = ids[:, None] == ids[None, :]
    real = (ids[:, None] > 0) & (ids[None, :] > 0)
    if np.array_equal(got, same & real):
        return (
            "your mask lets a token attend to later tokens of its piece: a causal language "
            "model sees only tokens j <= i."
        )
    if np.array_equal(got, same & causal):
        return (
            "your mask lets padding attend to padding (0 == 0): segment id 0 marks padding, "
            "which attends to nothing and is attended by nothing."
        )
    if np.array_equal(got, real & causal) or np.array_equal(got, causal):
        return (
            "your mask lets a token attend to the tokens of earlier documents in the row: "
            "only tokens with the same segment id may see each other."
        )
    if np.array_equal(got, expected.T):
        return (
            "your mask is transposed: mask[i, j] says whether token i (the query, a row) may "
            "attend to token j (the key, a column)."
        )
    return None


@exercise(
    NAME,
    idea="two tokens may see each other only inside the same piece of the row (equal "
    "segment ids, and not 0, the padding), and a causal model looks only backwards; "
    "Flax's mask helpers are refused, so compare the ids yourself.",
    method="compare every pair at once by broadcasting: segment_ids[:, None] == "
    "segment_ids[None, :] (the same piece), segment_ids[:, None] > 0 (not padding), and "
    "np.tril(np.ones((n, n), bool)) (j <= i); combine the three with &.",
)
def _attention_mask(answer: Any) -> Feedback:
    rows = [
        (name, jnp.asarray(ids) if name == _AS_JAX else ids) for name, ids in _ROWS
    ] + _packed_rows()
    found = counted(NAME)
    bans = (*_without_flax(), *keys_banned(found, "the checker's own mask"))
    masks = []
    for name, segment_ids in rows:
        ids = np.asarray(segment_ids)
        n = len(ids)
        given = segment_ids.copy() if isinstance(segment_ids, np.ndarray) else segment_ids
        got = array(call(answer, given, bans=bans), "attention_mask's result", _EXPECTED)
        shown = ids.tolist()
        if got.shape != (n, n):
            return wrong(
                f"for {name}, segment ids {shown}, the mask should have shape ({n}, {n}): "
                f"one row per query token, one column per key token; yours has shape "
                f"{got.shape}."
            )
        if got.dtype != bool:
            return wrong(
                f"for {name}, segment ids {shown}, your mask holds {got.dtype} values; return "
                "booleans (True where token i may attend to token j), as comparisons such as "
                "a == b give them."
            )
        masks.append(got)
    flax_mask = counted_here(NAME, found)  # every row answered before any mask is built
    for (name, segment_ids), got in zip(rows, masks, strict=True):
        ids = np.asarray(segment_ids)
        expected = flax_mask(ids)
        if np.array_equal(got, expected):
            continue
        mistake = _mistake(got, ids, expected)
        if mistake is not None:
            return wrong(f"for {name}, segment ids {ids.tolist()}, {mistake}")
        i, j = (int(k) for k in np.argwhere(got != expected)[0])
        return wrong(
            f"for {name}, segment ids {ids.tolist()}, mask[{i}, {j}] should be "
            f"{bool(expected[i, j])}, since {_why(ids, i, j)}; yours is {bool(got[i, j])}."
        )
    return right(
        f"your masks match Flax's on all {len(rows)} rows: padding, a row of one document, "
        "one token per document, a single token, a JAX array, and rows of a real Packed."
    )
