"""Every use of a private API (JAX's, and one of Hugging Face ``datasets``), and every
version shim, in one place.

Each entry is guarded: when the private name is gone, a public fallback takes over,
and each says which release would let it go.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
from jax.sharding import AxisType, Mesh, NamedSharding


def coordinator_client() -> Any:
    """The coordinator's key-value client, through which hosts exchange with a time limit.

    JAX has no public handle on it (as of 0.12); `datarax._exchange` is its
    only user. Raises rather than fall back to an exchange that could wait forever.

    Raises:
        RuntimeError: this JAX keeps the client elsewhere, or no cluster was joined.
    """
    try:
        from jax._src import distributed
    except ImportError:
        distributed = None
    client = getattr(getattr(distributed, "global_state", None), "client", None)
    if client is None:
        raise RuntimeError(
            f"This job runs {jax.process_count()} processes, but JAX {jax.__version__} shows "
            "no coordinator client at jax._src.distributed.global_state.client, which "
            "datarax uses to exchange between hosts with a time limit. Join the cluster with "
            "jax.distributed.initialize(...) before any JAX operation; if you did, this JAX "
            "moved the client: use a jax release from 0.7.2 to 0.12, which datarax is "
            "tested on."
        )
    return client


def backends_started() -> bool | None:
    """Whether JAX has started its backends (None when this JAX cannot say).

    No public query exists (as of 0.10); callers treat None as "assume started". About a
    microsecond: a pipeline worker asks it for every batch.
    """
    started = _backends_are_initialized()
    return bool(started()) if callable(started) else None


@functools.cache
def _backends_are_initialized() -> Any:
    try:
        from jax._src import xla_bridge
    except ImportError:
        return None
    return getattr(xla_bridge, "backends_are_initialized", None)


def single_device_sharding(device: Any, *, memory_kind: str | None = None) -> Any:
    """The sharding that places a whole array on `device`.

    jax 0.12 deprecates the ``SingleDeviceSharding`` class (even naming it warns) for
    ``jax.sharding.make_single_device_sharding``, which jax 0.10.2 has and jax 0.7.2 does
    not. Retire when the oldest jax supported has the function.

    >>> import jax
    >>> single_device_sharding(jax.devices()[0]).device_set == {jax.devices()[0]}
    True
    """
    make = getattr(jax.sharding, "make_single_device_sharding", None)
    if make is None:  # an older jax, where naming the class does not warn
        make = jax.sharding.SingleDeviceSharding
    return make(device, memory_kind=memory_kind)


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


def tpus_on_the_bus() -> int | None:
    """The TPU devices this host's PCI bus shows, read without starting JAX, as JAX counts
    TPU chips for its own cluster detection (``jax._src.hardware_utils``, jax 0.4 to 0.12),
    two per chip on TPU v2 and v3 (two cores each); None where this JAX keeps no such
    count. An upper bound: a container may grant fewer chips than its bus shows.
    """
    try:
        from jax._src import hardware_utils
    except ImportError:
        return None
    count_chips: Any = getattr(hardware_utils, "num_available_tpu_chips_and_device_id", None)
    if not callable(count_chips):
        return None
    try:
        answer: Any = count_chips()
        chips, version = answer
    except (OSError, TypeError, ValueError):  # no sysfs, or another answer than it had
        return None
    return int(chips) * (2 if getattr(version, "name", "") in ("v2", "v3") else 1)


def dataset_rows(dataset: Any) -> tuple[Any, Any]:
    """A Hugging Face ``datasets.Dataset`` and the rows of its Arrow table it reads, in
    order (``select`` and ``shuffle`` leave such a mapping), as a numpy array; None for
    the rows when it reads its table as it is.

    ``datasets`` keeps the mapping in the private ``_indices`` (datasets 2 to 5) and has
    no public view of it. Where that attribute is gone, the dataset comes back from
    ``flatten_indices()`` (public), its rows written out in order: a copy of its table.
    """
    if not hasattr(dataset, "_indices"):
        return dataset.flatten_indices(), None
    mapping = dataset._indices
    return dataset, None if mapping is None else mapping.column(0).to_numpy()
