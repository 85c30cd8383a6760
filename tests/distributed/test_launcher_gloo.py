"""Gloo's connection lines stay out of a local cluster's output unless asked for.

Every process of a cluster prints "[Gloo] Rank 0 is connected to 3 peer ranks ..." from
jaxlib's gloo CPU collectives (C++, straight to its stdout, with no setting to turn it
off) when it first connects to its peers; jaxlib 0.10 does, 0.7.2 does not.
`launch_local` leaves those lines out of the outputs it returns and of its error
messages; ``verbose=True`` keeps them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from datarax.distributed import launch_local
from datarax.distributed._report import without_gloo_lines

LINE = "[Gloo] Rank 1 is connected to 3 peer ranks. Expected number of connected peer ranks is : 3"


def test_without_gloo_lines_keeps_everything_else() -> None:
    text = f"{LINE}\n2 processes, 4 devices, from step 0\n{LINE}\ndone{LINE}\n: 1 step\n"
    assert without_gloo_lines(text) == "2 processes, 4 devices, from step 0\ndone: 1 step\n"
    assert without_gloo_lines("[Gloo] something else\n") == "[Gloo] something else\n"
    # Two threads of one process printed at once (seen in a run): one inside the other.
    nested = f"[Gloo] Rank {LINE}\n1 is connected to 3 peer ranks. Expected number of "
    nested += "connected peer ranks is : 3\nok\n"
    assert without_gloo_lines(nested) == "ok\n"
    # Or piece by piece, one line each.
    pieces = "[Gloo] Rank [Gloo] Rank 0 is connected to 1 is connected to 3 peer ranks. 3 peer"
    pieces += " ranks. Expected number of connected peer ranks is : 3\nExpected number of "
    pieces += "connected peer ranks is : 3\nstep 1 [Gloo] Rank\n"
    assert without_gloo_lines(pieces) == "step 1 [Gloo] Rank\n"


@pytest.mark.multihost
def test_verbose_keeps_the_gloo_lines(tmp_path: Path) -> None:
    # jaxlib 0.10 prints them, 0.7.2 does not: the script prints one itself.
    script = tmp_path / "prints_gloo.py"
    script.write_text(f"print({LINE!r})\nprint('after')\n")
    quiet = launch_local(script, num_processes=1, devices_per_process=1, timeout_s=60)
    assert quiet[0].output == "after\n"
    loud = launch_local(script, num_processes=1, devices_per_process=1, timeout_s=60, verbose=True)
    assert loud[0].output == f"{LINE}\nafter\n"
    with pytest.raises(TypeError, match="verbose must be True or False"):
        launch_local(script, verbose="yes")  # type: ignore[arg-type]
