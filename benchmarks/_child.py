"""Runs a benchmark module in a process of its own and reads the JSON line it prints last.

A fresh process is how a benchmark gets its own device count (JAX fixes it at start) or
its own allocator settings.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any


def run_module(
    module: str, args: list[str], env: dict[str, str], timeout_s: float, what: str
) -> dict[str, Any]:
    """``python -m module *args`` in `env`; its last line of output, parsed as JSON.

    Raises:
        RuntimeError: the process failed; the message names `what` and ends with the
            last 2,000 characters of its stderr.
    """
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the {what} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
