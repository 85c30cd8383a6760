"""Sizes for a placement picture: panels, ticks and labels, in inches and points."""

from __future__ import annotations

import math

from . import _blocks

_MAX_FONT, _GOOD_FONT, _CHAR_EM, _LINE_EM = 11.0, 7.0, 0.68, 1.3
_MIN_BLOCK_IN, _MIN_SIDE_IN, _MAX_DRAWN_RATIO = 0.22, 0.6, 4.0
LEFT_IN, GAP_W_IN, GAP_H_IN, BAND_IN = 1.1, 0.5, 0.7, 0.9


def fit_label(
    options: list[list[str]], width_pt: float, height_pt: float
) -> tuple[str, float, float]:
    """Label text, font size and rotation for a width x height box (in points).

    Tries each option (fullest first), level and turned by 90 degrees; takes the
    first that reads comfortably, else the largest that fits.
    """
    fitted = []
    for option in options:
        longest, count = max(len(line) for line in option), len(option)
        for rotation, along, across in ((0.0, width_pt, height_pt), (90.0, height_pt, width_pt)):
            size = min(_MAX_FONT, along / (longest * _CHAR_EM), across / (count * _LINE_EM))
            fitted.append(("\n".join(option), 0.85 * size, rotation))
    comfortable = [fit for fit in fitted if fit[1] >= _GOOD_FONT]
    return comfortable[0] if comfortable else max(fitted, key=lambda fit: fit[1])


def grid(count: int, tall: float) -> tuple[int, int]:
    """Panel rows and columns for `count` panels `tall` times as high as wide.

    One row up to 3 panels; beyond, about as many columns as make the grid square.
    """
    if count <= 3:
        return 1, count
    cols = min(count, math.ceil(math.sqrt(count * min(max(tall, 0.25), 4.0))))
    rows = math.ceil(count / cols)
    return rows, math.ceil(count / rows)  # rows as full as they can be: 4 + 4, not 6 + 2


def panel_inches(
    found: _blocks.Layout, grid: tuple[int, int], width: float
) -> tuple[float, float, bool]:
    """Width and height of one panel in inches, and whether rows and columns share a scale."""
    grid_rows, grid_cols = grid
    blocks = [block for panel in found.panels for block in panel.blocks]
    across = max(len({block.cols for block in panel.blocks}) for panel in found.panels)
    down = max(len({block.rows for block in panel.blocks}) for panel in found.panels)
    w_room = max((width - LEFT_IN - (grid_cols - 1) * GAP_W_IN) / grid_cols, _MIN_SIDE_IN)
    h_total = min(0.7 * width, 6.0) + 2.0 * (grid_rows - 1)  # more rows of panels, more room
    h_room = max((h_total - (grid_rows - 1) * GAP_H_IN) / grid_rows, _MIN_SIDE_IN)
    w_limit, h_limit = max(w_room, _MIN_BLOCK_IN * across), max(h_room, _MIN_BLOCK_IN * down)
    if len(found.shape) == 1:
        return w_limit, BAND_IN, True
    rows, cols = found.rows, found.cols
    scale = min(w_room / cols, h_room / rows)
    need = max(
        _MIN_BLOCK_IN / min(block.rows[1] - block.rows[0] for block in blocks),
        _MIN_BLOCK_IN / min(block.cols[1] - block.cols[0] for block in blocks),
        _MIN_SIDE_IN / min(rows, cols),
    )
    scale = max(scale, need)
    if scale * cols <= 1.001 * w_limit and scale * rows <= 1.001 * h_limit:
        return scale * cols, scale * rows, True
    if rows > cols:  # keep the long side long, at a ratio that still reads
        short = max(h_limit / _MAX_DRAWN_RATIO, _MIN_SIDE_IN, _MIN_BLOCK_IN * across)
        return min(short, w_limit), h_limit, False
    short = max(w_limit / _MAX_DRAWN_RATIO, _MIN_SIDE_IN, _MIN_BLOCK_IN * down)
    return w_limit, min(short, h_limit), False


def ticks(edges: set[int], length_in: float, label_in: float) -> list[int]:
    """Block edges to tick, thinned so that labels `label_in` wide do not collide."""
    ordered = sorted(edges)
    most = max(2, int(length_in / label_in))
    step = math.ceil(len(ordered) / most)
    picked = ordered[::step]
    if picked[-1] != ordered[-1]:
        # The last edge always shows; it replaces the tick before it when too close.
        crowded = len(picked) > 1 and ordered[-1] - picked[-1] < (picked[-1] - picked[-2]) / 2
        picked[-1 if crowded else len(picked) :] = [ordered[-1]]
    return picked
