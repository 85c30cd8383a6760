"""What a placement picture shows, before any drawing: panels of blocks of devices.

Dimensions 0 and 1 of an array are drawn as rows and columns (a 1-D array as one row);
every distinct block of dimensions 2+ that the sharding splits gets its own panel.
Inside a panel, devices that hold the same block share one rectangle: its copies.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from jax.sharding import Sharding

from datarax._validate import check_number, check_str

Span = tuple[int, int]
Bounds = tuple[Span, ...]
COLOR_BY = ("device", "process")
MAX_INCHES = 40  # no figure here is wider or taller


def check_width(width: Any) -> float:
    """A figure's width: a number of inches in [2, 40], as every picture here takes."""
    return check_number("width", width, minimum=2, maximum=MAX_INCHES, meaning="inches")


def check_size(width: float, height: float, fewer: str) -> tuple[float, float]:
    """`(width, height)` of a figure about to be drawn, refused past 40 inches on a side.

    Checked before anything is drawn, so an oversized picture costs nothing; the error
    says what to draw `fewer` of.
    """
    if max(width, height) > MAX_INCHES:
        raise ValueError(
            f"This picture would be {width:.1f} x {height:.1f} inches; pictures are at most "
            f"{MAX_INCHES} inches on a side, so draw fewer {fewer}."
        )
    return width, height


def check_title(title: Any, name: str = "title") -> str | None:
    """A figure's title (or another label): a string, or None for none."""
    return check_str(name, title, optional=True)


@dataclasses.dataclass(frozen=True)
class Block:
    """One drawn rectangle: rows x columns of dims 0-1, and the devices holding it."""

    rows: Span
    cols: Span
    devices: tuple[Any, ...]  # sorted by id; more than one means copies

    @property
    def hosts(self) -> list[int]:
        return sorted({device.process_index for device in self.devices})


@dataclasses.dataclass(frozen=True)
class Panel:
    """The blocks that share one block of dims 2+ (``trailing``; empty below rank 3)."""

    trailing: Bounds
    blocks: tuple[Block, ...]


@dataclasses.dataclass(frozen=True)
class Layout:
    """Every panel of a placement picture, with the array's drawn extent."""

    shape: tuple[int, ...]
    rows: int  # drawn rows: shape[0], or 1 for a 1-D array
    cols: int  # drawn columns: shape[1], or shape[0] for a 1-D array
    panels: tuple[Panel, ...]
    devices: tuple[Any, ...]  # every device of the sharding, sorted by id
    hosts: tuple[int, ...]
    split_trailing: tuple[int, ...]  # dims 2+ that are split (one panel per block)


def sharding_of(array: Any) -> Sharding:
    sharding = getattr(array, "sharding", None)
    if not isinstance(sharding, Sharding) or not hasattr(array, "shape"):
        raise TypeError(
            f"Expected a jax.Array (or jax.ShapeDtypeStruct) with a sharding, got "
            f"{type(array).__name__}. Place it on devices first, e.g. with "
            "ArraySharder().shard(x, NamedSharding(mesh, P('data')))."
        )
    return sharding


def check_arguments(
    shape: tuple[int, ...], color_by: Any, width: Any, dim_names: Any, title: Any
) -> tuple[str, ...] | None:
    """Raises on an argument `plot_sharding` cannot draw; returns `dim_names` as a tuple."""
    if not shape:
        raise ValueError(
            "A 0-d array has no blocks to draw; it lives whole on every device of its "
            "sharding. Print array.sharding to see which devices those are."
        )
    if 0 in shape:
        raise ValueError(
            f"The array has shape {shape}: a dimension of size 0 holds no elements, so "
            "there are no blocks to draw. array.sharding.devices_indices_map(array.shape) "
            "still says which device would hold which indices."
        )
    check_str("color_by", color_by, choices=COLOR_BY)
    check_width(width)
    check_title(title)
    if dim_names is None:
        return None
    if isinstance(dim_names, str) or not isinstance(dim_names, Sequence):
        raise TypeError(
            f"dim_names must be a tuple of strings, one per dimension, got {dim_names!r}; "
            f"e.g. dim_names={tuple(f'dim {i}' for i in range(len(shape)))}."
        )
    if len(dim_names) != len(shape) or not all(isinstance(n, str) for n in dim_names):
        raise ValueError(
            f"dim_names must name each of the array's {len(shape)} dimensions (shape "
            f"{shape}) with a string, got {len(dim_names)}: {tuple(dim_names)!r}."
        )
    return tuple(dim_names)


def layout(shape: tuple[int, ...], sharding: Sharding) -> Layout:
    """Groups the devices of `sharding` into panels and blocks for an array of `shape`."""
    placed = {
        device: tuple(s.indices(n)[:2] for s, n in zip(index, shape, strict=True))
        for device, index in sharding.devices_indices_map(shape).items()
    }
    by_panel: dict[Bounds, dict[tuple[Span, Span], list[Any]]] = {}
    for device in sorted(placed, key=lambda d: d.id):
        spans = placed[device]
        rows, cols = ((0, 1), spans[0]) if len(shape) == 1 else (spans[0], spans[1])
        by_panel.setdefault(spans[2:], {}).setdefault((rows, cols), []).append(device)
    panels = tuple(
        Panel(trailing, tuple(Block(r, c, tuple(devs)) for (r, c), devs in sorted(blocks.items())))
        for trailing, blocks in sorted(by_panel.items())
    )
    split = tuple(
        dim
        for dim in range(2, len(shape))
        if len({panel.trailing[dim - 2] for panel in panels}) > 1
    )
    rows, cols = (1, shape[0]) if len(shape) == 1 else shape[:2]
    devices = tuple(sorted(placed, key=lambda d: d.id))
    hosts = tuple(sorted({device.process_index for device in devices}))
    return Layout(shape, rows, cols, panels, devices, hosts, split)


def platform_of(devices: Sequence[Any]) -> str:
    """``"CPU"``, ``"TPU"``, ... as `jax.debug.visualize_array_sharding` names devices."""
    return str(getattr(devices[0], "platform", "device")).upper()


def compact(numbers: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"``."""
    runs: list[list[int]] = []
    for number in sorted(set(numbers)):
        if runs and number == runs[-1][-1] + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def label_options(block: Block, platform: str, show_hosts: bool) -> list[list[str]]:
    """Label lines for `block`, fullest first; every option keeps each device's id.

    The first line names the devices as `jax.debug.visualize_array_sharding` does
    (``CPU 0,1``); shorter options write runs of ids as ranges (``CPU 0-7``).
    """
    ids = [device.id for device in block.devices]
    extra = []
    if show_hosts:
        extra.append(f"host{'s' * (len(block.hosts) > 1)} {compact(block.hosts)}")
    if len(block.devices) > 1:
        extra.append(f"{len(block.devices)} copies")
    full = f"{platform} {','.join(map(str, ids))}"
    short = f"{platform} {compact(ids)}"
    options = [[full, *extra], [short, *extra], [" ".join([short, *extra])]]
    options += [[short, *extra[:1]], [short]]
    return [option for i, option in enumerate(options) if option not in options[:i]]


def dim_label(dim: int, names: tuple[str, ...] | None, rank: int) -> str:
    """The caller's name with its dimension number, else ``"dim 0 (rows)"`` for a matrix.

    Dims 0 and 1 are drawn down and across. Only for a 2-D array are they its rows and
    columns; for rank 3 and up (an image batch: image, pixel row, pixel column, ...)
    calling dim 1 "columns" would name the wrong dimension, so the label says how it is
    drawn instead: ``"dim 1 (across)"``.
    """
    if names is not None:
        return f"{names[dim]} (dim {dim})"
    if rank == 2:
        return f"dim {dim} ({('rows', 'columns')[dim]})"
    if rank > 2 and dim < 2:
        return f"dim {dim} ({('down', 'across')[dim]})"
    return f"dim {dim}"


def panel_title(panel: Panel, split: tuple[int, ...], names: tuple[str, ...] | None) -> str:
    """``"dim 2 [0:4]"``: the block of each split dimension 2+ that a panel shows."""
    lines = []
    for dim in split:
        start, stop = panel.trailing[dim - 2]
        name = names[dim] if names is not None else f"dim {dim}"
        lines.append(f"{name} [{start}:{stop}]")
    return "\n".join(lines)


def trailing_note(found: Layout, names: tuple[str, ...] | None) -> str | None:
    """What the panels mean for an array of rank 3 or more; None below rank 3."""
    rank = len(found.shape)
    if rank < 3:
        return None

    def listed(dims: list[int] | tuple[int, ...]) -> str:
        named = [
            f"{names[d]} (dim {d}, {found.shape[d]})" if names else f"dim {d} ({found.shape[d]})"
            for d in dims
        ]
        return " and ".join([", ".join(named[:-1]), named[-1]] if len(named) > 1 else named)

    whole = [dim for dim in range(2, rank) if dim not in found.split_trailing]
    whole_text = f"{listed(whole)} {'is' if len(whole) == 1 else 'are'} not split"
    if not found.split_trailing:
        return f"{whole_text}: every block holds {'it' if len(whole) == 1 else 'them'} whole"
    note = f"one panel per block of {listed(found.split_trailing)}"
    return note + (f"; {whole_text}" if whole else "")
