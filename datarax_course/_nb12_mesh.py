"""The checker of tutorial 12's mesh exercise: which mesh, and which ZeRO stage, fit a model.

``12.which_mesh``: given a model (`params` parameters, the largest layer `layer_params`)
and a machine (`hosts` hosts of `chips_per_host` chips of `chip_bytes` each, and the
activations a device keeps, `activation_bytes`), the mesh ``(replica, data, model)`` and
the ZeRO stage (0 to 3) of the least sharding that fits, by the lesson's rule: the
smallest model axis, within one host, with which some stage fits over a data axis of
every other device; the lowest stage that fits so; the smallest data axis at which that
stage fits; every device left over on the replica axis, which holds copies.

The rule makes the answer unique, and the checker compares it with the answer key's
(`datarax_course._keys.least_sharding`, through `reference`), which also gives the
model's bytes by part, unsharded. From those the checker says what is wrong with an
answer that differs, without giving the right one: axes that do not multiply to the
devices, a model axis across hosts, the parts of a device's memory when the answer does
not fit (and whether it would fit without the master weights or the activations, the
parts most often forgotten), or which axis or stage could be smaller when it fits.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from datarax_course._cases import draw, reference
from datarax_course._core import call, exercise
from datarax_course._feedback import Feedback, Rejected, right, wrong
from datarax_course._values import items, whole

NAME = "12.which_mesh"
_EXPECTED = "a tuple (replica, data, model, zero_stage) of whole numbers"
GB = 1e9  # the makers' gigabyte, as lesson 14 reads it

# (model, parameters, its largest layer's): shapes of GPT-3's and Llama 2's models.
_MODELS = [
    ("125M", 125_000_000, 7_077_888),
    ("350M", 354_000_000, 12_582_912),
    ("1.3B", 1_315_000_000, 50_331_648),
    ("2.7B", 2_651_000_000, 78_643_200),
    ("7B", 6_738_415_616, 202_375_168),
    ("13B", 13_015_864_320, 317_194_240),
    ("34B", 33_743_970_304, 692_060_160),
    ("70B", 68_976_648_192, 855_638_016),
]
# (the chips, how many a host holds, bytes of memory each)
_MACHINES = [
    ("TPU v5e chips", 4, 16 * GB),
    ("TPU v5e chips", 8, 16 * GB),
    ("TPU v6e chips", 8, 32 * GB),
    ("H100 GPUs", 8, 80 * GB),
    ("H200 GPUs", 8, 141 * GB),
]
_HOSTS = (1, 2, 3, 4, 8, 16, 32, 64)
# The fixed cases: (what the case shows, model, hosts, machine, activations in GB).
_FIXED = [
    ("plain data parallelism", "125M", 1, _MACHINES[0], 6.0),
    ("ZeRO-1", "1.3B", 1, _MACHINES[1], 2.0),
    ("ZeRO-1 on GPUs", "7B", 1, _MACHINES[3], 20.0),
    ("ZeRO-2 beside a replica axis", "13B", 2, _MACHINES[3], 30.0),
    ("ZeRO-3 over every chip", "7B", 4, _MACHINES[0], 6.0),
    ("a model axis", "70B", 16, _MACHINES[1], 4.5),
    ("ZeRO-3 beside a replica axis", "70B", 8, _MACHINES[3], 30.0),
]

Case = tuple[Any, Any, Any, Any, Any, Any]


def _text(label: str, params: Any, layer: Any, hosts: Any, machine: Any, acts: Any) -> str:
    chips, per_host, memory = machine
    return (
        f"{label} ({int(params):,} parameters, the largest layer {int(layer):,}) on "
        f"{int(hosts)} host{'s' * (int(hosts) > 1)} of {per_host} {chips} of "
        f"{float(memory) / GB:g} GB, {float(acts) / GB:.3f} GB of activations a device"
    )


def _drawn(rng: np.random.Generator) -> tuple[str, Case]:
    """A model on a machine, with as few hosts as keep it within reach of the rule (every
    part split over every device, the gathered layer over a host's chips), or more."""
    label, params, layer = _MODELS[int(rng.integers(len(_MODELS)))]
    scale = float(rng.uniform(0.9, 1.1))
    params, layer = int(params * scale), int(layer * scale)
    machine = _MACHINES[int(rng.integers(len(_MACHINES)))]
    _, per_host, memory = machine
    activations = int(memory * float(rng.uniform(0.05, 0.5)))
    spare = 0.98 * memory - activations
    # at most sharding a device keeps 16 bytes a parameter over every device, and 4 of the
    # largest layer (gathered) over a host's chips: the lesson's budget, made to fit
    within = [h for h in _HOSTS if 16 * params / (h * per_host) + 4 * layer / per_host <= spare]
    first = _HOSTS.index(within[0])
    hosts = _HOSTS[min(first + int(rng.integers(3)), len(_HOSTS) - 1)]
    text = _text(f"a {label} model", params, layer, hosts, machine, activations)
    return text, (params, layer, hosts, per_host, memory, activations)


def _given() -> list[tuple[str, Case]]:
    """(text, the arguments) as the reader's function gets them: the fixed cases, the
    last of them in numpy numbers, and three drawn ones."""
    found = []
    by_label = {label: (params, layer) for label, params, layer in _MODELS}
    for number, (shows, label, hosts, machine, act_gb) in enumerate(_FIXED):
        params, layer = by_label[label]
        _, per_host, memory = machine
        text = _text(f"{shows}: a {label} model", params, layer, hosts, machine, act_gb * GB)
        case: Case = (params, layer, hosts, per_host, memory, act_gb * GB)
        if number == len(_FIXED) - 1:
            text += ", given as numpy numbers"
            counts = (np.int64(params), np.int64(layer), np.int64(hosts), np.int64(per_host))
            case = (*counts, np.float64(memory), np.float64(act_gb * GB))
        found.append((text, case))
    rng = draw(NAME)
    return [*found, *(_drawn(rng) for _ in range(3))]


def _cases() -> list[tuple[str, tuple[int, int, int, int, float, float]]]:
    """The cases of `_given` as the answer key takes them: plain Python numbers."""
    return [
        (text, (int(p), int(lp), int(h), int(c), float(m), float(a)))
        for text, (p, lp, h, c, m, a) in _given()
    ]


def _answer(value: Any) -> tuple[int, int, int, int]:
    what = "which_mesh's result"
    replica, data, model, stage = (
        whole(item, f"the {part} in your result")
        for item, part in zip(
            items(value, what, _EXPECTED, length=4),
            ("replica axis", "data axis", "model axis", "zero_stage"),
            strict=True,
        )
    )
    for size, axis in ((replica, "replica"), (data, "data"), (model, "model")):
        if size < 1:
            raise Rejected(wrong(f"your {axis} axis has size {size}; a mesh axis has 1 or more."))
    if stage not in range(4):
        raise Rejected(wrong(f"your zero_stage is {stage}; ZeRO's stages are 0, 1, 2 and 3."))
    return replica, data, model, stage


def _parts(
    whole_bytes: dict[str, float], data: int, model: int, stage: int, activations: float
) -> dict[str, float]:
    """The bytes a device keeps, by part, from the model's bytes by part unsharded."""

    def over(first_stage: int) -> int:  # the devices a part is split over
        return model * (data if stage >= first_stage else 1)

    return {
        "weights": whole_bytes["weights"] / over(3),
        "gradients": whole_bytes["gradients"] / over(2),
        "optimizer state": (whole_bytes["master"] + whole_bytes["moments"]) / over(1),
        "gathered layer": whole_bytes["layer"] / model if stage == 3 else 0.0,
        "activations": activations,
    }


def _overflow(text: str, got: tuple[int, ...], whole_bytes: dict[str, float], case: Any) -> str:
    """What does not fit when `got` needs more than a device's memory."""
    _, data, model, stage = got
    memory, activations = case[4], case[5]
    parts = _parts(whole_bytes, data, model, stage, activations)
    shown = ", ".join(f"{part} {size / GB:.2f}" for part, size in parts.items() if size)
    largest = max(parts, key=lambda part: parts[part])
    said = (
        f"for {text}, a mesh of data axis {data} and model axis {model} with ZeRO-{stage} "
        f"does not fit: a device would keep {sum(parts.values()) / GB:.2f} GB ({shown}), "
        f"above its {memory / GB:g} GB; the largest part is the {largest}."
    )
    without_master = {**whole_bytes, "master": 0}
    forgot_master = sum(_parts(without_master, data, model, stage, activations).values())
    if forgot_master <= memory:
        said += (
            " It would fit without the float32 master weights, 4 bytes a parameter: they "
            "are optimizer state, kept beside the moments and sharded with them from ZeRO-1 on."
        )
    if sum(_parts(whole_bytes, data, model, stage, 0.0).values()) <= memory:
        also = " also" if forgot_master <= memory else ""
        said += f" It would{also} fit without the activations, which a device keeps on top."
    return said


def _mistake(text: str, got: tuple[int, int, int, int], truth: dict[str, Any], case: Any) -> str:
    """Which rule `got` breaks, naming the axis, the stage or the part of memory."""
    replica, data, model, stage = got
    hosts, per_host, memory = case[2], case[3], case[4]
    devices = hosts * per_host
    if replica * data * model != devices:
        return (
            f"for {text}, your axes multiply to {replica} x {data} x {model} = "
            f"{replica * data * model}, and the machine has {devices} devices ({hosts} x "
            f"{per_host}): a mesh holds every device once."
        )
    if model > per_host or per_host % model:
        where = "spans hosts" if model > per_host else "does not tile a host"
        return (
            f"for {text}, a model axis of {model} {where} of {per_host} chips: keep it to a "
            "divisor of a host's chips, since its all-reduces sit in every layer and a "
            "host's links are the fastest."
        )
    parts = _parts(truth["whole"], data, model, stage, case[5])
    if sum(parts.values()) > memory:
        return _overflow(text, got, truth["whole"], case)
    _, right_data, right_model, right_stage = truth["answer"]
    if model > right_model:
        return (
            f"for {text}, your mesh fits, but the model axis could be smaller: with a "
            "smaller one some ZeRO stage fits over a data axis of every other device, and "
            "the model axis's all-reduces cost every layer time."
        )
    if stage > right_stage:
        return (
            f"for {text}, your mesh fits, but a lower ZeRO stage than ZeRO-{stage} fits "
            f"with a model axis of {model} and a data axis of every other device: take the "
            "lowest, since each stage adds communication (ZeRO-3 gathers the weights for "
            "every pass)."
        )
    if stage == 0 and data > 1:
        return (
            f"for {text}, ZeRO-0 shards nothing over the data axis, so the rule keeps it at "
            "1 and puts every other device on the replica axis."
        )
    if data > right_data:
        return (
            f"for {text}, ZeRO-{stage} fits, but over a smaller data axis than {data}: "
            "shard over as few devices as fits, and give the rest to the replica axis."
        )
    return f"for {text}, your mesh is not the least sharding that fits by the lesson's rule."


@exercise(
    NAME,
    idea="count what a device keeps: bfloat16 weights and gradients (2 + 2 bytes a "
    "parameter), the optimizer state (float32 master weights and Adam's two float32 "
    "moments, 4 + 8 bytes), at ZeRO-3 one layer's weights and gradient gathered whole "
    "(4 bytes a parameter of the largest layer), and the activations. ZeRO-1 splits the "
    "optimizer state over the data axis, ZeRO-2 the gradients too, ZeRO-3 the weights "
    "too; the model axis splits all but the activations. Then take the least sharding "
    "that fits, in the rule's order: model axis, stage, data axis.",
    method="write needed(data, model, stage) in bytes. For each divisor `model` of "
    "chips_per_host, smallest first, try the stages 0 to 3 with data = devices // model; "
    "the first model with a stage that fits is the model axis, its lowest such stage the "
    "stage; the data axis is the smallest divisor of devices // model at which that stage "
    "fits, and replica = devices // (data * model).",
    cases=_cases,
)
def _which_mesh(answer: Any) -> Feedback:
    given = _given()
    found = [_answer(call(answer, *arguments)) for _, arguments in given]
    cases = _cases()
    expected = reference(NAME, cases)
    for (text, case), got, truth in zip(cases, found, expected, strict=True):
        if list(got) != list(truth["answer"]):
            return wrong(_mistake(text, got, truth, case))
    return right(
        f"your meshes and stages are the least sharding that fits in all {len(cases)} "
        "cases: plain data parallelism, ZeRO-1, ZeRO-2 and ZeRO-3, a data axis within a "
        "node beside a replica axis across nodes, and a model axis where ZeRO-3's "
        "gathered layer would not fit otherwise."
    )
