"""The checker of tutorial 11: a right mask passes, whether numpy or JAX built it, and one
Flax's helpers built is refused, as the prompt asks; each common wrong mask is told what
it got wrong; the placeholder is not answered yet, a missing return is named, and
nothing the reader's function does makes it raise."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen, nnx

from datarax_course import check
from tests._support.exercise_checks import judges_right_wrong_and_placeholder

NAME = "11.attention_mask"


def attention_mask(segment_ids: Any) -> Any:
    ids = np.asarray(segment_ids)
    causal = np.tril(np.ones((len(ids), len(ids)), bool))
    return (ids[:, None] == ids[None, :]) & (ids[:, None] > 0) & causal


def with_jax(segment_ids: Any) -> Any:
    ids = jnp.asarray(segment_ids)
    causal = jnp.tril(jnp.ones((len(ids), len(ids)), bool))
    return (ids[:, None] == ids[None, :]) & (ids[None, :] > 0) & causal  # keys: enough


def with_flax(segment_ids: Any) -> Any:
    ids = jnp.asarray(segment_ids)
    return nnx.combine_masks(
        nnx.make_attention_mask(ids > 0, ids > 0),
        nnx.make_attention_mask(ids, ids, jnp.equal),
        nnx.make_causal_mask(ids),
        dtype=bool,
    )[0]


def with_linen(segment_ids: Any) -> Any:
    ids = jnp.asarray(segment_ids)
    real = linen.make_attention_mask(ids > 0, ids > 0, dtype=bool)
    mask = real & linen.make_causal_mask(ids, dtype=bool)[0]
    return (mask & (ids[:, None] == ids[None, :]))[0]


def as_nested_lists(segment_ids: Any) -> Any:
    return attention_mask(segment_ids).tolist()


def by_definition(segment_ids: Any) -> Any:
    """The rule, pair by pair, for a test that does not trust broadcasting."""
    ids = [int(s) for s in np.asarray(segment_ids)]
    return np.array(
        [[0 < ids[i] == ids[j] and j <= i for j in range(len(ids))] for i in range(len(ids))]
    )


@pytest.mark.parametrize("solution", [attention_mask, with_jax, as_nested_lists])
def test_a_right_mask_passes(solution: Any) -> None:
    assert check(NAME, solution, quiet=True)


@pytest.mark.parametrize(
    ("borrowed", "named"),
    [(with_flax, "Flax's make_attention_mask"), (with_linen, "Flax's make_attention_mask")],
)
def test_flaxs_helpers_are_refused_and_restored(borrowed: Any, named: str) -> None:
    """The prompt asks for the mask without Flax's helpers, NNX's or Linen's; they work
    again once the check is done."""
    told = check(NAME, borrowed, quiet=True)
    assert not told and named in told.message and "without" in told.message, told
    assert np.array_equal(np.asarray(with_flax([1, 1, 0])), attention_mask([1, 1, 0]))
    assert np.array_equal(np.asarray(with_linen([1, 2, 2])), attention_mask([1, 2, 2]))


def test_the_checker_and_the_rule_agree_on_rows_of_every_kind() -> None:
    rows = [[1, 1, 2, 0], [1], [3, 3, 3], [1, 2, 3, 4], [1, 1, 1, 2, 2, 0, 0, 0]]
    for row in rows:
        assert np.array_equal(by_definition(row), attention_mask(row)), row
        assert np.array_equal(by_definition(row), np.asarray(with_flax(row))), row
    assert check(NAME, by_definition, quiet=True)


def not_causal(segment_ids: Any) -> Any:
    ids = np.asarray(segment_ids)
    return (ids[:, None] == ids[None, :]) & (ids[:, None] > 0)


def padding_attends_padding(segment_ids: Any) -> Any:
    ids = np.asarray(segment_ids)
    return (ids[:, None] == ids[None, :]) & np.tril(np.ones((len(ids), len(ids)), bool))


def causal_only(segment_ids: Any) -> Any:
    return np.tril(np.ones((len(segment_ids), len(segment_ids)), bool))


def transposed(segment_ids: Any) -> Any:
    return attention_mask(segment_ids).T


def one_pair_wrong(segment_ids: Any) -> Any:
    mask = attention_mask(segment_ids)
    mask[-1, 0] = not mask[-1, 0]
    return mask


@pytest.mark.parametrize(
    ("mistake", "named"),
    [
        (not_causal, "a causal language model sees only tokens j <= i"),
        (padding_attends_padding, "lets padding attend to padding"),
        (causal_only, "tokens of earlier documents"),
        (transposed, "your mask is transposed"),
        (one_pair_wrong, "mask[7, 0] should be False, since token 7 is padding"),
        (lambda ids: attention_mask(ids).astype(np.int32), "return booleans"),
    ],
)
def test_a_wrong_mask_is_told_what_it_got_wrong(mistake: Any, named: str) -> None:
    judges_right_wrong_and_placeholder(NAME, attention_mask, mistake, named)


def test_a_mask_with_flaxs_leading_axis_is_told_its_shape() -> None:
    told = check(NAME, lambda ids: attention_mask(ids)[None], quiet=True)
    assert not told and "should have shape (8, 8)" in told.message, told.message
    assert "yours has shape (1, 8, 8)" in told.message


def test_the_row_of_one_document_and_the_single_token_are_tried() -> None:
    """A mask that is right only where a row holds padding or several documents."""

    def only_with_padding(segment_ids: Any) -> Any:
        ids = np.asarray(segment_ids)
        return attention_mask(ids) if (ids == 0).any() else np.zeros((len(ids),) * 2, bool)

    told = check(NAME, only_with_padding, quiet=True)
    assert not told and "one document filling the row" in told.message, told.message


def test_the_drawn_rows_come_from_a_real_packed() -> None:
    def wrong_on_long_rows(segment_ids: Any) -> Any:
        return attention_mask(segment_ids) if len(segment_ids) <= 8 else causal_only(segment_ids)

    told = check(NAME, wrong_on_long_rows, quiet=True)
    assert not told and "rows of" in told.message and "tokens packed from" in told.message


def test_the_placeholder_a_missing_return_and_an_error_never_raise() -> None:
    assert check(NAME, ..., quiet=True).message.startswith("not answered yet")
    forgot = check(NAME, lambda ids: None, quiet=True)
    assert not forgot and "forget `return`" in forgot.message

    def broken(segment_ids: Any) -> Any:
        return segment_ids[:, None, None, None, None] @ segment_ids  # a shape error

    told = check(NAME, broken, quiet=True)
    assert not told and not told.checker_bug and "your function raised" in told.message
