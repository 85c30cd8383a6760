"""Checkers for tutorial 06, data-parallel training.

``06.allreduce_bytes``: the bytes each device sends in one step's gradient all-reduce
(a ring all-reduce), from the parameters and the batch's sharding. The group that
averages is read off the sharding (the devices that hold different rows), and the
payload off the parameters' shapes and dtypes.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, Sharding
from jax.sharding import PartitionSpec as P

from datarax_course._cases import draw, reference
from datarax_course._core import call, exercise
from datarax_course._feedback import Feedback, right, wrong
from datarax_course._values import number


def _params(width: int = 64, bias: Any = jnp.bfloat16) -> dict[str, Any]:
    """A small model's parameters: float32 kernels and a bias of dtype `bias`."""
    return {
        "hidden": {"kernel": jnp.zeros((2, width)), "bias": jnp.zeros(width, bias)},
        "output": {"kernel": jnp.zeros((width, 3)), "bias": jnp.zeros(3)},
    }


def _shardings() -> list[tuple[str, Sharding]]:
    devices = jax.devices()
    cases: list[tuple[str, Sharding]] = [
        ("one device", NamedSharding(Mesh(np.array(devices[:1]), ("data",)), P())),
        ("all devices on 'data'", NamedSharding(Mesh(np.array(devices), ("data",)), P("data"))),
    ]
    if len(devices) >= 4 and len(devices) % 2 == 0:
        grid = np.array(devices)[::-1].reshape(len(devices) // 2, 2)  # not in device order
        mesh = Mesh(grid, ("data", "model"))
        cases += [
            ("a (data, model) mesh, batch on 'data'", NamedSharding(mesh, P("data"))),
            ("the same mesh, batch on both axes", NamedSharding(mesh, P(("data", "model")))),
            ("the same mesh, batch replicated", NamedSharding(mesh, P())),
        ]
    return cases


def _cases() -> list[tuple[str, tuple[Any, Sharding]]]:
    """(text, (params, batch sharding)): the notebook's model on every sharding, then a
    model of a drawn width and bias dtype on every sharding."""
    rng = draw("06.allreduce_bytes")
    width = int(rng.integers(3, 200))
    bias = str(rng.choice(["float32", "bfloat16", "float16"]))
    cases = []
    for model, params in (
        ("the model", _params()),
        (f"a model {width} wide", _params(width, bias)),
    ):
        for name, sharding in _shardings():
            cases.append((f"{model}, {name}", (params, sharding)))
    return cases


@exercise(
    "06.allreduce_bytes",
    idea="the payload is the whole gradient, one value per parameter in its dtype; the "
    "group that averages is the devices that hold different rows of the batch.",
    method="payload = sum(leaf.size * leaf.dtype.itemsize for leaf in "
    "jax.tree.leaves(params)); N = B / (rows per device), e.g. with "
    "batch_sharding.shard_shape on a probe batch of len(device_set) rows; a ring "
    "all-reduce sends 2 (N - 1) / N x payload per device.",
    cases=_cases,
)
def _allreduce_bytes(answer: Any) -> Feedback:
    cases = _cases()
    found = [
        number(call(answer, params, sharding), "allreduce_bytes's result")
        for _, (params, sharding) in cases
    ]
    expected = reference("06.allreduce_bytes", cases)
    for (text, (params, sharding)), got, right_value in zip(cases, found, expected, strict=True):
        if not np.isclose(got, right_value):
            payload = sum(leaf.size * leaf.dtype.itemsize for leaf in jax.tree.leaves(params))
            probe = len(sharding.device_set)
            group = probe // sharding.shard_shape((probe,))[0]
            who = (
                "no two devices hold different rows, so there is nothing to average"
                if group == 1
                else f"{group} devices hold different rows and average their gradients"
            )
            return wrong(
                f"with {text} ({probe} device(s)), {who}; the payload is {payload} bytes, so "
                f"each device sends {right_value:.1f} bytes per step. Your function returned "
                f"{got:g}."
            )
    return right(
        f"the bytes per device match a ring all-reduce in {len(cases)} cases (one device, "
        "replicas and bfloat16 leaves included)."
    )
