"""Keeping freed memory for reuse: host stages without a page-fault storm.

A numpy stage that makes fresh arrays of tens of megabytes for every batch asks the C
library for that memory each time. glibc hands large blocks out as fresh mappings from
the kernel and returns them when they are freed, so every batch faults its arrays in
again, page by page (about 10,000 faults for 40 MB of 4 KiB pages); without transparent
huge pages the faults dominate such a stage, and they contend across processes. Told to
keep freed memory (``mallopt``: a high mmap threshold and trim threshold), glibc serves
the next batch's arrays from memory already faulted in.

The cost: the process keeps, instead of returning, up to `max_bytes` of freed memory; in
practice its resident memory stays at the peak its stage needs.
"""

from __future__ import annotations

from datarax._syscompat import glibc_mallopt
from datarax._validate import check_int

DEFAULT_KEEP_BYTES = 2**30  # 1 GiB
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3  # from glibc's <malloc.h>
_MAX_INT = 2**31 - 1  # mallopt takes a C int
_TOP_PAD = 64 * 2**20  # grow the heap by this much at a time


def keep_freed_memory(max_bytes: int = DEFAULT_KEEP_BYTES) -> bool:
    """Makes this process keep up to `max_bytes` of freed memory for reuse (glibc only).

    Blocks up to `max_bytes` (at most 2 GiB - 1) come from the heap instead of their own
    mappings, and freed memory is given back to the system only beyond `max_bytes`, so a
    stage that makes large arrays for every batch reuses pages already faulted in. A
    pipeline's worker processes do this at their start (see `Workers`); call it yourself
    to do the same in this process (``workers=0``). It cannot be undone, and it changes
    nothing where the C library is not glibc (macOS, musl), which it reports by
    returning False.

    Returns:
        Whether glibc took the settings.

    Example:
        >>> import platform
        >>> keep_freed_memory(2**29) == (platform.libc_ver()[0] == "glibc")
        True
    """
    max_bytes = check_int("max_bytes", max_bytes, meaning="bytes of freed memory to keep")
    return glibc_mallopt(
        [
            (_M_MMAP_THRESHOLD, min(max_bytes, _MAX_INT)),
            (_M_TRIM_THRESHOLD, min(max_bytes, _MAX_INT)),
            (_M_TOP_PAD, min(_TOP_PAD, max_bytes)),
        ]
    )
