"""One process of a local cluster started by `datarax.distributed.launch_local`.

Run as ``python -m datarax.distributed._worker JOB_DIR PROCESS_INDEX [WATCH_FD]``. It reads
the job from ``JOB_DIR/job.pkl``, joins the JAX cluster on 127.0.0.1, runs the target
and writes ``JOB_DIR/result-<i>.pkl``: ``("ok", value)`` or ``("error", traceback)``.
Everything it prints goes to the file the launcher gave it as stdout.

``WATCH_FD`` is the read end of a pipe whose write end only the launcher holds. When
the launcher dies (a Jupyter kernel restart kills it with SIGTERM or SIGKILL), the
process removes ``JOB_DIR``, kills every process of the run (the other processes of
the cluster too, and whatever any of them started) and then its own process group.
A peer may not get to do it itself: JAX ends a process whose coordinator vanished,
and the processes it started would be left running. Two signs of that death each
suffice: end-of-file on the pipe, read by a daemon thread, and SIGHUP, which Linux
sends when the launcher exits (``prctl(PR_SET_PDEATHSIG)``), handled when the main
thread runs Python code and the process's parent has changed. Any other SIGHUP is
ignored: the launcher stops its processes itself.

On Linux the process is a child subreaper, so what its children start and orphan
(a daemon that called ``setsid``) stays below it, where the launcher finds it; it
kills all of those before it exits. The result file appears whole or not at all
(written beside it, then renamed), so the launcher may take it at any moment.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import inspect
import os
import pickle
import runpy
import shutil
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

from datarax.distributed._descendants import (
    MARK_VARIABLE,
    become_subreaper,
    kill_descendants,
    kill_marked,
)

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
_JOB_DIR_LOCK = threading.RLock()  # re-entrant: the SIGHUP handler runs on the main thread
_ABANDONED = threading.Event()  # set once the launcher is gone and the job folder with it


def _write(path: Path, data: bytes = b"") -> None:
    """Writes a file of the job folder, unless the folder is gone with the launcher."""
    with _JOB_DIR_LOCK, contextlib.suppress(FileNotFoundError):
        if not _ABANDONED.is_set():
            partial = path.with_name(f"{path.name}.part")
            partial.write_bytes(data)
            os.replace(partial, path)


def _abandon(job_dir: Path, mark: str | None) -> None:
    """The launcher is gone: removes the job folder, kills the run's processes, then dies.

    Every process of the cluster does this, in any order. The folder goes first, after
    this process's last write to it: killing a peer may end this process (JAX ends a
    process whose coordinator is gone). Once the peers are dead it goes again, in case
    one was writing into it meanwhile.
    """
    with _JOB_DIR_LOCK:
        _ABANDONED.set()
        shutil.rmtree(job_dir, ignore_errors=True)
        if mark is not None:
            kill_marked(mark)
        kill_descendants(os.getpid())
        shutil.rmtree(job_dir, ignore_errors=True)
        if os.getpgrp() == os.getpid():  # the launcher made each process a group leader
            os.killpg(os.getpid(), signal.SIGKILL)
        os._exit(1)


def _set_parent_death_signal(signum: int) -> None:
    """Asks Linux to send `signum` when the launcher exits; elsewhere does nothing."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)


def _die_with_launcher(job_dir: Path, watch_fd: int) -> None:
    """Makes this process, what it starts and `job_dir` go when the launcher dies."""
    launcher = os.getppid()  # if the launcher is already gone, the pipe says so
    mark = os.environ.get(MARK_VARIABLE)  # read before the target can change it
    os.set_inheritable(watch_fd, False)

    def on_hangup(signum: int, frame: Any) -> None:
        # Linux sends it when the launcher's thread that started this process exits;
        # while another of its threads lives, this process's parent is unchanged and
        # the launcher still holds the pipe, whose end-of-file then decides.
        if os.getppid() != launcher:
            _abandon(job_dir, mark)

    def watch() -> None:
        try:
            while os.read(watch_fd, 1):  # the launcher never writes: this waits for EOF
                pass
        except OSError:  # the target closed the pipe; the SIGHUP still works
            return
        _abandon(job_dir, mark)

    signal.signal(signal.SIGHUP, on_hangup)
    _set_parent_death_signal(signal.SIGHUP)
    threading.Thread(target=watch, name="datarax-launcher-watch", daemon=True).start()


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


def main(job_dir: Path, process_index: int, watch_fd: int | None = None) -> int:
    """Joins the cluster, runs the job's target and records its result.

    Args:
        job_dir: the folder the launcher made for this run.
        process_index: this process's index in the cluster.
        watch_fd: the read end of the launcher's pipe; None runs without watching it.

    Returns:
        0 after the target returned; on an error the process exits with code 1.
    """
    become_subreaper()
    if watch_fd is not None:
        _die_with_launcher(job_dir, watch_fd)
    job = pickle.loads((job_dir / "job.pkl").read_bytes())
    for entry in reversed(job["sys_path"]):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    result_file = job_dir / f"result-{process_index}.pkl"
    try:
        _write(job_dir / f"joining-{process_index}")
        _join_cluster(job, process_index)
        _write(job_dir / f"joined-{process_index}")
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
        _write(result_file, pickle.dumps(("error", report)))
        kill_descendants(os.getpid())
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)  # skip the shutdown barrier, which would wait for the other processes
    _write(result_file, record)
    import jax

    jax.distributed.shutdown()
    kill_descendants(os.getpid())
    return 0


if __name__ == "__main__":
    watch = int(sys.argv[3]) if len(sys.argv) > 3 else None
    sys.exit(main(Path(sys.argv[1]), int(sys.argv[2]), watch))
