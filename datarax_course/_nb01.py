"""Checkers for tutorial 01 (devices and meshes).

Both build their cases from the devices at hand, on meshes in `jax.devices()` order and
in other orders (one of them drawn, see `datarax_course._cases.draw`). The explicit
product is judged by what JAX does with the reader's code; a host's fraction of an array
comes from the answer key (`datarax_course._cases.reference`).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from datarax.sharding import pretend_hosts
from datarax_course._cases import draw, reference
from datarax_course._core import call, exercise
from datarax_course._feedback import AnswerRaised, Feedback, right, wrong
from datarax_course._values import describe, number


def spec_text(spec: PartitionSpec) -> str:
    """``P('data', None)``, whatever jax version prints the spec."""
    return "P(" + ", ".join(repr(entry) for entry in spec) + ")"


def mesh_2d(devices: list[Any], explicit: bool = False) -> Mesh:
    """A ("data", "model") mesh of `devices` in the order given, 2 along "model"."""
    model = 2 if len(devices) % 2 == 0 else 1
    kind = AxisType.Explicit if explicit else AxisType.Auto
    grid = np.array(devices, dtype=object).reshape(-1, model)
    return Mesh(grid, ("data", "model"), axis_types=(kind, kind))


_FRACTION_SPECS = (("data", "model"), ("data",), ("model",), (None, "model"))


def _fraction_cases() -> list[tuple[str, tuple[Any, dict[int, int], int]]]:
    """(text, (sharded array, host_of, host)) for the host_fraction exercise: fixed
    layouts, then one drawn (a mesh of the devices in a drawn order, a drawn spec)."""
    devices = jax.devices()
    count = len(devices)
    table = np.arange(2 * count * 4, dtype=np.float32).reshape(2 * count, 4)
    flat = Mesh(np.array(devices), ("data",))
    grid = mesh_2d(devices)
    backwards = mesh_2d(devices[::-1])
    split, copied = PartitionSpec("data"), PartitionSpec()
    layouts = [(flat, "", split), (flat, "", copied)]
    layouts += [(grid, "", PartitionSpec(*spec)) for spec in _FRACTION_SPECS]
    layouts.append((backwards, " listing the devices backwards", PartitionSpec("data", "model")))
    if count % 2 == 0 and count >= 4:  # "model" spans 2 hosts
        across = Mesh(np.array(devices).reshape(2, -1).T, ("data", "model"))
        for spec in (split, PartitionSpec("model")):
            layouts.append((across, " whose 'model' axis spans 2 hosts", spec))
    rng = draw("01.host_fraction")
    order = [int(i) for i in rng.permutation(count)]
    spec = PartitionSpec(*_FRACTION_SPECS[int(rng.integers(len(_FRACTION_SPECS)))])
    layouts.append((mesh_2d([devices[i] for i in order]), f" of devices {order}", spec))
    host_counts = [n for n in (2, 4) if count % n == 0 and n < count] or [1]
    cases = []
    for mesh, how, spec in layouts:
        array = jax.device_put(table, NamedSharding(mesh, spec))
        where = f"{spec_text(spec)} on a {mesh.devices.shape} mesh{how}"
        for hosts in host_counts:
            host_of = pretend_hosts(hosts)
            for host in sorted(set(host_of.values())):
                cases.append((f"{where}, {hosts} hosts, host {host}", (array, host_of, host)))
    return cases


@exercise(
    "01.host_fraction",
    idea="a host holds an element when any of its devices holds a copy of it: count "
    "elements, each once, not shards.",
    method="every shard knows its device (shard.device) and which part of the array it holds "
    "(shard.index, a tuple of slices that indexes a numpy array): mark the elements of "
    "the host's shards in a boolean array of the array's shape, then take its mean.",
    cases=_fraction_cases,
)
def _host_fraction(answer: Any) -> Feedback:
    cases = _fraction_cases()
    found = [
        number(call(answer, array, dict(host_of), host), "host_fraction's result")
        for _, (array, host_of, host) in cases
    ]
    expected = reference("01.host_fraction", cases)
    for (text, (array, host_of, host)), got, right_value in zip(
        cases, found, expected, strict=True
    ):
        if not np.isclose(got, right_value):
            where = text.rsplit(", host ", 1)[0]
            shards = sum(host_of[d.id] == host for d in array.sharding.device_set)
            return wrong(
                f"for {where}, host {host} holds {right_value:g} of the array, but your "
                f"function returned {got:g}. Its {shards} devices hold blocks that may "
                "repeat (copies) or cover everything (replication): count elements, not "
                "shards, and each element once."
            )
    return right(
        f"all {len(cases)} host-and-sharding cases agree with JAX, copies, replication and "
        "meshes in any device order included."
    )


@exercise(
    "01.explicit_matmul",
    idea="run jnp.dot(x, w) alone and read its error to the end.",
    method="the error names the parameter of jnp.dot that says how the result should be "
    "split; pass it the NamedSharding you want for the product.",
)
def _explicit_matmul(answer: Any) -> Feedback:
    devices = jax.devices()
    rows, inner = 4 * len(devices), 6
    x_host = np.arange(rows * inner, dtype=np.float32).reshape(rows, inner) / 10
    w_host = np.linspace(-1, 1, inner * 3, dtype=np.float32).reshape(inner, 3)
    drawn = [devices[int(i)] for i in draw("01.explicit_matmul").permutation(len(devices))]
    orders = (
        ("jax.devices() order", devices),
        ("reversed order", devices[::-1]),
        (f"the order {[d.id for d in drawn]}", drawn),
    )
    for order, listed in orders:
        mesh = mesh_2d(list(listed), explicit=True)
        x = jax.device_put(x_host, NamedSharding(mesh, PartitionSpec("data", "model")))
        w = jax.device_put(w_host, NamedSharding(mesh, PartitionSpec("model", None)))
        try:
            result = call(answer, x, w, mesh)
        except AnswerRaised as raised:  # JAX's ShardingTypeError has no public name
            if type(raised.error).__name__ != "ShardingTypeError":
                raise
            return wrong(
                "the Explicit mesh refused the product while tracing: "
                f"{str(raised.error).splitlines()[0]} Both inputs split the contracted "
                "dimension over 'model', so JAX will not guess how to split the result."
            )
        if not isinstance(result, jax.Array) or result.shape != (rows, 3):
            return wrong(f"return the product x @ w, a jax array; got {describe(result)}.")
        if not np.allclose(np.asarray(result), x_host @ w_host, rtol=1e-5, atol=1e-5):
            return wrong("the product's values are wrong; compute x @ w (jnp.dot).")
        wanted = NamedSharding(mesh, PartitionSpec("data", None))
        if not result.sharding.is_equivalent_to(wanted, 2):
            spec = getattr(result.sharding, "spec", result.sharding)
            return wrong(
                f"the values are right, but on a mesh in {order} the result is sharded "
                f"{spec}; keep its rows split over 'data' and its columns whole: "
                "PartitionSpec('data', None)."
            )
    return right(
        "x @ w runs on the Explicit mesh, with its rows split over 'data', on meshes in "
        "three device orders."
    )
