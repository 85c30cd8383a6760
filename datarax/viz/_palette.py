"""The colour rules every datarax picture shares: devices, hosts, copies and text.

Devices get Paul Tol's "light" scheme: nine pale colours, told apart with the common
forms of colour blindness, on which black text reads. Hosts get four dark colours whose
hues lie between the device hues, so a host is never mistaken for a device: indigo,
green and wine from Tol's "muted" scheme, and a dark orange (Tol's muted purple was
too close to its wine). From host 4 on, the host colours repeat with a mark
(`host_hatch`): dots for hosts 4-7, rings for 8-11, and so on, so hosts stay apart in
a picture of up to 32 hosts; beyond that, the pictures name hosts by number. Blocks
held by several devices are hatched ``//`` in every picture.
"""

from __future__ import annotations

from typing import Any

from matplotlib.colors import is_color_like, to_hex, to_rgb

from datarax._validate import check_int

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
    "#AA5800",  # dark orange
)
# The mark over a host's colour, per group of len(HOST_PALETTE) hosts: none for the
# first group. None of them uses "/", which marks copies.
HOST_MARKS: tuple[str, ...] = ("", "..", "oo", "xx", "++", "**", "--", "||")
MAX_COLORS = 65_536  # more colours than any picture has blocks; the lists stay small
SEVERAL_HOSTS = "#555555"  # a block whose copies sit on more than one host
COPIES_HATCH = "//"


def device_colors(count: int) -> list[str]:
    """`count` device colours as hex strings, repeating the 9 after the first 9.

    Args:
        count: how many colours, one per device (or per block of devices).

    Returns:
        ``DEVICE_PALETTE[i % 9]`` for i in ``range(count)``.

    Raises:
        TypeError: `count` is not an int.
        ValueError: `count` is negative or above 65,536 (`MAX_COLORS`).

    Example:
        >>> device_colors(3)
        ['#77AADD', '#EE8866', '#EEDD88']
    """
    return _cycle(DEVICE_PALETTE, count)


def host_colors(count: int) -> list[str]:
    """`count` host colours as hex strings, repeating the 4 after the first 4.

    Hosts 4 and up share a colour with an earlier host; draw them with `host_hatch`
    too, which tells them apart.

    Args:
        count: how many colours, one per host (process).

    Returns:
        ``HOST_PALETTE[i % 4]`` for i in ``range(count)``.

    Raises:
        TypeError: `count` is not an int.
        ValueError: `count` is negative or above 65,536 (`MAX_COLORS`).

    Example:
        >>> host_colors(2)
        ['#332288', '#117733']
    """
    return _cycle(HOST_PALETTE, count)


def host_color(host: int) -> str:
    """The colour of `host` in every picture, ``host_colors(host + 1)[host]``, without
    making a list as long as the host id.

    Example:
        >>> host_color(5) == host_colors(6)[5]
        True
    """
    return HOST_PALETTE[check_int("host", host, minimum=0) % len(HOST_PALETTE)]


def host_hatch(host: int) -> str:
    """The hatch drawn over `host`'s colour: none for hosts 0-3, then one per group of 4.

    With `host_colors` this tells 32 hosts apart (4 colours x 8 marks).

    Raises:
        TypeError: `host` is not an int.
        ValueError: `host` is negative.

    Example:
        >>> host_hatch(2), host_hatch(5), host_hatch(9)
        ('', '..', 'oo')
    """
    host = check_int("host", host, minimum=0)
    return HOST_MARKS[(host // len(HOST_PALETTE)) % len(HOST_MARKS)]


def _cycle(palette: tuple[str, ...], count: int) -> list[str]:
    count = check_int(
        "count",
        count,
        minimum=0,
        maximum=MAX_COLORS,
        meaning=f"for more, index the palette: palette[i % {len(palette)}]",
    )
    return [palette[i % len(palette)] for i in range(count)]


def text_color(fill: Any) -> str:
    """Black or white, whichever reads better on `fill`.

    Raises:
        TypeError: `fill` is neither a string nor a sequence of numbers.
        ValueError: `fill` is not a colour matplotlib knows.

    Example:
        >>> text_color(HOST_PALETTE[0]), text_color(DEVICE_PALETTE[0])
        ('white', 'black')
    """
    if not is_color_like(fill):
        error = ValueError if isinstance(fill, (str, tuple, list)) else TypeError
        raise error(
            f"fill must be a matplotlib colour, e.g. '#332288' or (0.2, 0.1, 0.5), got "
            f"{type(fill).__name__}: {fill!r:.100}."
        )
    red, green, blue = to_rgb(fill)
    return "black" if 0.299 * red + 0.587 * green + 0.114 * blue > 0.5 else "white"


def hatch_color(fill: str) -> str:
    """The hatching drawn over `fill` for copies: darker on pale fills, lighter on dark.

    Example:
        >>> hatch_color("#ffffff")
        '#8c8c8c'
    """
    towards = 0.0 if text_color(fill) == "black" else 1.0
    red, green, blue = (0.55 * part + 0.45 * towards for part in to_rgb(fill))
    return to_hex((red, green, blue))
