"""`.ci/package_check.py` (make package-check) loaded as a module, for the tests of it."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / ".ci" / "package_check.py"

_spec = importlib.util.spec_from_file_location("package_check", SCRIPT)
assert _spec is not None and _spec.loader is not None
package_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(package_check)
