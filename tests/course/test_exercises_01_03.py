"""The checkers of tutorials 01-03: a right answer passes, a wrong one fails with a
message that names what is wrong, and the placeholder is "not answered yet".

Every checker also runs with `jax.make_mesh` listing devices in a TPU v3-8's order
([0, 1, 2, 3, 6, 7, 4, 5]), so none of them relies on `jax.devices()` order.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from datarax.sharding import pad_to_multiple
from datarax_course import check

TPU_V3_8_ORDER = [0, 1, 2, 3, 6, 7, 4, 5]


@pytest.fixture(params=["make_mesh order", "TPU v3-8 order"], autouse=True)
def mesh_order(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.param == "make_mesh order":
        return
    make_mesh = jax.make_mesh

    def permuted(axis_shapes, axis_names, *args, **kwargs):
        mesh = make_mesh(axis_shapes, axis_names, *args, **kwargs)
        flat = np.asarray(mesh.devices).reshape(-1, 8)[:, TPU_V3_8_ORDER]
        return Mesh(flat.reshape(mesh.devices.shape), mesh.axis_names, axis_types=mesh.axis_types)

    monkeypatch.setattr(jax, "make_mesh", permuted)


def _rejected(name: str, answer, *words: str) -> None:
    feedback = check(name, answer, quiet=True)
    assert not feedback, feedback.message
    for word in words:
        assert word in feedback.message, feedback.message


@pytest.mark.parametrize(
    "name",
    [
        "01.host_fraction",
        "01.explicit_matmul",
        "02.memory",
        "02.devices_holding",
        "03.mean_log",
        "03.pad_for",
    ],
)
def test_the_placeholder_is_not_answered_yet(name: str) -> None:
    def placeholder(*args):
        return ...

    feedback = check(name, placeholder, quiet=True)
    assert not feedback and feedback.message.startswith("not answered yet. Hint:")


# 01.host_fraction ------------------------------------------------------------------


def host_fraction(array, host_of, host):
    held = np.zeros(array.shape, bool)
    for shard in array.addressable_shards:
        if host_of[shard.device.id] == host:
            held[shard.index] = True
    return held.mean()


def test_host_fraction_accepts_elements_read_off_the_shards() -> None:
    assert check("01.host_fraction", host_fraction, quiet=True)


def test_host_fraction_rejects_local_over_global_devices() -> None:
    def device_share(array, host_of, host):
        return sum(h == host for h in host_of.values()) / len(host_of)

    _rejected("01.host_fraction", device_share, "P() on a", "holds 1 of the array", "returned 0.5")


def test_host_fraction_rejects_counting_copies_twice() -> None:
    def shard_sizes(array, host_of, host):
        mine = [s for s in array.addressable_shards if host_of[s.device.id] == host]
        return sum(s.data.size for s in mine) / array.size

    _rejected("01.host_fraction", shard_sizes, "each element once")


# 01.explicit_matmul ---------------------------------------------------------------


def test_explicit_matmul_accepts_out_sharding() -> None:
    def rows_matmul(x, w, mesh):
        return jnp.dot(x, w, out_sharding=NamedSharding(mesh, P("data", None)))

    assert check("01.explicit_matmul", rows_matmul, quiet=True)


def test_explicit_matmul_reports_the_sharding_type_error() -> None:
    _rejected(
        "01.explicit_matmul", lambda x, w, mesh: jnp.dot(x, w), "refused", "Contracting dimensions"
    )


def test_explicit_matmul_rejects_a_replicated_result() -> None:
    def replicated(x, w, mesh):
        return jnp.dot(x, w, out_sharding=NamedSharding(mesh, P()))

    _rejected("01.explicit_matmul", replicated, "values are right", "PartitionSpec('data', None)")


# 02.memory --------------------------------------------------------------------------


def memory(shape, dtype, mesh, spec):
    per_device, named = np.dtype(dtype).itemsize, set()
    for size, entry in zip(shape, tuple(spec) + (None,) * (len(shape) - len(spec)), strict=True):
        axes = () if entry is None else entry if isinstance(entry, tuple) else (entry,)
        per_device *= size // math.prod(mesh.shape[axis] for axis in axes)
        named |= set(axes)
    copies = math.prod(size for axis, size in mesh.shape.items() if axis not in named)
    return per_device, copies, per_device * mesh.size


def test_memory_accepts_shard_bytes_and_copies() -> None:
    assert check("02.memory", memory, quiet=True)


def test_memory_rejects_dividing_by_every_device() -> None:
    def split_everything(shape, dtype, mesh, spec):
        total = math.prod(shape) * np.dtype(dtype).itemsize
        return total // mesh.size, 1, total

    _rejected("02.memory", split_everything, "P()", "bytes per device")


def test_memory_rejects_a_total_without_copies() -> None:
    def no_copies(shape, dtype, mesh, spec):
        per_device, copies, _ = memory(shape, dtype, mesh, spec)
        return per_device, copies, math.prod(shape) * np.dtype(dtype).itemsize

    _rejected("02.memory", no_copies, "total bytes")


# 02.devices_holding ---------------------------------------------------------------------


def devices_holding(mesh, spec, shape, index):
    coordinates = {}
    for size, position, entry in zip(
        shape, index, tuple(spec) + (None,) * (len(shape) - len(spec)), strict=True
    ):
        axes = () if entry is None else entry if isinstance(entry, tuple) else (entry,)
        block = position // (size // math.prod(mesh.shape[axis] for axis in axes))
        for axis in reversed(axes):  # the last axis named varies fastest
            coordinates[axis] = block % mesh.shape[axis]
            block //= mesh.shape[axis]
    where = tuple(coordinates.get(axis, slice(None)) for axis in mesh.axis_names)
    return {device.id for device in np.asarray(mesh.devices[where]).ravel()}


def test_devices_holding_accepts_mesh_coordinates() -> None:
    assert check("02.devices_holding", devices_holding, quiet=True)


def test_devices_holding_rejects_ids_taken_for_mesh_positions() -> None:
    def id_is_position(mesh, spec, shape, index):
        found = devices_holding(mesh, spec, shape, index)
        flat = [device.id for device in np.asarray(mesh.devices).ravel()]
        return {flat.index(device_id) for device_id in found}  # a position, not an id

    _rejected("02.devices_holding", id_is_position, "mesh.devices ids", "is held by devices")


def test_devices_holding_rejects_a_tuple_read_minor_first() -> None:
    def minor_first(mesh, spec, shape, index):
        flipped = P(*(tuple(reversed(e)) if isinstance(e, tuple) else e for e in spec))
        return devices_holding(mesh, flipped, shape, index)

    _rejected("02.devices_holding", minor_first, "('data', 'model')")


# 03.mean_log ------------------------------------------------------------------------------


def test_mean_log_accepts_the_double_where() -> None:
    def mean_log(values, mask):
        safe = jnp.where(mask, values, 1.0)
        return jnp.sum(jnp.where(mask, jnp.log(safe), 0.0)) / jnp.sum(mask)

    assert check("03.mean_log", mean_log, quiet=True)


def test_mean_log_rejects_a_single_where_for_its_nan_gradient() -> None:
    def single_where(values, mask):
        return jnp.sum(jnp.where(mask, jnp.log(values), 0.0)) / jnp.sum(mask)

    _rejected("03.mean_log", single_where, "gradient", "NaN", "padding rows")


def test_mean_log_rejects_dividing_by_the_padded_length() -> None:
    def padded_mean(values, mask):
        safe = jnp.where(mask, values, 1.0)
        return jnp.mean(jnp.where(mask, jnp.log(safe), 0.0))

    _rejected("03.mean_log", padded_mean, "padded length", "sum(mask)")


# 03.pad_for ---------------------------------------------------------------------------


def test_pad_for_accepts_the_axes_that_split_the_rows() -> None:
    def pad_for(batch, mesh, spec):
        first = spec[0] if len(spec) else None
        axes = () if first is None else first if isinstance(first, tuple) else (first,)
        return pad_to_multiple(batch, math.prod(mesh.shape[axis] for axis in axes))

    assert check("03.pad_for", pad_for, quiet=True)


def test_pad_for_rejects_padding_to_the_device_count() -> None:
    _rejected(
        "03.pad_for",
        lambda batch, mesh, spec: pad_to_multiple(batch, mesh.size),
        "split into 4 blocks",
        "28 rows suffice",
    )


def test_pad_for_rejects_a_mask_that_is_not_a_mask() -> None:
    def no_mask(batch, mesh, spec):
        padded, mask = pad_to_multiple(batch, mesh.size)
        return padded, np.ones_like(mask)

    _rejected("03.pad_for", no_mask, "True for the 25 real rows only")
