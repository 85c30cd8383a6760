"""Pictures of big inputs: drawn or refused in bounded memory, never over 40 inches.

A picture draws a rectangle per run of rows (`plot_rows`) or per event
(`plot_timeline`), at most 4096 in all; past that it is refused before anything is
drawn, saying how to draw fewer, while a million rows in a few runs still draw. No
figure is wider or taller than the 40 inches a `width` may be: one that would be is
refused with what to draw fewer of. Memory is the measure here; time is a hang limit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import matplotlib.pyplot as plt
import numpy as np
import pytest
from _support.limits import peak_bytes
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from datarax import viz
from datarax.sharding import RowLedger, pretend_hosts
from datarax_course import figures

HANG_LIMIT_S = 60
MESH = jax.make_mesh((8,), ("data",))
ROWS = NamedSharding(MESH, P("data"))
MASK = jax.device_put(np.arange(16) < 13, ROWS)


def _events(count: int) -> list[tuple[str, str, float, float]]:
    return [("input" if n % 2 else "step", str(n), n * 1e-3, (n + 1) * 1e-3) for n in range(count)]


# Striped owners change at every row: a run per row.
STRIPED_5, STRIPED_6 = np.arange(10**5) % 8, np.arange(10**6) % 8
EVENTS_5, EVENTS_6 = _events(10**5), _events(10**6)
TOO_MANY: dict[str, tuple[Callable[[], Any], str]] = {
    "plot_rows, 10**5 runs": (lambda: figures.plot_rows({"d": STRIPED_5}), "at most 4096 runs"),
    "plot_rows, 10**6 runs": (lambda: figures.plot_rows({"d": STRIPED_6}), "at most 4096 runs"),
    "plot_timeline, 10**5 events": (
        lambda: figures.plot_timeline({"a": EVENTS_5}, lanes=("input", "step")),
        "at most 4096 events",
    ),
    "plot_timeline, 10**6 events": (
        lambda: figures.plot_timeline({"a": EVENTS_6}, lanes=("input", "step")),
        "at most 4096 events",
    ),
}


@pytest.mark.parametrize("name", sorted(TOO_MANY))
def test_too_many_runs_or_events_are_refused_in_a_few_mib(name: str) -> None:
    call, message = TOO_MANY[name]
    refused, peak = peak_bytes(call, HANG_LIMIT_S)
    plt.close("all")
    assert isinstance(refused, ValueError), refused
    assert message in str(refused) and "slice" in str(refused)
    assert peak < 32 * 2**20, f"{name} peaked at {peak / 2**20:.0f} MiB"


def test_a_million_rows_in_few_runs_still_draw_in_bounded_memory() -> None:
    blocks = np.repeat(np.arange(8), 10**6 // 8)
    plot, peak = peak_bytes(lambda: figures.plot_rows({"d": blocks}), HANG_LIMIT_S)
    assert [owner for _, _, owner in plot.runs["d"]] == list(range(8))
    assert len(plot._repr_png_()) > 0
    plt.close("all")
    assert peak < 64 * 2**20, f"peaked at {peak / 2**20:.0f} MiB"


def test_a_picture_at_the_cap_still_draws() -> None:
    striped = np.arange(4096) % 8
    plot = figures.plot_rows({"d": striped})
    assert len(plot.patches["d"]) == 4096
    assert plot.patches["d"][0].get_linewidth() == 0  # a white edge would hide a thin run
    timeline = figures.plot_timeline({"a": _events(4096)}, lanes=("input", "step"))
    assert sum(len(bars) for bars in timeline.bars["a"].values()) == 4096
    plt.close("all")


LONG_TITLE = "a title that goes on " * 50
# Each would make a figure over 40 inches on some side on the code before the cap.
TOO_BIG: dict[str, Callable[[], Any]] = {
    "plot_rows, 100 strips": lambda: figures.plot_rows({str(n): [0, 1] for n in range(100)}),
    "plot_row_grid, 1 column": lambda: figures.plot_row_grid({"e": [0] * 64}, columns=1),
    "plot_timeline, 60 panels": lambda: figures.plot_timeline(
        {str(n): _events(2) for n in range(60)}, lanes=("input", "step")
    ),
    "plot_reads, 100 steps": lambda: figures.plot_reads(
        {"a": {step: ([0, 1], [0, 1]) for step in range(100)}}
    ),
    "plot_reads, 400 positions": lambda: figures.plot_reads(
        {"a": {0: (list(range(400)), [0] * 400)}}
    ),
    "plot_epoch_ends, 100 batches": lambda: figures.plot_epoch_ends({"p": {0: ["done"] * 100}}),
    "plot_mask, 8 panels": lambda: figures.plot_mask({str(n): MASK for n in range(8)}),
    "plot_estimates, 80 values": lambda: figures.plot_estimates(
        {str(n): float(n) for n in range(80)}, exact="0"
    ),
    "plot_host_rows, 80 shardings": lambda: figures.plot_host_rows(
        {str(n): ROWS for n in range(80)}, 16, host_of=pretend_hosts(2)
    ),
    "plot_devices, 200 layouts": lambda: figures.plot_devices(*[MESH.devices[:1]] * 200),
    "plot_ledger, a long title": lambda: viz.plot_ledger(
        RowLedger(ROWS, 16, host_of=pretend_hosts(2)), title=LONG_TITLE * 32
    ),
    "plot_sharding, a long title": lambda: viz.plot_sharding(
        jax.device_put(np.zeros((16, 4)), ROWS), title=LONG_TITLE
    ),
}


@pytest.mark.parametrize("name", sorted(TOO_BIG))
def test_no_figure_is_over_40_inches(name: str) -> None:
    refused, _ = peak_bytes(TOO_BIG[name], HANG_LIMIT_S)
    plt.close("all")
    assert isinstance(refused, ValueError), (
        f"{name} drew a figure of {tuple(refused.figure.get_size_inches().round(1))} inches"
    )
    assert "at most 40 inches on a side, so draw fewer" in str(refused)
