"""Every use of a private JAX API, and every version shim, in one place.

Each entry is guarded: when the private name is gone, a public fallback takes over,
and each says which JAX release would let it go.
"""

from __future__ import annotations

from typing import Any

import jax
from jax.sharding import AxisType, Mesh, NamedSharding


def coordinator_client() -> Any | None:
    """The coordinator's key-value client, or None when there is none to reach.

    Used for exchanges that must fail after a time-out instead of hanging. JAX has no
    public handle on it (as of 0.10); without it, callers fall back to an all-gather.
    """
    try:
        from jax._src import distributed
    except ImportError:
        return None
    state = getattr(distributed, "global_state", None)
    return getattr(state, "client", None)


def backends_started() -> bool | None:
    """Whether JAX has started its backends (None when this JAX cannot say).

    No public query exists (as of 0.10); callers treat None as "assume started".
    """
    try:
        from jax._src import xla_bridge
    except ImportError:
        return None
    started = getattr(xla_bridge, "backends_are_initialized", None)
    return bool(started()) if callable(started) else None


def on_auto_mesh(leaf: Any) -> Any:
    """The same array relabelled onto an Auto-typed copy of its mesh (no data moves).

    jax 0.7 cannot move an array off an Explicit mesh onto a mesh with other axis
    names; from an Auto mesh it can. Retire with jax 0.7 support.
    """
    sharding = getattr(leaf, "sharding", None)
    if not isinstance(sharding, NamedSharding) or not isinstance(sharding.mesh, Mesh):
        return leaf
    mesh = sharding.mesh
    auto = Mesh(mesh.devices, mesh.axis_names, axis_types=(AxisType.Auto,) * len(mesh.axis_names))
    return jax.device_put(leaf, NamedSharding(auto, sharding.spec))
