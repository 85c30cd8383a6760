"""datarax.viz: the drawn blocks match each device's shard; the summary's numbers are right."""

import colorsys
import dataclasses
import re
import textwrap

import jax
import numpy as np
import pytest
from _support.processes import run_own_devices
from jax.sharding import Mesh, NamedSharding, Sharding
from jax.sharding import PartitionSpec as P
from matplotlib.colors import to_hex, to_rgb

from datarax import viz
from datarax._compat import single_device_sharding
from datarax_course import figures

PERMUTED = [3, 1, 0, 2, 7, 5, 4, 6]


def _ids(label: str) -> set[int]:
    """Device ids named in a label such as ``CPU 0,1`` or ``CPU 0-2,5`` -> {0, 1, 2, 5}."""
    match = re.search(r"\b[A-Z]+ ([\d,\-]+)", label)
    assert match, label
    ids: set[int] = set()
    for part in match.group(1).split(","):
        first, _, last = part.partition("-")
        ids.update(range(int(first), int(last or first) + 1))
    return ids


def _spans(index: tuple[slice, ...], shape: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    return tuple(s.indices(n)[:2] for s, n in zip(index, shape, strict=True))


def _check_plot_matches_shards(array: jax.Array, **options) -> viz.ShardingPlot:
    """Every device's rectangle, panel, label and hatching match its shard; ticks are edges."""
    plot = viz.plot_sharding(array, **options)
    shards = array.addressable_shards
    holders: dict[tuple, int] = {}
    for shard in shards:
        key = _spans(shard.index, array.shape)
        holders[key] = holders.get(key, 0) + 1
    for shard in shards:
        device, spans = shard.device.id, _spans(shard.index, array.shape)
        assert plot.block(device) == spans
        leading = ((0, 1), spans[0]) if array.ndim == 1 else spans[:2]
        assert plot.region(device) == leading
        ax = plot.patches[device].axes
        assert plot.patches[device] in ax.patches and plot.labels[device] in ax.texts
        label = plot.labels[device].get_text()
        assert device in _ids(label)
        assert (plot.patches[device].get_hatch() is not None) == (holders[spans] > 1)
        if holders[spans] > 1 and "copies" in label:
            assert f"{holders[spans]} copies" in label
        for dim, (start, stop) in enumerate(spans[2:], start=2):
            if len({key[dim] for key in holders}) > 1:  # a split dimension titles its panel
                assert f"[{start}:{stop}]" in ax.get_title(), (dim, ax.get_title())
    assert len(plot.panels) == len({key[2:] for key in holders})
    rows, cols = (1, array.shape[0]) if array.ndim == 1 else array.shape[:2]
    for ax in plot.panels:
        drawn = {id(p): p for p in plot.patches.values() if p.axes is ax}.values()
        assert sum(p.get_width() * p.get_height() for p in drawn) == rows * cols
        col_edges = {edge for p in drawn for edge in (p.get_x(), p.get_x() + p.get_width())}
        row_edges = {edge for p in drawn for edge in (p.get_y(), p.get_y() + p.get_height())}
        for ticks, edges in ((ax.get_xticks(), col_edges), (ax.get_yticks(), row_edges)):
            assert all(float(t).is_integer() and t in edges for t in ticks), (ticks, edges)
        assert len(ax.get_xticks()) >= 2
    _check_scale(plot, rows, cols)
    return plot


def _check_scale(plot: viz.ShardingPlot, rows: int, cols: int) -> None:
    """Drawn to scale (rows : columns on screen as in the array), or the title says not."""
    title = plot.figure.get_suptitle()
    assert ("not to scale" in title) == (not plot.to_scale)
    if plot.to_scale and plot.ndim > 1:
        renderer = plot.figure.canvas.get_renderer()  # type: ignore[attr-defined]
        for ax in plot.panels:
            box = ax.get_window_extent(renderer)
            assert box.height / box.width == pytest.approx(rows / cols, rel=0.02)


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
    [
        ((64,), P("data")),
        ((16, 6, 3), P("data")),
        ((16, 4, 4, 3), P("data")),
        ((8, 8), P()),
        ((8, 3, 16), P(None, None, "data")),
        ((8, 2, 8, 2), P(None, None, "data")),
    ],
)
def test_plot_on_1d_mesh_matches_shards(mesh_1d: Mesh, shape, spec) -> None:
    array = jax.device_put(np.zeros(shape, np.float32), NamedSharding(mesh_1d, spec))
    _check_labels_fit(_check_plot_matches_shards(array), min_font=7)


@pytest.mark.parametrize("order", ["jax.devices()", "permuted"])
@pytest.mark.parametrize(
    ("shape", "spec"),
    [
        ((8, 6), P("data", "model")),
        ((8, 6), P("data")),
        ((8, 6), P(None, "model")),
        ((8, 4, 6), P("data", None, "model")),
        ((8, 6, 2, 2), P(("data", "model"))),
        ((4, 2, 8, 4), P(None, None, "data", "model")),
        ((16, 8, 8, 3), P("data", None, "model")),
        ((12,), P("model")),
    ],
)
def test_plot_on_2d_mesh_matches_shards(mesh_2d: Mesh, order, shape, spec) -> None:
    if order == "permuted":  # nothing may assume a mesh lists devices in jax.devices() order
        devices = np.array(jax.devices())[PERMUTED].reshape(4, 2)
        mesh_2d = Mesh(devices, mesh_2d.axis_names, axis_types=mesh_2d.axis_types)
    array = jax.device_put(np.zeros(shape, np.float32), NamedSharding(mesh_2d, spec))
    _check_labels_fit(_check_plot_matches_shards(array), min_font=7)


def test_labels_name_devices_as_jax_does(mesh_2d: Mesh) -> None:
    replicated = jax.device_put(np.zeros((8, 6)), NamedSharding(mesh_2d, P("data")))
    plot = viz.plot_sharding(replicated)
    assert plot.labels[0].get_text().splitlines() == ["CPU 0,1", "2 copies"]
    assert all("host" not in label.get_text() for label in plot.labels.values())
    whole = viz.plot_sharding(jax.device_put(np.zeros((8, 6)), NamedSharding(mesh_2d, P())))
    assert whole.labels[0].get_text().splitlines() == ["CPU 0,1,2,3,4,5,6,7", "8 copies"]
    assert "8 CPU devices" in whole.figure.get_suptitle()


def test_higher_ranks_get_a_panel_per_split_block(mesh_2d: Mesh) -> None:
    images = jax.device_put(
        np.zeros((16, 8, 8, 3)), NamedSharding(mesh_2d, P("data", None, "model"))
    )
    names = ("image", "pixel row", "pixel column", "channel")
    plot = _check_plot_matches_shards(images, dim_names=names)
    titles = sorted(ax.get_title() for ax in plot.panels)
    assert titles == ["pixel column [0:4]", "pixel column [4:8]"]
    assert "channel (dim 3, 3) is not split" in plot.figure.get_suptitle()
    assert all("copies" not in label.get_text() for label in plot.labels.values())
    first = next(ax for ax in plot.panels if ax.get_title().endswith("[0:4]"))
    assert (first.get_ylabel(), first.get_xlabel()) == ("image (dim 0)", "pixel row (dim 1)")
    rows_only = viz.plot_sharding(jax.device_put(np.zeros((16, 8, 3)), NamedSharding(mesh_2d, P())))
    assert len(rows_only.panels) == 1
    assert "dim 2 (3) is not split" in rows_only.figure.get_suptitle()


@pytest.mark.parametrize(
    ("shape", "to_scale"),
    [
        ((16, 4), True),
        ((8, 8), True),
        ((32, 64), True),
        ((8, 64), False),  # 8 blocks of one row each would be too thin to label at scale
        ((4096, 3), False),
        ((3, 4096), False),
    ],
)
def test_scale_is_true_or_the_title_says_not(shape, to_scale) -> None:
    mesh = jax.make_mesh((len(jax.devices()),), ("data",))
    spec = P("data") if shape[0] % 8 == 0 else P(None, "data")
    array = jax.device_put(np.zeros(shape, np.float32), NamedSharding(mesh, spec))
    plot = _check_plot_matches_shards(array)
    assert plot.to_scale == to_scale
    if not to_scale:
        assert f"(the array is {shape[0]} x {shape[1]})" in plot.figure.get_suptitle()


def test_ticks_are_integer_block_edges() -> None:
    mesh = jax.make_mesh((2,), ("data",), devices=jax.devices()[:2])
    array = jax.device_put(np.zeros((6, 5)), NamedSharding(mesh, P("data")))
    ax = next(iter(viz.plot_sharding(array).panels))
    assert list(ax.get_yticks()) == [0, 3, 6] and list(ax.get_xticks()) == [0, 5]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["0", "3", "6"]
    assert (ax.get_ylabel(), ax.get_xlabel()) == ("dim 0 (rows)", "dim 1 (columns)")


def test_default_labels_of_rank_3_do_not_call_dim_1_columns() -> None:
    """In an image batch (image, pixel row, pixel column) dim 1 is not the columns."""
    mesh = jax.make_mesh((2,), ("data",), devices=jax.devices()[:2])
    images = jax.device_put(np.zeros((4, 6, 5, 3)), NamedSharding(mesh, P("data")))
    ax = next(iter(viz.plot_sharding(images).panels))
    assert (ax.get_ylabel(), ax.get_xlabel()) == ("dim 0 (down)", "dim 1 (across)")


def _hue(color: str) -> float:
    return colorsys.rgb_to_hls(*to_rgb(color))[0] * 360


def test_palette_colours_are_distinct_and_hosts_differ_from_devices() -> None:
    devices, hosts = viz.device_colors(len(viz.DEVICE_PALETTE)), viz.host_colors(4)
    assert len(set(devices)) == len(devices) == 9 and len(set(hosts)) == len(hosts) == 4
    assert not set(devices) & set(hosts)
    assert viz.device_colors(11)[9:] == devices[:2]  # repeats after 9
    # Pale devices under black text, dark hosts under white text, hues at least 15 degrees apart.
    assert {viz.text_color(c) for c in devices} == {"black"}
    assert {viz.text_color(c) for c in hosts} == {"white"}
    chromatic = [c for c in devices if colorsys.rgb_to_hls(*to_rgb(c))[2] > 0.1]
    for device in chromatic:
        for host in hosts:
            gap = abs(_hue(device) - _hue(host)) % 360
            assert min(gap, 360 - gap) >= 15, (device, host)
    with pytest.raises(ValueError, match=r"count must be an int in \[0, 65536\]"):
        viz.device_colors(-1)


def test_plot_uses_the_palette_and_hatches_copies_in_every_mode(mesh_2d: Mesh) -> None:
    devices = np.array(jax.devices())[PERMUTED].reshape(4, 2)
    mesh = Mesh(devices, ("data", "model"))
    split = viz.plot_sharding(
        jax.device_put(np.zeros((8, 8)), NamedSharding(mesh, P("data", "model")))
    )
    palette = viz.device_colors(8)
    for device, patch in split.patches.items():  # colours follow device ids, not mesh order
        assert to_hex(patch.get_facecolor()) == palette[device].lower()
    copies = jax.device_put(np.zeros((8, 6)), NamedSharding(mesh_2d, P("data")))
    by_host = viz.plot_sharding(copies, color_by="process")
    assert {to_hex(p.get_facecolor()) for p in by_host.patches.values()} == {
        viz.HOST_PALETTE[0].lower()
    }
    for plot in (viz.plot_sharding(copies), by_host):
        assert all(p.get_hatch() == viz.COPIES_HATCH for p in plot.patches.values())
        legend = plot.figure.legends[0]
        assert "hatched: copies of one block" in [t.get_text() for t in legend.get_texts()]


@dataclasses.dataclass(frozen=True)
class _FakeDevice:
    id: int
    process_index: int
    platform: str = "cpu"


class _TwoHostSharding(Sharding):
    """Rows split over 8 devices on 2 hosts (4 each), as a 2-process job would see them."""

    def __init__(self, copies: int = 1) -> None:
        self.copies = copies

    def devices_indices_map(self, global_shape):
        rows = global_shape[0] // (8 // self.copies)
        return {
            _FakeDevice(d, d // 4): (
                slice(d // self.copies * rows, (d // self.copies + 1) * rows),
                slice(None),
            )
            for d in range(8)
        }


@dataclasses.dataclass(frozen=True)
class _FakeArray:
    shape: tuple[int, ...]
    dtype: np.dtype
    sharding: Sharding


def test_plot_names_and_outlines_hosts_only_when_there_are_several() -> None:
    array = _FakeArray((16, 4), np.dtype(np.float32), _TwoHostSharding())
    by_device = viz.plot_sharding(array)
    assert by_device.labels[5].get_text().splitlines() == ["CPU 5", "host 1"]
    assert "host 0" in by_device.labels[3].get_text()
    assert "2 hosts" in by_device.figure.get_suptitle()
    ax = next(iter(by_device.panels))
    frames = [p for p in ax.patches if not p.get_fill()]
    assert len(frames) == 8  # a frame in its host's colour inside every block
    assert {to_hex(f.get_edgecolor()) for f in frames} == {c.lower() for c in viz.host_colors(2)}
    legend = [t.get_text() for t in by_device.figure.legends[0].get_texts()]
    assert legend == ["host 0", "host 1"]
    by_host = viz.plot_sharding(array, color_by="process")
    colours = {d: to_hex(p.get_facecolor()) for d, p in by_host.patches.items()}
    assert {colours[d] for d in range(4)} == {viz.host_colors(1)[0].lower()}
    assert {colours[d] for d in range(4, 8)} == {viz.host_colors(2)[1].lower()}
    assert len({to_hex(p.get_facecolor()) for p in by_device.patches.values()}) == 8
    copies = viz.plot_sharding(_FakeArray((16, 4), np.dtype(np.float32), _TwoHostSharding(2)))
    assert copies.labels[2].get_text().splitlines() == ["CPU 2,3", "host 0", "2 copies"]
    assert all(p.get_hatch() == viz.COPIES_HATCH for p in copies.patches.values())


_SIXTY_FOUR = textwrap.dedent(
    """
    import jax
    jax.config.update("jax_num_cpu_devices", 64)
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    from tests.course.test_viz import _check_labels_fit, _check_plot_matches_shards
    cases = [
        ((128,), (64,), ("data",), P("data")),
        ((64, 64), (8, 8), ("data", "model"), P("data", "model")),
        ((256, 32), (64,), ("data",), P("data")),
        ((64, 32, 3), (16, 4), ("data", "model"), P("data")),
        ((8, 128), (64,), ("data",), P(None, "data")),
        ((8, 8, 32), (8, 8), ("data", "model"), P("data", None, "model")),
    ]
    for shape, mesh_shape, names, spec in cases:
        mesh = jax.make_mesh(mesh_shape, names)
        array = jax.device_put(np.zeros(shape, np.float32), NamedSharding(mesh, spec))
        _check_labels_fit(_check_plot_matches_shards(array), min_font=6)
    print("checked", len(cases))
    """
)


def test_64_devices_stay_legible() -> None:
    done = run_own_devices(_SIXTY_FOUR, timeout=300)
    assert "checked 6" in done.stdout


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
    mask = rows["batch['mask']"]
    assert mask.spec == "host" and mask.bytes_per_device is None and mask.device_bytes is None
    for name in ("image", "label", "scale", "pair"):
        on_device = {s.device.id: s.data.nbytes for s in placed[name].addressable_shards}
        assert rows[f"batch[{name!r}]"].device_bytes == on_device
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
    assert text.splitlines()[-1] == f"each of the 8 devices holds {total:,} bytes"
    table = viz.summary_table(placed)
    assert table.row_count == 5 and table.caption == text.splitlines()[-1]
    assert next(iter(table.columns[5].cells)) == "4,816,896"  # leaves in key order: image first


def test_summary_reports_devices_that_hold_different_amounts() -> None:
    mesh = jax.make_mesh((8,), ("data",))
    tree = {
        "alone": jax.device_put(
            np.zeros((16,), np.float32), single_device_sharding(jax.devices()[0])
        ),
        "split": jax.device_put(np.zeros((64,), np.float32), NamedSharding(mesh, P("data"))),
    }
    leaves = {leaf.name: leaf for leaf in viz.leaf_summaries(tree)}
    assert leaves["batch['alone']"].device_bytes == {0: 64}
    assert leaves["batch['split']"].device_bytes == dict.fromkeys(range(8), 32)
    held: dict[int, int] = {}
    for leaf in tree.values():
        for shard in leaf.addressable_shards:
            held[shard.device.id] = held.get(shard.device.id, 0) + shard.data.nbytes
    assert held == {0: 96, **dict.fromkeys(range(1, 8), 32)}
    assert viz.summarize(tree).splitlines()[-1] == (
        "device 0 holds 96 bytes; devices 1-7 hold 32 bytes each"
    )
    half = jax.make_mesh((4,), ("data",), devices=jax.devices()[4:])
    subset = {"x": jax.device_put(np.zeros((8, 2), np.float32), NamedSharding(half, P("data")))}
    assert viz.summarize(subset).splitlines()[-1] == "each of the 4 devices holds 16 bytes"
    assert viz.leaf_summaries(subset)[0].device_bytes == dict.fromkeys(range(4, 8), 16)
    spread = {
        f"on_{d}": jax.device_put(
            np.zeros((d + 1,), np.int8), single_device_sharding(jax.devices()[d])
        )
        for d in range(5)
    }
    assert (
        viz.summarize(spread).splitlines()[-1] == "devices hold 1 to 5 bytes (the most on device 4)"
    )


@pytest.mark.parametrize("shape", [(8, 0), (0, 8), (0,)])
def test_empty_arrays_are_refused_clearly(shape) -> None:
    mesh = jax.make_mesh((8,), ("data",))
    spec = P(None, "data") if shape == (0, 8) else P("data") if shape == (8, 0) else P()
    array = jax.device_put(np.zeros(shape), NamedSharding(mesh, spec))
    with pytest.raises(ValueError, match=r"dimension of size 0 .* no blocks to draw"):
        viz.plot_sharding(array)


def test_bad_input_is_named() -> None:
    with pytest.raises(TypeError, match=r"Expected a jax\.Array"):
        viz.plot_sharding(np.zeros(4))
    mesh = jax.make_mesh((8,), ("data",))
    with pytest.raises(ValueError, match="0-d"):
        viz.plot_sharding(jax.device_put(np.float32(1), NamedSharding(mesh, P())))
    array = jax.device_put(np.zeros((8, 2)), NamedSharding(mesh, P("data")))
    with pytest.raises(ValueError, match="color_by must be 'device' or 'process', got 'host'"):
        viz.plot_sharding(array, color_by="host")
    for width, error in ((0, ValueError), (100, ValueError), ("8", TypeError), (True, TypeError)):
        with pytest.raises(error, match=r"width must be a number of inches in \[2, 40\]"):
            viz.plot_sharding(array, width=width)
    with pytest.raises(ValueError, match=r"name each of the array's 2 dimensions .* got 1"):
        viz.plot_sharding(array, dim_names=("image",))
    with pytest.raises(TypeError, match="dim_names must be a tuple of strings"):
        viz.plot_sharding(array, dim_names="image")
    with pytest.raises(TypeError, match="title must be a string"):
        viz.plot_sharding(array, title=3)


def test_hosts_stay_apart_beyond_the_palette() -> None:
    """Colour and mark together tell 32 hosts apart; hosts 0-3 carry no mark."""
    looks = [(viz.host_colors(host + 1)[host], viz.host_hatch(host)) for host in range(32)]
    assert len(set(looks)) == 32
    assert [viz.host_hatch(host) for host in range(4)] == [""] * 4
    assert all("/" not in viz.host_hatch(host) for host in range(64))  # "//" marks copies
    with pytest.raises(ValueError, match="host must be an int >= 0, got -1"):
        viz.host_hatch(-1)


def test_row_pictures_mark_hosts_4_and_up() -> None:
    owners = np.repeat(np.arange(8), 2)
    plot = figures.plot_rows({"hosts": owners}, color_by="host")
    hatches = [patch.get_hatch() for patch in plot.patches["hosts"]]
    assert hatches == [None] * 4 + [viz.host_hatch(host) for host in range(4, 8)]
    fills = [to_hex(patch.get_facecolor()) for patch in plot.patches["hosts"]]
    assert fills[4:] == fills[:4]  # the same colours, told apart by the mark


def test_placement_coloured_by_host_marks_hosts_4_and_up() -> None:
    """8 hosts on stand-in devices: hosts 4-7 repeat the colours of 0-3 with a mark."""
    from datarax_course.figures._playground_model import _StandIn

    real = jax.devices()[0]
    devices = [
        _StandIn(i, str(real.platform), str(real.device_kind), process_index=i // 2)
        for i in range(16)
    ]
    mesh = Mesh(np.array(devices, dtype=object), ("data",))
    rows = jax.ShapeDtypeStruct((16, 4), np.float32, sharding=NamedSharding(mesh, P("data")))
    plot = viz.plot_sharding(rows, color_by="process")
    hatches = [plot.patches[i].get_hatch() for i in range(16)]
    assert hatches == [None] * 8 + [viz.host_hatch(4)] * 8
    legend = plot.figure.legends[0]
    assert [patch.get_hatch() for patch in legend.get_patches()][4:] == ["..", "..", "..", ".."]
