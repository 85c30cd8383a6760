"""One process of a local cluster started by `datarax.distributed.launch_local`.

Run as ``python -m datarax._cluster_worker JOB_DIR PROCESS_INDEX``. It reads the job
from ``JOB_DIR/job.pkl``, joins the JAX cluster on 127.0.0.1, runs the target and
writes ``JOB_DIR/result-<i>.pkl``: ``("ok", value)`` or ``("error", traceback)``.
Everything it prints goes to the file the launcher gave it as stdout.
"""

from __future__ import annotations

import importlib
import inspect
import os
import pickle
import runpy
import sys
import traceback
from pathlib import Path
from typing import Any


def _join_cluster(job: dict[str, Any], process_index: int) -> None:
    import jax

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", job["devices_per_process"])
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    options = {
        "cluster_detection_method": "deactivate",
        "initialization_timeout": job["init_timeout_s"],
        "heartbeat_timeout_seconds": job["heartbeat_timeout_s"],
        "shutdown_timeout_seconds": job["shutdown_timeout_s"],
        "coordinator_bind_address": job["coordinator_address"],
    }
    accepted = inspect.signature(jax.distributed.initialize).parameters
    jax.distributed.initialize(
        coordinator_address=job["coordinator_address"],
        num_processes=job["num_processes"],
        process_id=process_index,
        **{name: value for name, value in options.items() if name in accepted},
    )


def _run_target(job: dict[str, Any]) -> Any:
    kind, payload = job["target"]
    if kind == "script":
        sys.argv = [payload, *map(str, job["args"])]
        runpy.run_path(payload, run_name="__main__")
        return None
    if kind == "source":
        source, name = payload
        namespace: dict[str, Any] = {"__name__": "__datarax_worker__"}
        exec(compile(source, f"<function {name}>", "exec"), namespace)
        function = namespace[name]
    elif kind == "import":
        module_name, qualname = payload
        function: Any = importlib.import_module(module_name)
        for attribute in qualname.split("."):
            function = getattr(function, attribute)
    else:
        function = pickle.loads(payload)
    return function(*job["args"], **job["kwargs"])


def _user_frames(error: BaseException) -> Any:
    """The traceback without this module's frames, when the error came from the target."""
    frames = error.__traceback__
    while frames is not None and frames.tb_frame.f_code.co_filename == __file__:
        frames = frames.tb_next
    return frames or error.__traceback__


def main(job_dir: Path, process_index: int) -> int:
    """Joins the cluster, runs the job's target and records its result."""
    job = pickle.loads((job_dir / "job.pkl").read_bytes())
    for entry in reversed(job["sys_path"]):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    result_file = job_dir / f"result-{process_index}.pkl"
    try:
        (job_dir / f"joining-{process_index}").touch()
        _join_cluster(job, process_index)
        (job_dir / f"joined-{process_index}").touch()
        value = _run_target(job)
        try:
            record = pickle.dumps(("ok", value))
        except Exception as error:
            raise TypeError(
                f"the target returned a {type(value).__name__}, which cannot be pickled "
                f"({error}). Return numpy arrays or plain python values."
            ) from None
    except BaseException as error:
        report = "".join(traceback.format_exception(type(error), error, _user_frames(error)))
        print(report, file=sys.stderr)
        result_file.write_bytes(pickle.dumps(("error", report)))
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)  # skip the shutdown barrier, which would wait for the other processes
    result_file.write_bytes(record)
    import jax

    jax.distributed.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), int(sys.argv[2])))
