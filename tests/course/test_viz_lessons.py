"""The lesson figures draw what the arrays and meshes say, in any device order."""

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from datarax.sharding import pad_to_multiple, pretend_hosts
from datarax_course import figures

TPU_V3_8_ORDER = [0, 1, 2, 3, 6, 7, 4, 5]


def _v3_mesh() -> Mesh:
    devices = np.array(jax.devices())[TPU_V3_8_ORDER]
    return Mesh(devices.reshape(4, 2), ("data", "model"))


def test_plot_devices_draws_each_mesh_in_its_own_order() -> None:
    flat = jax.make_mesh((8,), ("data",))
    plot = figures.plot_devices(jax.devices(), flat, _v3_mesh(), titles=["list", "1D", "v3"])
    assert [grid.shape for grid in plot.grids] == [(1, 8), (1, 8), (4, 2)]
    assert plot.grids[2].ravel().tolist() == TPU_V3_8_ORDER
    assert plot.addressable == frozenset(range(8))


def test_plot_devices_marks_what_one_pretend_host_addresses() -> None:
    plot = figures.plot_devices(jax.devices(), host_of=pretend_hosts(4), this_host=1)
    assert plot.addressable == frozenset({2, 3})
    assert plot.hosts[7] == 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"color_by": "shard"}, "color_by"),
        ({"titles": ["a", "b"]}, "2 titles"),
        ({"host_of": {0: 0}}, "no host for device"),
    ],
)
def test_plot_devices_rejects_bad_arguments(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        figures.plot_devices(jax.devices(), **kwargs)


def test_plot_devices_rejects_a_3d_mesh() -> None:
    with pytest.raises(ValueError, match="3 axes"):
        figures.plot_devices(jax.make_mesh((2, 2, 2), ("a", "b", "c")))


def test_plot_host_rows_reads_the_ledger_and_hatches_rows_on_several_hosts() -> None:
    across = Mesh(np.array(jax.devices()).reshape(2, 4).T, ("data", "model"))
    shardings = {
        "split": NamedSharding(_v3_mesh(), P("data")),
        "across": NamedSharding(across, P("data")),
    }
    plot = figures.plot_host_rows(shardings, 16, host_of=pretend_hosts(2))
    # TPU order: host 0 (devices 0-3) sits at mesh rows 0 and 1, so holds rows 0-7.
    assert plot.spans[("split", 0)] == ((0, 8),) and plot.shared["split"] == ()
    assert plot.spans[("across", 1)] == ((0, 16),)
    assert len(plot.shared["across"]) == 4


def test_plot_mask_counts_real_and_padding_rows_per_block() -> None:
    _, mask = pad_to_multiple(np.arange(29), 8)
    placed = jax.device_put(mask, NamedSharding(_v3_mesh(), P("data")))
    plot = figures.plot_mask({"v3": placed})
    # 32 rows over 4 data positions; the last holds rows 24-31 (5 real) on devices 4, 5.
    assert plot.counts["v3"][(4, 5)] == (5, 3)
    assert sum(real for real, _ in plot.counts["v3"].values()) == 29


def test_plot_mask_rejects_a_host_array() -> None:
    with pytest.raises(TypeError, match="1-D sharded"):
        figures.plot_mask(np.ones(8, bool))


def test_plot_estimates_reports_differences_from_the_exact_value() -> None:
    plot = figures.plot_estimates({"exact": 0.5, "low": 0.4, "same": 0.5}, exact="exact")
    assert plot.differences == pytest.approx({"exact": 0.0, "low": -0.1, "same": 0.0})
    with pytest.raises(ValueError, match="exact='x'"):
        figures.plot_estimates({"a": 1.0}, exact="x")
