"""The checker of tutorial 14: a right count of bytes per device passes, whether it reads
the state's specs with optax's tree_map_params or pairs the leaves by hand; each common
wrong count (the optimizer's second moment or step count left out, sharded leaves not
divided, replicated ones divided, elements counted instead of bytes) is told what it got
wrong; the placeholder is not answered yet, and nothing the reader's function does makes
the checker raise."""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np
import optax
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from datarax import viz
from datarax_course import _cases, check
from datarax_course._nb14 import _cases as cases_of_14
from tests._support.exercise_checks import judges_right_wrong_and_placeholder

NAME = "14.bytes_per_device"


def is_spec(x: Any) -> bool:
    return isinstance(x, P)


def leaf_bytes(leaf: Any, spec: P, mesh: Any) -> int:
    block = NamedSharding(mesh, spec).shard_shape(leaf.shape)
    return math.prod(block) * np.dtype(leaf.dtype).itemsize


def total(tree: Any, specs: Any, mesh: Any) -> int:
    leaves, spec_leaves = jax.tree.leaves(tree), jax.tree.leaves(specs, is_leaf=is_spec)
    return sum(leaf_bytes(leaf, spec, mesh) for leaf, spec in zip(leaves, spec_leaves, strict=True))


def state_and_specs(params: Any, optimizer: Any, specs: Any) -> tuple[Any, Any]:
    state = jax.eval_shape(optimizer.init, params)
    state_specs = optax.tree_utils.tree_map_params(
        optimizer,
        lambda _, spec: spec,
        state,
        specs,
        transform_non_params=lambda _: P(),
        is_leaf=is_spec,
    )
    return state, state_specs


def bytes_per_device(params: Any, optimizer: Any, mesh: Any, specs: Any) -> Any:
    state, state_specs = state_and_specs(params, optimizer, specs)
    held = total(params, specs, mesh)
    return {"params": held, "grads": held, "optimizer": total(state, state_specs, mesh)}


def by_hand(params: Any, optimizer: Any, mesh: Any, specs: Any) -> Any:
    """No tree_map_params: a state leaf of a parameter's shape and path ending takes its
    spec, any other leaf (a step count) is replicated."""
    by_path = {
        jax.tree_util.keystr(path): spec
        for path, spec in jax.tree_util.tree_leaves_with_path(specs, is_leaf=is_spec)
    }
    state = jax.eval_shape(optimizer.init, params)
    held = 0
    for path, leaf in jax.tree_util.tree_leaves_with_path(state):
        text = jax.tree_util.keystr(path)
        owner = [spec for name, spec in by_path.items() if text.endswith(name)]
        held += leaf_bytes(leaf, owner[0] if owner and np.ndim(leaf) else P(), mesh)
    params_held = total(params, specs, mesh)
    return {"params": params_held, "grads": params_held, "optimizer": held}


def as_numpy(params: Any, optimizer: Any, mesh: Any, specs: Any) -> Any:
    return {k: np.int64(v) for k, v in bytes_per_device(params, optimizer, mesh, specs).items()}


@pytest.mark.parametrize("solution", [bytes_per_device, by_hand, as_numpy])
def test_a_right_count_passes(solution: Any) -> None:
    told = check(NAME, solution, quiet=True)
    assert told, told.message


def without_second_moment(params: Any, optimizer: Any, mesh: Any, specs: Any) -> Any:
    right = bytes_per_device(params, optimizer, mesh, specs)
    state, _ = state_and_specs(params, optimizer, specs)
    if any(np.ndim(leaf) == 0 for leaf in jax.tree.leaves(state)):  # Adam-like: drop nu
        right["optimizer"] = 4 + right["params"]
    return right


def without_step_count(params: Any, optimizer: Any, mesh: Any, specs: Any) -> Any:
    state, state_specs = state_and_specs(params, optimizer, specs)
    leaves = jax.tree.leaves(state)
    spec_leaves = jax.tree.leaves(state_specs, is_leaf=is_spec)
    right = bytes_per_device(params, optimizer, mesh, specs)
    right["optimizer"] = sum(
        leaf_bytes(leaf, spec, mesh)
        for leaf, spec in zip(leaves, spec_leaves, strict=True)
        if np.ndim(leaf)
    )
    return right


def not_divided(params: Any, optimizer: Any, mesh: Any, specs: Any) -> Any:
    whole = sum(
        math.prod(leaf.shape) * np.dtype(leaf.dtype).itemsize for leaf in jax.tree.leaves(params)
    )
    right = bytes_per_device(params, optimizer, mesh, specs)
    return {**right, "params": whole, "grads": whole}


def all_divided(params: Any, optimizer: Any, mesh: Any, specs: Any) -> Any:
    right = bytes_per_device(params, optimizer, mesh, specs)
    divided = sum(
        math.prod(leaf.shape) * np.dtype(leaf.dtype).itemsize / mesh.size
        for leaf in jax.tree.leaves(params)
    )
    return {**right, "params": divided, "grads": divided}


def elements(params: Any, optimizer: Any, mesh: Any, specs: Any) -> Any:
    count = sum(
        math.prod(NamedSharding(mesh, spec).shard_shape(leaf.shape))
        for leaf, spec in zip(
            jax.tree.leaves(params), jax.tree.leaves(specs, is_leaf=is_spec), strict=True
        )
    )
    return {**bytes_per_device(params, optimizer, mesh, specs), "params": count}


def no_gradients(params: Any, optimizer: Any, mesh: Any, specs: Any) -> Any:
    return {**bytes_per_device(params, optimizer, mesh, specs), "grads": 0}


def moments_in_param_dtype(params: Any, optimizer: Any, mesh: Any, specs: Any) -> Any:
    right = bytes_per_device(params, optimizer, mesh, specs)
    state, _ = state_and_specs(params, optimizer, specs)
    scalars = 4 * sum(np.ndim(leaf) == 0 for leaf in jax.tree.leaves(state))
    copies = (len(jax.tree.leaves(state)) - scalars // 4) // len(jax.tree.leaves(params))
    return {**right, "optimizer": scalars + copies * right["params"]}


@pytest.mark.parametrize(
    ("mistake", "named"),
    [
        (without_second_moment, "first and second moments"),
        (without_step_count, "such as the step count"),
        (not_divided, "every leaf whole, as if nothing were split"),
        (all_divided, "replicated ones too"),
        (elements, "number of elements a device holds"),
        (no_gradients, "the gradients take what the parameters take"),
        (moments_in_param_dtype, "read each state leaf's own dtype"),
    ],
)
def test_a_wrong_count_is_told_what_it_got_wrong(mistake: Any, named: str) -> None:
    judges_right_wrong_and_placeholder(NAME, bytes_per_device, mistake, named)


def with_the_librarys_counts(params: Any, optimizer: Any, mesh: Any, specs: Any) -> Any:
    """The sums read off `viz.leaf_summaries`, as the notebook's `held` reads them."""

    def held(tree: Any, tree_specs: Any) -> int:
        placed = jax.tree.map(
            lambda leaf, spec: jax.ShapeDtypeStruct(
                leaf.shape, leaf.dtype, sharding=NamedSharding(mesh, spec)
            ),
            tree,
            tree_specs,
            is_leaf=is_spec,
        )
        return sum(leaf.bytes_per_device or 0 for leaf in viz.leaf_summaries(placed))

    state, state_specs = state_and_specs(params, optimizer, specs)
    held_params = held(params, specs)
    return {"params": held_params, "grads": held_params, "optimizer": held(state, state_specs)}


def test_the_librarys_byte_counts_are_refused_and_restored() -> None:
    """The prompt asks for the arithmetic without `viz.leaf_summaries` (nor `summarize`,
    which reads it); both work again after the check."""
    told = check(NAME, with_the_librarys_counts, quiet=True)
    assert not told and "datarax.viz.leaf_summaries" in told.message, told.message
    mesh = jax.make_mesh((len(jax.devices()),), ("data",))
    leaf = jax.ShapeDtypeStruct(
        (8 * mesh.size,), np.float32, sharding=NamedSharding(mesh, P("data"))
    )
    assert viz.leaf_summaries({"w": leaf})[0].bytes_per_device == 32
    assert "32" in viz.summarize({"w": leaf})


def test_the_cases_cover_every_layout_optimizer_and_form() -> None:
    texts = [case.text() for case in cases_of_14()]
    for needle in ("DP", "FSDP,", "FSDP + TP", "a spec drawn per leaf", "as arrays"):
        assert any(needle in text for text in texts), needle
    for optimizer in ("optax.sgd(0.1)", "mu_dtype", "optax.lion", "optax.chain"):
        assert any(optimizer in text for text in texts), optimizer
    if len(jax.devices()) % 2 == 0:
        assert any("('data', 'model') mesh" in text for text in texts)


def test_the_secret_cases_differ_from_the_public_ones() -> None:
    public = [case.text() for case in cases_of_14()]
    with _cases.drawing(2024):
        secret = [case.text() for case in cases_of_14()]
        assert check(NAME, bytes_per_device, quiet=True)
    assert secret != public


def test_a_wrong_form_is_named() -> None:
    told = check(NAME, lambda *args: (1, 2, 3), quiet=True)
    assert not told and "should be a dict" in told.message, told.message
    told = check(NAME, lambda *args: {"params": 1, "grads": 1}, quiet=True)
    assert not told and "it has no 'optimizer'" in told.message, told.message
    told = check(NAME, lambda *args: {"params": 1.5, "grads": 1, "optimizer": 1}, quiet=True)
    assert not told and "not a whole number of bytes" in told.message, told.message


def test_the_placeholder_a_missing_return_and_an_error_never_raise() -> None:
    assert check(NAME, ..., quiet=True).message.startswith("not answered yet")
    forgot = check(NAME, lambda *args: None, quiet=True)
    assert not forgot and "forget `return`" in forgot.message

    def broken(params: Any, optimizer: Any, mesh: Any, specs: Any) -> Any:
        return {"params": params["missing"]}

    told = check(NAME, broken, quiet=True)
    assert not told and not told.checker_bug and "your function raised" in told.message
