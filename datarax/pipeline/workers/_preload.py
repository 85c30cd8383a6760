"""What the forkserver that starts a pipeline's workers imports first (its preload).

Every worker is forked from that forkserver, and the first thing a worker does is
import the script of the pipeline's process again (``__mp_main__``), before any code of
this library runs in it. JAX set to CPU here is on CPU in each worker from its first
line, so top-level JAX code of that script does not reach for the accelerator the
pipeline's process holds. Imported anywhere else, this module does nothing.
"""

from __future__ import annotations

from datarax.pipeline.workers._guards import in_forkserver, run_jax_on_cpu

if in_forkserver():
    run_jax_on_cpu(None)
