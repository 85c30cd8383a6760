"""The checker of tutorial 12's mesh exercise: the least sharding that fits passes, however
it is found; each common mistake is told which axis, stage or part of memory is wrong,
without the right answer; the placeholder is not answered yet. The cases cover every
stage, a replica axis and a model axis, and none sits so near a device's memory that the
order of a sum could change a verdict."""

from __future__ import annotations

import itertools
import re
from typing import Any

import numpy as np
import pytest

from datarax_course import _cases, _keys, _nb12_mesh, check
from tests._support.exercise_checks import judges_right_wrong_and_placeholder

NAME = "12.which_mesh"
SEEDS = (None, 1, 7, 2024, 31337)


def divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]


def needed(
    params: Any,
    layer: Any,
    activations: Any,
    data: int,
    model: int,
    stage: int,
    master: int = 4,
    gradient: int = 2,
) -> float:
    """Bytes a device keeps: bf16 weights and gradients, float32 master weights and two
    moments, ZeRO-3's gathered layer (weights and gradient, bf16), the activations."""
    weights = 2 * params / (model * (data if stage >= 3 else 1))
    gradients = gradient * params / (model * (data if stage >= 2 else 1))
    state = (master + 8) * params / (model * (data if stage >= 1 else 1))
    gathered = 4 * layer / model if stage == 3 else 0
    return weights + gradients + state + gathered + activations


def which_mesh(
    params: Any, layer: Any, hosts: Any, chips: Any, memory: Any, activations: Any, **kw: Any
) -> tuple[int, int, int, int]:
    """The rule, step by step: model axis, then stage, then data axis."""
    devices = int(hosts * chips)
    for model in divisors(int(chips)):
        rest = devices // model
        stages = [
            s
            for s in range(4)
            if needed(params, layer, activations, rest, model, s, **kw) <= memory
        ]
        if stages:
            data = next(
                d
                for d in divisors(rest)
                if needed(params, layer, activations, d, model, stages[0], **kw) <= memory
            )
            return rest // data, data, model, stages[0]
    raise AssertionError("no mesh fits")


def least_in_order(
    params: Any, layer: Any, hosts: Any, chips: Any, memory: Any, activations: Any
) -> list[int]:
    """The rule read another way: the least (model, stage, data) of every mesh that fits,
    as a list."""
    devices = int(hosts) * int(chips)
    fitting = [
        (model, stage, data)
        for model in divisors(int(chips))
        for data in divisors(devices // model)
        for stage in range(4)
        if needed(params, layer, activations, data, model, stage) <= memory
    ]
    model, stage, data = min(fitting)
    return [devices // (model * data), data, model, stage]


def as_numpy(*args: Any) -> Any:
    return np.array(which_mesh(*args), dtype=np.int32)


def cases_of(seed: int | None) -> list[tuple[str, Any]]:
    if seed is None:
        return _nb12_mesh._cases()
    with _cases.drawing(seed):
        return _nb12_mesh._cases()


@pytest.mark.parametrize("solution", [which_mesh, least_in_order, as_numpy])
def test_the_least_sharding_that_fits_passes(solution: Any) -> None:
    assert check(NAME, solution, quiet=True)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_key_and_the_rule_read_another_way_agree(seed: int | None) -> None:
    for _, case in cases_of(seed):
        assert _keys.least_sharding(*case)["answer"] == least_in_order(*case), case


def test_the_fixed_cases_cover_every_stage_a_replica_and_a_model_axis() -> None:
    answers = [_keys.least_sharding(*case)["answer"] for _, case in cases_of(None)[:7]]
    assert {stage for *_, stage in answers} == {0, 1, 2, 3}
    assert any(replica > 1 and stage > 0 for replica, _, _, stage in answers)
    assert any(model > 1 for _, _, model, _ in answers)
    assert any(replica == 1 and stage == 3 for replica, _, _, stage in answers)


@pytest.mark.parametrize("seed", SEEDS)
def test_no_mesh_sits_at_the_edge_of_a_devices_memory(seed: int | None) -> None:
    """Every mesh of every case needs a billionth more or less than the memory at least,
    so no honest order of adding the parts up can turn a verdict."""
    for text, (params, layer, hosts, chips, memory, activations) in cases_of(seed):
        devices = hosts * chips
        for model, stage in itertools.product(divisors(chips), range(4)):
            for data in divisors(devices // model):
                gap = needed(params, layer, activations, data, model, stage) / memory - 1
                assert abs(gap) > 1e-9, (text, data, model, stage, gap)


def test_the_secret_cases_are_drawn_others_and_always_fit() -> None:
    public = [text for text, _ in cases_of(None)]
    for seed in range(1, 60):
        drawn = cases_of(seed)
        assert [text for text, _ in drawn] != public
        assert [text for text, _ in drawn[:7]] == public[:7]  # the fixed cases stay
        for _, case in drawn:
            assert len(_keys.least_sharding(*case)["answer"]) == 4  # raises if none fits


def test_the_secret_cases_are_judged_with_the_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_cases, "_KEYS", dict(_keys.KEYS))
    with _cases.drawing(777):
        assert check(NAME, which_mesh, quiet=True)
        told = check(NAME, forgot_the_master_weights, quiet=True)
        assert not told and "without the float32 master weights" in told.message, told.message


# The mistakes ----------------------------------------------------------------------------


def forgot_the_master_weights(*case: Any) -> Any:
    return which_mesh(*case, master=0)


def forgot_the_activations(params: Any, layer: Any, hosts: Any, chips: Any, memory: Any, _: Any):
    return which_mesh(params, layer, hosts, chips, memory, 0.0)


def float32_gradients(*case: Any) -> Any:
    return which_mesh(*case, gradient=4)


def zero3_over_every_device(params: Any, layer: Any, hosts: Any, chips: Any, *_: Any) -> Any:
    return 1, hosts * chips, 1, 3


def zero3_where_a_lower_stage_fits(*case: Any) -> Any:
    replica, data, model, stage = which_mesh(*case)
    return (1, replica * data, model, 3) if stage and replica > 1 else (replica, data, model, 3)


def model_axis_across_hosts(*case: Any) -> Any:
    replica, data, model, stage = which_mesh(*case)
    chips = case[3]
    return (
        (replica, data // chips, model * chips, stage) if model > 1 else (replica, data, 1, stage)
    )


def axes_per_host(params: Any, layer: Any, hosts: Any, chips: Any, *_: Any) -> Any:
    return hosts, chips, 1, 3  # right product, but not the rule's


def replica_left_out(*case: Any) -> Any:
    _, data, model, stage = which_mesh(*case)
    return 1, data, model, stage


def zero0_with_a_data_axis(*case: Any) -> Any:
    replica, data, model, stage = which_mesh(*case)
    return (1, replica * data, model, 0) if stage == 0 else (replica, data, model, stage)


def every_device_on_the_data_axis(*case: Any) -> Any:
    replica, data, model, stage = which_mesh(*case)
    return (1, replica * data, model, stage) if stage else (replica, data, model, stage)


def a_model_axis_first(*case: Any) -> Any:
    replica, data, model, stage = which_mesh(*case)
    return (1, replica * data // 2, 2, stage) if model == 1 else (replica, data, model, stage)


@pytest.mark.parametrize(
    ("mistake", "named"),
    [
        (forgot_the_master_weights, "It would fit without the float32 master weights"),
        (forgot_the_activations, "fit without the activations"),
        (float32_gradients, "ZeRO-1 fits, but over a smaller data axis than 4"),
        (zero3_over_every_device, "a lower ZeRO stage than ZeRO-3 fits"),
        (zero3_where_a_lower_stage_fits, "a lower ZeRO stage than ZeRO-3 fits"),
        (model_axis_across_hosts, "a model axis of 16 spans hosts of 8 chips"),
        (axes_per_host, "a lower ZeRO stage than ZeRO-3 fits"),
        (replica_left_out, "your axes multiply to 1 x 1 x 1 = 1, and the machine has 4"),
        (zero0_with_a_data_axis, "ZeRO-0 shards nothing over the data axis"),
        (every_device_on_the_data_axis, "ZeRO-1 fits, but over a smaller data axis than 8"),
        (a_model_axis_first, "the model axis could be smaller"),
    ],
)
def test_a_mistake_is_told_what_is_wrong(mistake: Any, named: str) -> None:
    judges_right_wrong_and_placeholder(NAME, which_mesh, mistake, named)


@pytest.mark.parametrize(
    "mistake",
    [forgot_the_master_weights, float32_gradients, model_axis_across_hosts, a_model_axis_first],
)
def test_the_feedback_never_gives_the_right_mesh(mistake: Any) -> None:
    """Where the answer's axis or stage is wrong, the feedback does not name the right one."""
    told = check(NAME, mistake, quiet=True)
    text, case = next(
        (text, case)
        for text, case in _nb12_mesh._cases()
        if told.message.startswith(f"for {text},")
    )
    said = told.message.removeprefix(f"for {text},").split(" Hint:")[0]
    got = mistake(*case)
    right = _keys.least_sharding(*case)["answer"]
    assert not told and list(got) != right
    for position, words in ((1, "data axis (of )?{}"), (2, "model axis (of )?{}"), (3, "ZeRO-{}")):
        if got[position] != right[position]:
            assert not re.search(words.format(right[position]) + r"\b", said), (words, said)


def test_the_overflow_names_each_part_of_a_devices_memory() -> None:
    told = check(NAME, forgot_the_master_weights, quiet=True)
    for part in ("weights", "gradients", "optimizer state", "activations", "above its"):
        assert part in told.message, told.message
    assert "the largest part is the optimizer state" in told.message


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (
            lambda *case: which_mesh(*case)[:3],
            "should be a tuple (replica, data, model, zero_stage)",
        ),
        (lambda *case: (*which_mesh(*case)[:3], 4), "ZeRO's stages are 0, 1, 2 and 3"),
        (lambda *case: (0, *which_mesh(*case)[1:]), "your replica axis has size 0"),
        (lambda *case: (*which_mesh(*case)[:3], 1.5), "the zero_stage in your result should be"),
        (lambda *case: {"data": 8}, "should be a tuple"),
    ],
)
def test_a_result_of_the_wrong_form_is_named(answer: Any, said: str) -> None:
    told = check(NAME, answer, quiet=True)
    assert not told and not told.checker_bug and said in told.message, told.message


def test_the_placeholder_a_missing_return_and_an_error_never_raise() -> None:
    assert check(NAME, ..., quiet=True).message.startswith("not answered yet")
    forgot = check(NAME, lambda *case: None, quiet=True)
    assert not forgot and "forget `return`" in forgot.message
    told = check(NAME, lambda *case: case[9], quiet=True)
    assert not told and not told.checker_bug and "your function raised IndexError" in told.message
