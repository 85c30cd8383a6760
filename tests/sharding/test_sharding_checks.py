"""The sharding is checked once, where it enters the public API, against the devices
of every backend JAX has started."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import datarax
from datarax.errors import MeshError
from datarax.sharding import (
    ArraySharder,
    JaxProcessSharder,
    RowLedger,
    _global_arrays,
    _sharding_checks,
    global_to_local_shape,
    local_index,
    local_to_global_shape,
)

DEVICES = jax.devices()
SHARDING = NamedSharding(Mesh(np.array(DEVICES), ("data",)), P("data"))


def test_devices_of_a_started_backend_other_than_the_default_are_accepted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As on a one-chip TPU runtime whose lessons make the CPU the default platform: a
    sharding over the other backend's devices is used, not refused."""
    real_devices = jax.devices

    def devices(backend: Any = None) -> list[Any]:
        return real_devices(backend) if backend is not None else []  # default lists none

    monkeypatch.setattr(jax, "devices", devices)
    data = {"x": np.arange(16.0).reshape(8, 2)}
    assert RowLedger(SHARDING, 8).row_count(0) == 8
    assert JaxProcessSharder().shard_data(data, SHARDING)["x"] is data["x"]
    datarax.clear_caches()  # the placement plan checks the sharding again
    placed = ArraySharder().shard(data, SHARDING)
    np.testing.assert_array_equal(np.asarray(placed["x"]), data["x"])


def test_devices_no_backend_lists_are_refused_where_data_is_placed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(jax, "devices", lambda backend=None: DEVICES[:4])
    datarax.clear_caches()
    for place in (
        lambda: ArraySharder().shard({"x": np.arange(8)}, SHARDING),
        lambda: JaxProcessSharder().shard_data(np.arange(8), SHARDING),
        lambda: RowLedger(SHARDING, 8),
    ):
        with pytest.raises(MeshError, match=r"uses 4 device\(s\) that jax.devices\('cpu'\)"):
            place()
    # Planning needs no live devices: a ledger with host_of=, and the shape arithmetic.
    assert RowLedger(SHARDING, 8, host_of=lambda device: 0).row_count(0) == 8
    assert local_index(SHARDING, (8,)) == (slice(0, 8),)
    assert global_to_local_shape(SHARDING, (8,)) == local_to_global_shape(SHARDING, (8,))


def test_a_mesh_that_lists_a_device_twice_is_refused_at_every_door() -> None:
    twice = NamedSharding(Mesh(np.array([DEVICES[0], DEVICES[0]]), ("data",)), P("data"))
    for door in (
        lambda: ArraySharder().shard({"x": np.arange(8)}, twice),
        lambda: JaxProcessSharder().shard_data(np.arange(8), twice),
        lambda: RowLedger(twice, 8),
        lambda: local_index(twice, (8,)),
        lambda: global_to_local_shape(twice, (8,)),
        lambda: local_to_global_shape(twice, (8,)),
    ):
        with pytest.raises(MeshError, match="The mesh lists device 0 more than once"):
            door()


def test_the_sharding_is_checked_once_where_it_enters(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once per call of shard_data however many leaves, once per batch signature for
    the placing calls, which plan once per signature."""
    checks: list[object] = []
    check = _sharding_checks.check_sharding_type

    def counting(sharding: object) -> Any:
        checks.append(sharding)
        return check(sharding)

    monkeypatch.setattr(_sharding_checks, "check_sharding_type", counting)
    datarax.clear_caches()
    data = {name: np.arange(8.0 * (i + 1)).reshape(8, -1) for i, name in enumerate("abcd")}
    JaxProcessSharder().shard_data(data, SHARDING)
    assert len(checks) == 1
    for place in (ArraySharder().shard, _global_arrays.make_global):
        checks.clear()
        for _ in range(3):
            place(data, SHARDING)
        assert len(checks) == 1, place
    checks.clear()
    RowLedger(SHARDING, 8)
    assert len(checks) == 1
