"""datarax.viz: the drawn blocks match each device's shard; the summary's numbers are right."""

import dataclasses
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, Sharding
from jax.sharding import PartitionSpec as P

from datarax import viz


def _ids(label: str) -> set[int]:
    """Device ids named in a label such as ``dev 0-2,5`` -> {0, 1, 2, 5}."""
    match = re.search(r"dev ([\d,\-]+)", label)
    assert match, label
    ids: set[int] = set()
    for part in match.group(1).split(","):
        first, _, last = part.partition("-")
        ids.update(range(int(first), int(last or first) + 1))
    return ids


def _leading(index: tuple[slice, ...], shape: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    spans = tuple(s.indices(n)[:2] for s, n in zip(index, shape, strict=True))
    return ((0, 1), spans[0]) if len(shape) == 1 else spans[:2]


def _check_plot_matches_shards(array: jax.Array) -> viz.ShardingPlot:
    plot = viz.plot_sharding(array)
    ax = plot.figure.axes[0]
    shards = array.addressable_shards
    copies = {}
    for shard in shards:
        key = tuple(s.indices(n)[:2] for s, n in zip(shard.index, array.shape, strict=True))
        copies[key] = copies.get(key, 0) + 1
    for shard in shards:
        device = shard.device.id
        assert plot.region(device) == _leading(shard.index, array.shape)
        assert plot.patches[device] in ax.patches
        assert plot.labels[device] in ax.texts
        assert device in _ids(plot.labels[device].get_text())
        key = tuple(s.indices(n)[:2] for s, n in zip(shard.index, array.shape, strict=True))
        assert (plot.patches[device].get_hatch() is not None) == (copies[key] > 1)
        if copies[key] > 1 and "copies" in plot.labels[device].get_text():
            assert f"{copies[key]} copies" in plot.labels[device].get_text()
    rows, cols = (1, array.shape[0]) if array.ndim == 1 else array.shape[:2]
    drawn = {id(p): p for p in plot.patches.values()}.values()
    assert sum(p.get_width() * p.get_height() for p in drawn) == rows * cols
    assert len(ax.patches) == len(drawn)
    return plot


def _check_labels_fit(plot: viz.ShardingPlot, min_font: float) -> None:
    renderer = plot.figure.canvas.get_renderer()  # type: ignore[attr-defined]
    for device, label in plot.labels.items():
        box = plot.patches[device].get_window_extent(renderer)
        text = label.get_window_extent(renderer)
        assert label.get_fontsize() >= min_font, (device, label.get_fontsize())
        assert box.x0 - 1 <= text.x0 and text.x1 <= box.x1 + 1, (device, label.get_text())
        assert box.y0 - 1 <= text.y0 and text.y1 <= box.y1 + 1, (device, label.get_text())


@pytest.mark.parametrize(
    ("shape", "spec"),
    [((64,), P("data")), ((16, 6, 3), P("data")), ((16, 4, 4, 3), P("data")), ((8, 8), P())],
)
def test_plot_on_1d_mesh_matches_shards(mesh_1d: Mesh, shape, spec) -> None:
    array = jax.device_put(np.zeros(shape, np.float32), NamedSharding(mesh_1d, spec))
    _check_labels_fit(_check_plot_matches_shards(array), min_font=7)


@pytest.mark.parametrize(
    ("shape", "spec"),
    [
        ((8, 6), P("data", "model")),
        ((8, 6), P("data")),
        ((8, 6), P(None, "model")),
        ((8, 4, 6), P("data", None, "model")),
        ((8, 6, 2, 2), P(("data", "model"))),
        ((12,), P("model")),
    ],
)
def test_plot_on_2d_mesh_matches_shards(mesh_2d: Mesh, shape, spec) -> None:
    array = jax.device_put(np.zeros(shape, np.float32), NamedSharding(mesh_2d, spec))
    _check_labels_fit(_check_plot_matches_shards(array), min_font=7)


def test_replicas_and_split_trailing_dims_are_annotated(mesh_2d: Mesh) -> None:
    replicated = jax.device_put(np.zeros((8, 6)), NamedSharding(mesh_2d, P("data")))
    label = viz.plot_sharding(replicated).labels[0].get_text()
    assert _ids(label) == {0, 1} and "2 copies" in label
    split = jax.device_put(np.zeros((8, 4, 6)), NamedSharding(mesh_2d, P("data", None, "model")))
    label = viz.plot_sharding(split).labels[0].get_text()
    assert _ids(label) == {0, 1} and "dims 2+ in 2 parts" in label and "copies" not in label


@dataclasses.dataclass(frozen=True)
class _FakeDevice:
    id: int
    process_index: int


class _TwoHostSharding(Sharding):
    """Rows split over 8 devices on 2 hosts (4 each), as a 2-process job would see them."""

    def devices_indices_map(self, global_shape):
        rows = global_shape[0] // 8
        return {
            _FakeDevice(d, d // 4): (slice(d * rows, (d + 1) * rows), slice(None)) for d in range(8)
        }


@dataclasses.dataclass(frozen=True)
class _FakeArray:
    shape: tuple[int, ...]
    dtype: np.dtype
    sharding: Sharding


def test_plot_names_hosts_and_colours_by_host() -> None:
    array = _FakeArray((16, 4), np.dtype(np.float32), _TwoHostSharding())
    by_device = viz.plot_sharding(array)
    assert "host 1" in by_device.labels[5].get_text()
    assert "host 0" in by_device.labels[3].get_text()
    assert "2 hosts" in by_device.figure.axes[0].get_title()
    by_host = viz.plot_sharding(array, color_by="process")
    colours = {d: tuple(p.get_facecolor()) for d, p in by_host.patches.items()}
    assert len({colours[d] for d in range(4)}) == 1 and len({colours[d] for d in range(4, 8)}) == 1
    assert colours[0] != colours[4]
    assert len({tuple(p.get_facecolor()) for p in by_device.patches.values()}) == 8


_SIXTY_FOUR = textwrap.dedent(
    """
    import jax
    jax.config.update("jax_num_cpu_devices", 64)
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    from tests.test_viz import _check_labels_fit, _check_plot_matches_shards
    cases = [
        ((128,), (64,), ("data",), P("data")),
        ((64, 64), (8, 8), ("data", "model"), P("data", "model")),
        ((256, 32), (64,), ("data",), P("data")),
        ((64, 32, 3), (16, 4), ("data", "model"), P("data")),
        ((8, 128), (64,), ("data",), P(None, "data")),
    ]
    for shape, mesh_shape, names, spec in cases:
        mesh = jax.make_mesh(mesh_shape, names)
        array = jax.device_put(np.zeros(shape, np.float32), NamedSharding(mesh, spec))
        _check_labels_fit(_check_plot_matches_shards(array), min_font=6)
    print("checked", len(cases))
    """
)


def test_64_devices_stay_legible() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SIXTY_FOUR],
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if k != "XLA_FLAGS"} | {"JAX_PLATFORMS": "cpu"},
        cwd=Path(__file__).parents[1],
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "checked 5" in done.stdout


def test_summary_numbers(mesh_2d: Mesh) -> None:
    batch = {
        "image": np.zeros((256, 224, 224, 3), np.uint8),
        "label": np.arange(256, dtype=np.int32),
    }
    mesh_1d = jax.make_mesh((8,), ("data",))
    placed = jax.device_put(batch, NamedSharding(mesh_1d, P("data")))
    placed["scale"] = jax.device_put(np.ones((4,), np.float32), NamedSharding(mesh_1d, P()))
    placed["pair"] = jax.device_put(np.zeros((8, 6), np.float16), NamedSharding(mesh_2d, P("data")))
    placed["mask"] = np.ones(256, bool)
    rows = {s.name: s for s in viz.leaf_summaries(placed)}
    image = rows["batch['image']"]
    assert image.shape == (256, 224, 224, 3) and image.shard_shape == (32, 224, 224, 3)
    assert image.bytes_per_device == 4_816_896 == 38_535_168 // 8
    assert (image.replicas, image.num_devices, image.spec) == (1, 8, "P('data')")
    assert rows["batch['label']"].bytes_per_device == 32 * 4
    assert (rows["batch['scale']"].replicas, rows["batch['scale']"].shard_shape) == (8, (4,))
    pair = rows["batch['pair']"]
    assert (pair.replicas, pair.shard_shape, pair.bytes_per_device) == (2, (2, 6), 24)
    assert rows["batch['mask']"].spec == "host" and rows["batch['mask']"].bytes_per_device is None
    for name in ("image", "label", "scale", "pair"):
        leaf = placed[name]
        on_device = {s.device.id: s.data.nbytes for s in leaf.addressable_shards}
        assert set(on_device.values()) == {rows[f"batch[{name!r}]"].bytes_per_device}
    text = viz.summarize(placed)
    image_line = next(line for line in text.splitlines() if "'image'" in line)
    assert re.split(r"\s{2,}", image_line) == [
        "batch['image']",
        "(256, 224, 224, 3)",
        "uint8",
        "P('data')",
        "(32, 224, 224, 3)",
        "4,816,896",
        "1",
        "8",
    ]
    total = 4_816_896 + 128 + 16 + 24
    assert text.splitlines()[-1] == f"each device holds {total:,} bytes"
    table = viz.summary_table(placed)
    assert table.row_count == 5
    assert next(iter(table.columns[5].cells)) == "4,816,896"  # leaves in key order: image first


def test_bad_input_is_named() -> None:
    with pytest.raises(TypeError, match=r"Expected a jax\.Array"):
        viz.plot_sharding(np.zeros(4))
    mesh = jax.make_mesh((8,), ("data",))
    with pytest.raises(ValueError, match="0-d"):
        viz.plot_sharding(jax.device_put(np.float32(1), NamedSharding(mesh, P())))
    array = jax.device_put(np.zeros(8), NamedSharding(mesh, P("data")))
    with pytest.raises(ValueError, match="color_by must be"):
        viz.plot_sharding(array, color_by="host")
