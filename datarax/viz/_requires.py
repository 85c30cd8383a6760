"""What `datarax.viz` needs beyond the core, checked before anything imports it.

A missing matplotlib or rich is an ImportError that gives the pip command of the `viz`
extra, instead of a bare ModuleNotFoundError from deep inside a submodule.
"""

from datarax._extras import require

require("matplotlib", "viz", "datarax.viz")
require("rich", "viz", "datarax.viz")
