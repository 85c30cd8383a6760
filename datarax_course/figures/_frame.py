"""What every lesson figure checks before drawing: its width, its size and its title.

They are the library's own checks (`datarax.viz._blocks`, which the course may import:
`tests/test_layout.py`), so a lesson figure refuses what `datarax.viz.plot_sharding`
refuses, in the same words: a width in [2, 40] inches, no side past 40 inches (checked
before anything is drawn, naming what to draw fewer of), a title that is a string or
None.
"""

from __future__ import annotations

from datarax.viz._blocks import check_size, check_title, check_width

__all__ = ["check_size", "check_title", "check_width"]
