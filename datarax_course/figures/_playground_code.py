"""The `jax.sharding` code that builds a playground layout, ready to copy into a notebook."""

from __future__ import annotations

import math
from typing import Any


def _entry(entry: Any) -> str:
    return repr(entry) if not isinstance(entry, tuple) else "(" + ", ".join(map(repr, entry)) + ")"


def layout_code(settings: Any, order: list[int], devices_present: int) -> str:
    """Python that builds the mesh, the sharding, the placed leaf and its row ledger.

    `order` lists, for each position of the flattened mesh, the position in
    ``jax.devices()`` of the device placed there.
    """
    count = math.prod(settings.mesh_shape)
    if order == list(range(count)):
        devices = f"devices = jax.devices()[:{count}]"
    else:
        devices = f"devices = [jax.devices()[i] for i in {tuple(order)}]  # interleaved hosts"
    types = [f"AxisType.{settings.axis_types}"] * len(settings.mesh_shape)
    axis_types = f"({types[0]},)" if len(types) == 1 else f"({', '.join(types)})"
    spec = ", ".join(_entry(entry) for entry in settings.partition_spec())
    dtype = f"jnp.{settings.dtype}"
    lines = []
    if count > devices_present:
        lines += [
            f"# This mesh needs {count} devices and this runtime has {devices_present}. On CPU,",
            f'# run jax.config.update("jax_num_cpu_devices", {count}) before any JAX operation.',
        ]
    lines += [
        "import jax",
        "import jax.numpy as jnp",
        "import numpy as np",
        "from jax.sharding import AxisType, Mesh, NamedSharding",
        "from jax.sharding import PartitionSpec as P",
        "",
        "from datarax.sharding import ArraySharder, RowLedger, pretend_hosts",
        "",
        devices,
        "mesh = Mesh(",
        f"    np.array(devices).reshape{settings.mesh_shape},",
        f"    {settings.axis_names},",
        f"    axis_types={axis_types},",
        ")",
        f"sharding = NamedSharding(mesh, P({spec}))",
        f"batch = ArraySharder().shard(np.zeros({settings.shape}, {dtype}), sharding)",
        f"# {settings.hosts} pretend host{'s' * (settings.hosts > 1)}, each driving "
        f"{count // settings.hosts} neighbouring devices:",
        f"host_of = pretend_hosts({settings.hosts}, jax.devices()[:{count}])",
        f"ledger = RowLedger(sharding, {settings.batch_size}, host_of=host_of)",
        "print(ledger.table())",
    ]
    return "\n".join(lines)
