"""What every lesson figure checks before drawing, and how it becomes a PNG."""

from __future__ import annotations

from typing import Any

from datarax_course._checks import check_number, check_str

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
