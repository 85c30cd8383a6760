"""docs/laptop_to_pod.md's "What to check first" snippet runs under launch_local.

The snippet is read from the page itself, saved as a script and run on a local
cluster of 2 processes, the rehearsal the page recommends; it must not call
``jax.distributed.initialize`` a second time there.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from datarax.distributed import launch_local

pytestmark = pytest.mark.multihost
PAGE = Path(__file__).parents[2] / "docs" / "laptop_to_pod.md"


def test_what_to_check_first_runs_under_launch_local(tmp_path: Path) -> None:
    section = PAGE.read_text().split("## What to check first", 1)[1]
    snippet = re.search(r"```python\n(.*?)```", section, re.S)
    assert snippet is not None
    script = tmp_path / "check_first.py"
    script.write_text(snippet.group(1))
    runs = launch_local(script, num_processes=2, devices_per_process=2, timeout_s=60)
    assert "process 0 of 2: 2 of 4 devices" in runs[0].output
    assert "process 1 of 2: 2 of 4 devices" in runs[1].output
    assert "0-127" in runs[0].output and "128-255" in runs[0].output  # the ledger's rows
