"""A script for `launch_local`: process 1 is killed with SIGKILL mid-run.

Process 0 then waits for it in a collective until the launcher stops it.
"""

import os
import signal
import sys

import jax
from jax.experimental import multihost_utils

if __name__ == "__main__":
    print(f"pid {os.getpid()} argv {sys.argv[1:]}", flush=True)
    multihost_utils.sync_global_devices("both arrived")
    if jax.process_index() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    multihost_utils.sync_global_devices("never completes")
