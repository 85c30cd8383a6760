"""The sharding that places a whole array on one device, on every jax the tests run on."""

from __future__ import annotations

from typing import Any

import jax


def single_device_sharding(device: Any, *, memory_kind: str | None = None) -> Any:
    """The sharding that places a whole array on `device`.

    jax 0.12 deprecates the ``SingleDeviceSharding`` class (even naming it warns) for
    ``jax.sharding.make_single_device_sharding``, which jax 0.10.2 has and jax 0.7.2 does
    not. Retire when the oldest jax supported has the function.

    >>> single_device_sharding(jax.devices()[0]).device_set == {jax.devices()[0]}
    True
    """
    make = getattr(jax.sharding, "make_single_device_sharding", None)
    if make is None:  # an older jax, where naming the class does not warn
        make = jax.sharding.SingleDeviceSharding
    return make(device, memory_kind=memory_kind)
