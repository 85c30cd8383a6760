"""`plot_ledger`: a picture of which global rows each device and each host holds."""

from __future__ import annotations

import dataclasses
import io
import itertools
import textwrap
from collections.abc import Mapping
from typing import Any

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from datarax._validate import check_int
from datarax.sharding._ledger import rows_text
from datarax.sharding._placement import describe_sharding

from . import _blocks, _sizes
from ._ledger_frame import (
    BAND_IN,
    MAX_FONT,
    MIN_FONT,
    Frame,
    Lane,
    Span,
    draw_band,
    draw_bar,
    fit_font,
    host_color,
)
from ._palette import COPIES_HATCH, HOST_PALETTE, SEVERAL_HOSTS


@dataclasses.dataclass(frozen=True)
class LedgerPlot:
    """A row-ledger figure and what it shows.

    `per` says what one row of bars stands for: ``"device"`` (one per device, grouped
    by host) or ``"host"`` (one per host, for large pods). `bars` maps each device id
    (or host) drawn to its bars, left to right; a bar's x extent is its global rows.
    `hosts` lists the hosts drawn, `hosts_total` how many the ledger has. `holders` is
    the strip along the top: each run of rows with the hosts that hold it. `note`
    says what was left out, if anything.
    """

    figure: Figure
    per: str
    bars: Mapping[int, tuple[Rectangle, ...]]
    hosts: tuple[int, ...]
    hosts_total: int
    holders: tuple[tuple[Span, tuple[int, ...]], ...]
    note: str | None

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.figure.savefig(buffer, format="png")
        return buffer.getvalue()

    def spans(self, key: int) -> list[Span]:
        """``(start, stop)`` rows of each bar drawn for device id (or host) `key`."""
        return [
            (round(bar.get_x()), round(bar.get_x() + bar.get_width())) for bar in self.bars[key]
        ]

    def hatched(self, key: int) -> list[Span]:
        """The spans of `key`'s bars that are hatched: rows that several hosts hold."""
        pairs = zip(self.spans(key), self.bars[key], strict=True)
        return [span for span, bar in pairs if COPIES_HATCH in (bar.get_hatch() or "")]


def plot_ledger(
    ledger: Any, *, title: str | None = None, width: float = 8.0, max_bars: int = 32
) -> LedgerPlot:
    """Draws which global rows every device, and every host, holds under a sharding.

    The global rows run along x. Each device is one row of bars, its block of rows a
    bar in its host's colour (`host_colors`); devices are grouped by host, the host
    named in a band on the left. Rows that more than one host holds (replicas that
    span hosts) are hatched, and a strip along the top says which hosts hold each run
    of rows.

    With more than `max_bars` devices, each host is one row of bars instead (one bar
    per distinct block its devices hold); with more than `max_bars` hosts, only the
    first `max_bars` are drawn, on the rows they hold, and the title says so.

    Args:
        ledger: a `datarax.sharding.RowLedger`.
        title: the figure title; by default the rows, spec, devices and hosts.
        width: the figure's width in inches (2 to 40).
        max_bars: the most rows of bars to draw (1 to 256).

    Returns:
        A `LedgerPlot`: the figure, each device's (or host's) bars and the top strip.

    Raises:
        TypeError: `ledger` is not a RowLedger, or `title` is not a string.
        ValueError: the ledger has no rows, or `width` / `max_bars` is out of range.

    Example:
        >>> from datarax.sharding import RowLedger, pretend_hosts
        >>> mesh = jax.make_mesh((len(jax.devices()),), ("data",))
        >>> ledger = RowLedger(NamedSharding(mesh, P("data")), 16, host_of=pretend_hosts(2))
        >>> plot = plot_ledger(ledger)
        >>> plot.per, plot.spans(5), plot.holders
        ('device', [(10, 12)], (((0, 8), (0,)), ((8, 16), (1,))))
    """
    _check(ledger, title, width, max_bars)
    hosts_all = tuple(ledger.hosts)
    per = "device" if len(ledger.devices) <= max_bars else "host"
    hosts = hosts_all[:max_bars]
    lanes = _lanes(ledger, hosts, per)
    low, high, note = 0, ledger.num_rows, None
    if len(hosts) < len(hosts_all):
        low = min(span[0] for _, _, spans in lanes for span in spans)
        high = max(span[1] for _, _, spans in lanes for span in spans)
        note = (
            f"showing the first {len(hosts)} of {len(hosts_all)} hosts, on rows "
            f"{low}-{high - 1} of {ledger.num_rows}"
        )
    holders = _holders(ledger, low, high)
    chars = int((width - 0.2) / 0.085)  # what fits on one line at 10 pt
    heading = textwrap.wrap(title or _heading(ledger, per), chars) + ([note] if note else [])
    shares = any(len(held) > 1 for _, held in holders)
    legend = shares or max(hosts) >= len(HOST_PALETTE)  # copies, or hosts with a mark
    frame = Frame.of(lanes, float(width), len(heading), legend, per == "device")
    figure, ax = frame.build(heading, shares, hosts)
    ax.set(xlim=(low, high), ylim=(len(lanes), -frame.strip_lanes - frame.gap_lanes))
    ticks = [-frame.gap_lanes - frame.strip_lanes / 2] + [n + 0.5 for n in range(len(lanes))]
    ax.set_yticks(ticks, ["held by"] + [name for name, _, _ in lanes])
    ax.tick_params(axis="y", length=0, labelsize=frame.tick_pt)
    ax.set_xlabel("global row")
    # Ticks on block edges: every device's, or per host only where its rows start and end.
    ends = [spans if per == "device" else [(spans[0][0], spans[-1][1])] for _, _, spans in lanes]
    edges = {e for spans in ends for span in spans for e in span if low <= e <= high}
    ax.set_xticks(_sizes.ticks(edges | {low, high}, frame.main_w, 0.09 * len(str(high)) + 0.25))
    scale = frame.main_w * 72 / (high - low), frame.lane_in * 72
    shared = ledger.shared_blocks()
    # One font size for every bar's label that fits at a readable size.
    fits = [
        fit_font(ax, span, rows_text([span]), 0.76, scale) for *_, spans in lanes for span in spans
    ]
    font = min([size for size in fits if size >= MIN_FONT], default=MAX_FONT)
    bars: dict[int, tuple[Rectangle, ...]] = {}
    for number, (_, key, spans) in enumerate(lanes):
        host = key if per == "host" else ledger.host_of_device(key)
        fill, lane = host_color(host), (number + 0.12, 0.76)
        bars[key] = tuple(
            draw_bar(ax, lane, span, (fill, rows_text([span])), span in shared, scale, font, host)
            for span in spans
        )
    strip = (-frame.gap_lanes - frame.strip_lanes * 0.9, frame.strip_lanes * 0.8)
    for span, held in holders:
        fill = host_color(held[0]) if len(held) == 1 else SEVERAL_HOSTS
        only = held[0] if len(held) == 1 else None
        draw_bar(ax, strip, span, (fill, _hosts_text(held)), len(held) > 1, scale, MAX_FONT, only)
    if per == "device":
        draw_band(ax, lanes, ledger, -(frame.left - 0.1) / frame.main_w, BAND_IN / frame.main_w)
    return LedgerPlot(figure, per, bars, hosts, len(hosts_all), holders, note)


def _check(ledger: Any, title: Any, width: Any, max_bars: Any) -> None:
    from datarax.sharding import RowLedger

    if not isinstance(ledger, RowLedger):
        raise TypeError(
            f"plot_ledger draws a datarax.sharding.RowLedger, got {type(ledger).__name__}. "
            "Build one with RowLedger(sharding, num_rows, host_of=pretend_hosts(2))."
        )
    if ledger.num_rows == 0:
        raise ValueError(
            "The ledger has 0 rows, so there are no rows to draw; build it with the "
            "global batch size, e.g. RowLedger(sharding, 256)."
        )
    _blocks.check_width(width)
    check_int("max_bars", max_bars, maximum=256)
    _blocks.check_title(title)


def _device_span(ledger: Any, device: Any) -> Span:
    rows = ledger.rows_of_device(device)
    return rows.start, rows.stop


def _lanes(ledger: Any, hosts: tuple[int, ...], per: str) -> list[Lane]:
    """Per row of bars: its tick label, its key (device id or host) and its bars."""
    platform = _blocks.platform_of(ledger.devices)
    if per == "device":
        return [
            (f"{platform} {device.id}", device.id, [_device_span(ledger, device)])
            for host in hosts
            for device in ledger.devices_of_host(host)
        ]
    lanes = []
    for host in hosts:
        devices = ledger.devices_of_host(host)
        name = f"host {host} ({platform} {_blocks.compact([d.id for d in devices])})"
        lanes.append((name, host, sorted({_device_span(ledger, d) for d in devices})))
    return lanes


def _holders(ledger: Any, low: int, high: int) -> tuple[tuple[Span, tuple[int, ...]], ...]:
    """Runs of rows in [low, high) with the hosts holding them; equal neighbours merged."""
    blocks: dict[Span, set[int]] = {}
    for device in ledger.devices:
        blocks.setdefault(_device_span(ledger, device), set()).add(ledger.host_of_device(device))
    edges = sorted({low, high} | {e for span in blocks for e in span if low < e < high})
    runs: list[tuple[Span, tuple[int, ...]]] = []
    for start, stop in itertools.pairwise(edges):
        covering = [hosts for (a, b), hosts in blocks.items() if a <= start < b]
        held: tuple[int, ...] = tuple(sorted(set[int]().union(*covering)))
        if runs and runs[-1][1] == held:
            runs[-1] = ((runs[-1][0][0], stop), held)
        else:
            runs.append(((start, stop), held))
    return tuple(runs)


def _heading(ledger: Any, per: str) -> str:
    devices, hosts = len(ledger.devices), len(ledger.hosts)
    line = f"{ledger.num_rows} rows, {describe_sharding(ledger.sharding)}"
    line += f", {devices} device{'s' * (devices != 1)}"
    line += f" and {hosts} host{'s' * (hosts > 1)}"
    return line + (": one row of bars per host" if per == "host" else "")


def _hosts_text(hosts: tuple[int, ...]) -> str:
    """``host 0``, ``hosts 0,1`` or ``hosts 0-7``."""
    if len(hosts) == 1:
        return f"host {hosts[0]}"
    return "hosts " + (",".join(map(str, hosts)) if len(hosts) <= 3 else _blocks.compact(hosts))
