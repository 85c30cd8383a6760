"""Pretend hosts for the checkers of the multi-host exercises (notebooks 04 and 08)."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from datarax.sharding import pretend_hosts

Layout = tuple[str, NamedSharding, dict[int, int]]  # (description, sharding, host_of)


def paired_devices() -> list[Any]:
    """This runtime's devices, an even number of them, for two pretend hosts of one size."""
    devices = jax.devices()
    return devices[: len(devices) - len(devices) % 2]


def one_host_layouts() -> list[Layout]:
    """What fewer than 4 devices allow: the batch over all of them, on one host."""
    mesh = Mesh(np.array(jax.devices()), ("data",))
    return [("data over one host", NamedSharding(mesh, P("data")), pretend_hosts(1))]
