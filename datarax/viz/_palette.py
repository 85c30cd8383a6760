"""The colour rules every datarax picture shares: devices, hosts, copies and text.

Devices get Paul Tol's "light" scheme: nine pale colours, told apart with the common
forms of colour blindness, on which black text reads. Hosts get four dark colours
from Tol's "muted" scheme whose hues lie between the device hues, so a host is never
mistaken for a device. Blocks held by several devices are hatched in every picture.
"""

from __future__ import annotations

from matplotlib.colors import to_hex, to_rgb

# Ordered so that colours next to each other in the list, or two apart, differ most:
# that is what sits side by side on 1-D meshes and on (n, 2), (4, 2) and (8, 8) grids.
DEVICE_PALETTE: tuple[str, ...] = (
    "#77AADD",  # light blue
    "#EE8866",  # orange
    "#EEDD88",  # light yellow
    "#FFAABB",  # pink
    "#99DDFF",  # light cyan
    "#BBCC33",  # pear
    "#DDDDDD",  # pale grey
    "#44BB99",  # mint
    "#AAAA00",  # olive
)
HOST_PALETTE: tuple[str, ...] = (
    "#332288",  # indigo
    "#117733",  # green
    "#882255",  # wine
    "#AA4499",  # purple
)
SEVERAL_HOSTS = "#555555"  # a block whose copies sit on more than one host
COPIES_HATCH = "//"


def device_colors(count: int) -> list[str]:
    """`count` device colours as hex strings, repeating the 9 after the first 9.

    Args:
        count: how many colours, one per device (or per block of devices).

    Returns:
        ``DEVICE_PALETTE[i % 9]`` for i in ``range(count)``.

    Raises:
        ValueError: `count` is negative or not an integer.

    Example:
        >>> device_colors(3)
        ['#77AADD', '#EE8866', '#EEDD88']
    """
    return _cycle(DEVICE_PALETTE, count)


def host_colors(count: int) -> list[str]:
    """`count` host colours as hex strings, repeating the 4 after the first 4.

    Args:
        count: how many colours, one per host (process).

    Returns:
        ``HOST_PALETTE[i % 4]`` for i in ``range(count)``.

    Raises:
        ValueError: `count` is negative or not an integer.

    Example:
        >>> host_colors(2)
        ['#332288', '#117733']
    """
    return _cycle(HOST_PALETTE, count)


def _cycle(palette: tuple[str, ...], count: int) -> list[str]:
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"count must be a whole number >= 0, got {count!r}.")
    return [palette[i % len(palette)] for i in range(count)]


def text_color(fill: str) -> str:
    """Black or white, whichever reads better on `fill`.

    Example:
        >>> text_color(HOST_PALETTE[0]), text_color(DEVICE_PALETTE[0])
        ('white', 'black')
    """
    red, green, blue = to_rgb(fill)
    return "black" if 0.299 * red + 0.587 * green + 0.114 * blue > 0.5 else "white"


def hatch_color(fill: str) -> str:
    """The hatching drawn over `fill` for copies: darker on pale fills, lighter on dark."""
    towards = 0.0 if text_color(fill) == "black" else 1.0
    red, green, blue = (0.55 * part + 0.45 * towards for part in to_rgb(fill))
    return to_hex((red, green, blue))
