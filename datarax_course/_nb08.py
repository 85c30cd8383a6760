"""Checkers for tutorial 08, meshes that span hosts.

``08.host_rows``: which global rows a host must read under a sharding.
``08.device_blocks``: the block of a host's rows each of its devices holds, as
``jax.make_array_from_single_device_arrays`` takes them.

Both are checked on meshes built from the devices at hand, split into pretend hosts
(`datarax.sharding.pretend_hosts`), including meshes whose device order is not
``jax.devices()`` order and a mesh with a ``slice`` axis outermost, as a multi-slice job
has; the right answers come from JAX's own placement.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from datarax.sharding import RowLedger, pretend_hosts
from datarax_course._cases import draw
from datarax_course._core import Ban, call, exercise
from datarax_course._feedback import Feedback, right, wrong
from datarax_course._hosts import Layout, one_host_layouts, paired_devices
from datarax_course._values import array, items, reject

NUM_ROWS = 16


def _spans(rows: Any) -> str:
    """``[0, 1, 2, 8, 9]`` -> ``"0-2, 8-9"``."""
    values = [int(r) for r in rows]
    if not values:
        return "no rows"
    breaks = [i for i in range(1, len(values)) if values[i] != values[i - 1] + 1]
    runs = zip([0, *breaks], [*breaks, len(values)], strict=True)
    return ", ".join(
        f"{values[a]}-{values[b - 1]}" if b - a > 1 else f"{values[a]}" for a, b in runs
    )


def layouts() -> list[Layout]:
    """Meshes over the devices at hand, each with the hosts its devices are split into.

    Host h drives a group of consecutive devices (`pretend_hosts`). With 4 or more
    devices: data over every host, a model axis across hosts, an interleaved device
    order, a replicated batch, a mesh whose device order is shuffled, and one whose
    order is drawn (`datarax_course._cases.draw`); with a multiple of 4, a
    ``("slice", "data", "model")`` mesh of 2 slices of 2 hosts, the batch split over
    slices and data, then with the slice axis left out of the spec (the slices then
    hold the same rows).
    """
    devices = paired_devices()
    if len(devices) < 4:
        return one_host_layouts()
    count = len(devices)
    host_of = pretend_hosts(2, devices)
    by_host = np.array(devices).reshape(2, count // 2)  # by_host[h]: host h's devices
    shuffled = np.random.default_rng(0).permutation(count)
    drawn = draw("08.layouts").permutation(count)
    found: list[Layout] = [
        (
            "data over every host",
            NamedSharding(Mesh(by_host.reshape(-1), ("data",)), P("data")),
            host_of,
        ),
        (
            "model axis across hosts",
            NamedSharding(Mesh(by_host.T, ("data", "model")), P("data")),
            host_of,
        ),
        (
            "interleaved device order",
            NamedSharding(Mesh(by_host.T.reshape(-1), ("data",)), P("data")),
            host_of,
        ),
        ("replicated", NamedSharding(Mesh(by_host, ("data", "model")), P()), host_of),
        (
            "shuffled device order, 4 hosts",
            NamedSharding(Mesh(np.array(devices)[shuffled], ("data",)), P("data")),
            pretend_hosts(4, devices) if count % 4 == 0 else host_of,
        ),
        (
            f"devices in the order {drawn.tolist()}, 2 hosts",
            NamedSharding(Mesh(np.array(devices)[drawn], ("data",)), P("data")),
            host_of,
        ),
    ]
    if count % 4 == 0:  # [slice][host of the slice][device of the host]: 'model' in a host
        slices = Mesh(np.array(devices).reshape(2, 2, -1), ("slice", "data", "model"))
        found += [
            (
                "2 slices of 2 hosts, the batch over slice and data",
                NamedSharding(slices, P(("slice", "data"))),
                pretend_hosts(4, devices),
            ),
            (
                "2 slices of 2 hosts, the slice axis left out of the spec",
                NamedSharding(slices, P("data")),
                pretend_hosts(4, devices),
            ),
        ]
    return found


def _as_rows(value: Any, what: str) -> np.ndarray:
    expected = "a 1-D array (or list) of row numbers"
    rows = array(value, what, expected, integer=True)
    if rows.ndim != 1:
        raise reject(what, rows, expected)
    return rows


_NO_LEDGER = (Ban(RowLedger, "__init__", "RowLedger"),)


@exercise(
    "08.host_rows",
    idea="the sharding itself says which rows every device holds; keep those of the "
    "host's devices.",
    method="sharding.devices_indices_map((num_rows,)) maps each device to a slice of rows; "
    "for the devices with host_of[device.id] == host, collect range(*slice.indices("
    "num_rows)) in a set and return it sorted.",
)
def _host_rows(answer: Any) -> Feedback:
    checked = 0
    for name, sharding, host_of in layouts():
        ledger = RowLedger(sharding, NUM_ROWS, host_of=host_of)
        for host in ledger.hosts:
            got = call(answer, sharding, NUM_ROWS, dict(host_of), host, bans=_NO_LEDGER)
            rows = _as_rows(got, f"host_rows(..., host={host})")
            expected = ledger.rows_of_host(host)
            if np.array_equal(np.sort(rows), expected) and not np.array_equal(rows, expected):
                return wrong(
                    f"with the mesh '{name}', host {host} reads the right rows but your "
                    "function returns them out of order or twice: return each row once, "
                    "sorted."
                )
            if not np.array_equal(rows, expected):
                also = ""
                if len(expected) > len(rows):
                    also = (
                        " Other hosts' devices hold some of these rows too, and every "
                        "host must pass every row its own devices hold."
                    )
                return wrong(
                    f"with the mesh '{name}' ({NUM_ROWS} rows), host {host} must read rows "
                    f"{_spans(expected)}; your function returned {_spans(rows)}.{also}"
                )
            checked += 1
    return right(
        f"every host's rows match JAX's placement on {len(layouts())} meshes "
        f"({checked} hosts), interleaved and shuffled device orders included."
    )


@exercise(
    "08.device_blocks",
    idea="a device's global rows are not positions in host_data once the host's rows "
    "start past 0: host_rows tells where each global row sits.",
    method="for each device, its global rows are np.arange(num_rows)[index[0]] with "
    "index = sharding.devices_indices_map((num_rows, ...))[device]; their positions in "
    "host_data are np.searchsorted(host_rows, rows); the block is host_data[positions].",
)
def _device_blocks(answer: Any) -> Feedback:
    data = np.arange(NUM_ROWS * 2, dtype=np.float32).reshape(NUM_ROWS, 2)
    for name, sharding, host_of in layouts():
        ledger = RowLedger(sharding, NUM_ROWS, host_of=host_of)
        placed: dict[Any, np.ndarray] = {}
        for host in ledger.hosts:
            host_rows = ledger.rows_of_host(host)
            devices = list(ledger.devices_of_host(host))
            host_data = data[host_rows]
            host_data.flags.writeable = False
            got = call(answer, host_data, host_rows.copy(), sharding, NUM_ROWS, devices)
            blocks = items(
                got,
                "device_blocks's result",
                f"a list with one array per device of host_devices ({len(devices)} here)",
                len(devices),
            )
            for device, block in zip(devices, blocks, strict=True):
                rows = ledger.rows_of_device(device)
                expected = data[rows.start : rows.stop]
                block = array(block, "each block", "an array of rows of host_data")
                if block.shape != expected.shape or not np.array_equal(block, expected):
                    return wrong(
                        f"with the mesh '{name}', device {device.id} of host {host} holds "
                        f"global rows {_spans(rows)}, which sit at positions "
                        f"{_spans(np.searchsorted(host_rows, list(rows)))} of host_data; "
                        f"your block has shape {block.shape} and starts with "
                        f"{block.ravel()[:4].tolist()}."
                    )
                placed[device] = block.astype(expected.dtype)
        shape = (NUM_ROWS, 2)
        arrays = [jax.device_put(placed[d], d) for d in sharding.addressable_devices]
        built = jax.make_array_from_single_device_arrays(shape, sharding, arrays)
        if not np.array_equal(np.asarray(built), data):
            return wrong(f"with the mesh '{name}', the blocks do not make the global array.")
    return right(
        "every device's block is right, and jax.make_array_from_single_device_arrays "
        f"built the global array from them on {len(layouts())} meshes."
    )
