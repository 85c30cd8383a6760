"""The library's own checks, as the course uses them: one place to import them from.

The figures and checkers take their arguments in the library's words, so they check
them with the library's checks, in the library's wording: each returns the value it
accepted (as a plain Python type) or raises a `TypeError` (the wrong kind of value) or
a `ValueError` (the right kind, out of range), naming the argument, what is allowed and
what it got. The library keeps these checks in private modules; the course may import
exactly those named in `tests/test_layout.py` (``COURSE_MAY_IMPORT``), and imports them
here, so that a module the library moves is followed in one place. The figures' checks
of a width, a size and a title are `datarax_course.figures._frame`'s.
"""

from __future__ import annotations

from datarax._extras import require
from datarax._trees import check_not_deleted
from datarax._validate import (
    check_bool,
    check_int,
    check_mapping,
    check_number,
    check_str,
    check_strings,
    is_sequence,
)
from datarax.sharding._placement import device_spans
from datarax.sharding._sharding_checks import (
    check_spec_against_mesh,
    named_leaf_sharding,
    spec_axis_names,
)

__all__ = [
    "check_bool",
    "check_int",
    "check_mapping",
    "check_not_deleted",
    "check_number",
    "check_spec_against_mesh",
    "check_str",
    "check_strings",
    "device_spans",
    "is_sequence",
    "named_leaf_sharding",
    "require",
    "spec_axis_names",
]
