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
from jax.sharding import Mesh, NamedSharding, Sharding, SingleDeviceSharding
from jax.sharding import PartitionSpec as P

from datarax.exercises._core import answer_key, call, exercise
from datarax.exercises._feedback import Feedback, right, wrong
from datarax.exercises._values import number


def _params() -> dict[str, Any]:
    """A small model's parameters: float32 kernels and a bfloat16 bias."""
    return {
        "hidden": {"kernel": jnp.zeros((2, 64)), "bias": jnp.zeros(64, jnp.bfloat16)},
        "output": {"kernel": jnp.zeros((64, 3)), "bias": jnp.zeros(3)},
    }


def _shardings() -> list[tuple[str, Sharding]]:
    devices = jax.devices()
    cases: list[tuple[str, Sharding]] = [
        ("one device", SingleDeviceSharding(devices[0])),
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


@answer_key
def expected_bytes(params: Any, batch_sharding: Sharding) -> float:
    """What a ring all-reduce of the gradients sends per device: 2 (N - 1) / N x payload."""
    payload = sum(leaf.size * leaf.dtype.itemsize for leaf in jax.tree.leaves(params))
    probe = len(batch_sharding.device_set)
    group = probe // batch_sharding.shard_shape((probe,))[0]
    return 2 * (group - 1) / group * payload


@exercise(
    "06.allreduce_bytes",
    idea="the payload is the whole gradient, one value per parameter in its dtype; the "
    "group that averages is the devices that hold different rows of the batch.",
    method="payload = sum(leaf.size * leaf.dtype.itemsize for leaf in "
    "jax.tree.leaves(params)); N = B / (rows per device), e.g. with "
    "batch_sharding.shard_shape on a probe batch of len(device_set) rows; a ring "
    "all-reduce sends 2 (N - 1) / N x payload per device.",
)
def _allreduce_bytes(answer: Any) -> Feedback:
    params = _params()
    payload = sum(leaf.size * leaf.dtype.itemsize for leaf in jax.tree.leaves(params))
    cases = _shardings()
    for name, sharding in cases:
        expected = expected_bytes(params, sharding)
        got = number(call(answer, params, sharding), "allreduce_bytes's result")
        if not np.isclose(got, expected):
            probe = len(sharding.device_set)
            group = probe // sharding.shard_shape((probe,))[0]
            who = (
                "no two devices hold different rows, so there is nothing to average"
                if group == 1
                else f"{group} devices hold different rows and average their gradients"
            )
            return wrong(
                f"with {name} ({len(sharding.device_set)} device(s)), {who}; the payload is "
                f"{payload} bytes, so each device sends {expected:.1f} bytes per step. Your "
                f"function returned {got:g}."
            )
    return right(
        f"the bytes per device match a ring all-reduce on {len(cases)} shardings (one "
        "device, replicas and a bfloat16 leaf included)."
    )
