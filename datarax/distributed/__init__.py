"""Many processes on one machine: a local JAX cluster, and devices for notebooks.

`launch_local` runs a function or a script on N JAX processes on 127.0.0.1, joined into
one cluster, and returns what each returned (`ClusterError` names the process that
failed). `setup_devices` gives a notebook real accelerators when there are enough,
else simulated CPU devices with the runtime's accelerators kept beside them
(`accelerator_devices`).

The device set-up imports JAX; it loads on first use, so a cluster's worker process
(``python -m datarax.distributed._worker``) does not import JAX before its settings.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from datarax.distributed._launcher import ProcessResult as ProcessResult
from datarax.distributed._launcher import launch_local as launch_local
from datarax.distributed._ports import free_port as free_port
from datarax.errors import ClusterError as ClusterError

_DEVICE_NAMES = ("DevicePlan", "accelerator_devices", "choose_devices", "setup_devices")

__all__ = [
    "ClusterError",
    "DevicePlan",
    "ProcessResult",
    "accelerator_devices",
    "choose_devices",
    "free_port",
    "launch_local",
    "setup_devices",
]


def __getattr__(name: str) -> Any:
    if name in _DEVICE_NAMES:
        return getattr(importlib.import_module("datarax.distributed._devices"), name)
    raise AttributeError(f"module 'datarax.distributed' has no attribute {name!r}")


if TYPE_CHECKING:
    from datarax.distributed._devices import DevicePlan as DevicePlan
    from datarax.distributed._devices import accelerator_devices as accelerator_devices
    from datarax.distributed._devices import choose_devices as choose_devices
    from datarax.distributed._devices import setup_devices as setup_devices
