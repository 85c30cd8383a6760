"""Stages for the tests of workers under faults and of ``workers="auto"``: top-level, so
worker processes can unpickle them."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


class ExitsOnce:
    """Calls ``sys.exit(3)`` (or raises KeyboardInterrupt) the first time it sees row
    `row`; a marker file remembers across processes."""

    def __init__(self, row: int, marker: Path, how: str):
        self.row, self.marker, self.how = row, marker, how

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.row in batch["x"] and not self.marker.exists():
            self.marker.touch()
            if self.how == "sys.exit":
                sys.exit(3)
            raise KeyboardInterrupt
        return batch


class InterruptsParentOnce:
    """The first time it runs (a marker file remembers): waits, sends SIGINT to `parent`
    (a Ctrl-C that lands while the parent writes the next task), and waits again before
    it returns, so the worker reads nothing meanwhile."""

    def __init__(self, parent: int, marker: str):
        self.parent, self.marker = parent, Path(marker)

    def __call__(self, batch: Any) -> Any:
        if not self.marker.exists():
            self.marker.touch()
            time.sleep(0.5)
            os.kill(self.parent, signal.SIGINT)
            time.sleep(1.0)
        return batch


class WarmsUp:
    """Takes `seconds` the first time it runs in a process (loading a table, say), then
    next to nothing."""

    def __init__(self, seconds: float):
        self.seconds, self.warm = seconds, False

    def __call__(self, batch: Any) -> Any:
        if not self.warm:
            time.sleep(self.seconds)
            self.warm = True
        return batch


class CountsPickling:
    """Passes batches through; `times_pickled` counts the pickles made of it here."""

    def __init__(self) -> None:
        self.times_pickled = 0

    def __getstate__(self) -> dict[str, Any]:
        self.times_pickled += 1
        return dict(self.__dict__)

    def __call__(self, batch: Any) -> Any:
        return batch
