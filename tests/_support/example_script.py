"""The example training script, loaded as a module, and the rows log it writes.

Shared by the tests that run `examples/train_data_parallel.py` alone, under
`launch_local` and after a resume.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).parents[2] / "examples" / "train_data_parallel.py"


def load_example() -> Any:
    """The script as a module, so a test can call its `train` in this process."""
    spec = importlib.util.spec_from_file_location("train_data_parallel", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_log(path: Path) -> dict[int, dict[str, Any]]:
    """Each step's line; a step done twice (after a restore) keeps the later line."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return {line["step"]: line for line in lines}
