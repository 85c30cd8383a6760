"""Workers started from a script: a missing main guard and JAX in a worker are clear errors.

A worker process imports the script of the pipeline's process again as it starts, so a
script whose top-level code iterates a pipeline with workers would start workers in
every worker. A worker runs JAX on CPU only (the pipeline's process holds the
accelerator), and a host stage must return numpy. This machine has no accelerator: an
accelerator host is simulated by the JAX platform the pipeline's process reports.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _support.processes import script_environment
from _support.worker_stages import scale, to_device
from jax.sharding import NamedSharding, PartitionSpec

from datarax.errors import (
    NoMainGuardError,
    NotPicklableError,
    WorkerArrayError,
    WorkerDeviceError,
)
from datarax.pipeline import Pipeline
from datarax.pipeline.workers import _guards as _worker_checks
from datarax.pipeline.workers import _process
from datarax.pipeline.workers._guards import (
    NO_MAIN_GUARD_EXIT,
    check_jax_in_worker,
    importing_main,
    leave_if_importing_main,
    raise_if_no_main_guard,
    run_jax_on_cpu,
)
from datarax.sharding import ArraySharder

LINUX_ONLY = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the process tree is read from /proc"
)
GUARD = 'if __name__ == "__main__":'
# A script's definitions: a stage that says where JAX ran as the worker imported the
# script and where it runs as the stage runs.
DEFINITIONS = """
import jax
import numpy as np
from datarax.pipeline import Pipeline

IMPORTED_ON = str(jax.config.jax_platforms)  # in a worker: as it imports this script


def where_jax_runs(batch):
    rows = len(batch["x"])
    return {
        **batch,
        "imported_on": np.full(rows, IMPORTED_ON),
        "runs_on": np.full(rows, jax.default_backend()),
    }

"""
RUN = """
pipeline = Pipeline(source={"x": np.arange(32)}, stages=[where_jax_runs], batch_size=8, workers=2)
batches = list(pipeline)
rows = sorted(int(x) for batch in batches for x in batch["x"])
seen = {str(place) for b in batches for place in (*b["imported_on"], *b["runs_on"])}
print(rows == list(range(32)), *sorted(seen))
"""


def _session_processes(session: int) -> list[int]:
    """The live processes of `session` (its leader's pid), from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # not a process, or gone meanwhile
        if int(fields[3]) == session and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def _run_script(tmp_path: Path, text: str, timeout_s: float = 90) -> tuple[int, str, str, list]:
    """Runs `text` as a script in its own session: its exit code, stdout and stderr, and
    the processes of its session still running 10 s after it ended."""
    script = tmp_path / "train.py"
    script.write_text(text)
    env = {key: value for key, value in script_environment().items() if key != "JAX_PLATFORMS"}
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    script_process = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        out, errors = script_process.communicate(timeout=timeout_s)
    finally:
        if script_process.poll() is None:
            os.killpg(script_process.pid, signal.SIGKILL)
            script_process.communicate()
    deadline = time.monotonic() + 10
    left = _session_processes(script_process.pid)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = _session_processes(script_process.pid)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return script_process.returncode, out, errors, left


@LINUX_ONLY
def test_a_script_without_the_main_guard_is_an_error_that_names_the_fix(tmp_path: Path) -> None:
    """Each worker re-runs the script, which would start workers again: each leaves
    instead, and the script gets the error, within seconds and leaving no process."""
    code, out, errors, left = _run_script(tmp_path, DEFINITIONS + RUN)
    assert code != 0, (out, errors)
    assert "The pipeline's worker processes ended as they started" in errors, errors
    assert f"under `{GUARD}`" in errors and "or use workers=0" in errors, errors
    assert "train.py" in errors.rsplit("NoMainGuardError:", 1)[1]  # the script is named
    assert f"exits with code {NO_MAIN_GUARD_EXIT}" in errors  # each worker's own word
    assert "worker process died" not in errors
    assert not left, f"processes left behind: {left}"


@LINUX_ONLY
def test_under_the_main_guard_the_script_runs_and_its_workers_run_jax_on_cpu(
    tmp_path: Path,
) -> None:
    """The same script with its run under the guard, and JAX free to pick any platform
    (no JAX_PLATFORMS): workers run JAX on CPU, even as they import the script."""
    guarded = DEFINITIONS + GUARD + textwrap.indent(RUN, "    ")
    code, out, errors, left = _run_script(tmp_path, guarded)
    assert code == 0, errors
    assert out.split() == ["True", "cpu"], (out, errors)
    assert not left, f"processes left behind: {left}"


def test_a_process_leaves_only_while_importing_its_parents_script(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert not importing_main()
    leave_if_importing_main("iterates")  # this process is no child: nothing happens
    process = multiprocessing.current_process()
    monkeypatch.setattr(process, "_inheriting", True, raising=False)  # as multiprocessing sets it
    assert importing_main()


def test_the_exit_code_of_a_worker_that_left_is_the_error_naming_the_guard() -> None:
    broken = RuntimeError("A process in the process pool was terminated abruptly")
    raise_if_no_main_guard([-15, None, 3], broken)  # another death: not this error
    with pytest.raises(
        NoMainGuardError, match=f"ended as they started.*{GUARD}.*workers=0"
    ) as raised:
        raise_if_no_main_guard([-15, NO_MAIN_GUARD_EXIT], broken)
    assert raised.value.__cause__ is broken
    assert raised.value.exit_codes == [-15, NO_MAIN_GUARD_EXIT]


@pytest.fixture
def worker_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """What `run_jax_on_cpu` sets in a worker, restored after the test; JAX has started
    its backend here already, so its platform is not changed."""
    jax.devices()
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    monkeypatch.setattr(_worker_checks, "_parent_backend", None)
    monkeypatch.setattr(_worker_checks, "_on_cpu", False)


@pytest.mark.usefixtures("worker_state")
def test_jax_arrays_from_a_stage_on_an_accelerator_host_name_the_stage_and_the_fix() -> None:
    run_jax_on_cpu("tpu")  # what a worker does first when the pipeline's process is on TPU
    assert os.environ["JAX_PLATFORMS"] == "cpu"
    pattern = (
        r"stages\[1\] returned jax.Arrays in a pipeline worker process \(on CPU there\).*"
        r"this host's TPU belongs to the pipeline's process.*CPU only.*numpy.*device_stages"
    )
    with pytest.raises(WorkerArrayError, match=pattern) as raised:
        check_jax_in_worker("stages[1]", {"x": np.ones(2), "y": jnp.ones(2)})
    assert raised.value.stage == "stages[1]"
    check_jax_in_worker("stages[1]", {"x": np.ones(2), "label": [b"a", b"b"]})  # host data


@pytest.mark.usefixtures("worker_state")
def test_jax_started_on_an_accelerator_in_a_worker_names_what_started_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_jax_on_cpu("tpu")
    check_jax_in_worker("stages[0]", {"x": np.ones(2)})  # JAX on CPU here: fine
    assert _worker_checks._on_cpu  # and so it stays: not asked again
    monkeypatch.setattr(_worker_checks, "_on_cpu", False)  # a worker where JAX ...
    monkeypatch.setattr(_worker_checks, "started_platform", lambda: "tpu")  # ... opened a TPU
    pattern = r"stages\[0\] started JAX on TPU in a pipeline worker.*CPU only.*TPU.*numpy"
    with pytest.raises(WorkerDeviceError, match=pattern) as raised:
        check_jax_in_worker("stages[0]", {"x": np.ones(2)})
    assert (raised.value.stage, raised.value.platform) == ("stages[0]", "tpu")
    with pytest.raises(RuntimeError, match=r"the worker's start \(the script's top-level"):
        check_jax_in_worker(_worker_checks.AT_START)


def test_a_worker_of_a_pipeline_on_an_accelerator_names_the_stage_that_used_jax(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A real worker, told by the pipeline's process that it runs on TPU."""
    monkeypatch.setattr(_process, "started_platform", lambda: "tpu")
    pipeline = Pipeline(
        source={"x": np.arange(16)}, stages=[scale, to_device], batch_size=8, workers=1
    )
    with pytest.raises(WorkerArrayError, match=r"returned jax.Arrays.*TPU belongs") as raised:
        next(iter(pipeline))
    assert raised.value.stage == "stages[1]"
    assert "JAX runs on CPU only" in " ".join(getattr(raised.value, "__notes__", []))


def test_the_docstrings_placing_stage_with_workers_says_to_pass_sharding_instead() -> None:
    """``stages=[lambda b: sharder.shard(b, sharding)]``, the form the Pipeline docstring
    shows, with workers: the error names what it reads and the way that works."""
    sharding = NamedSharding(jax.make_mesh((8,), ("data",)), PartitionSpec("data"))
    sharder = ArraySharder()
    source = {"x": np.arange(64)}
    pattern = (
        r"stages\[0\] reads sharder \(ArraySharder\) and sharding \(NamedSharding\), "
        r"which belong to this process's devices.*Pass sharding= to the Pipeline instead"
    )
    with pytest.raises(NotPicklableError, match=pattern) as raised:
        Pipeline(
            source=source, stages=[lambda b: sharder.shard(b, sharding)], batch_size=8, workers=2
        )
    assert "top-level function" not in str(raised.value)
    # The way out it names, with workers, places the batches the stage placed here.
    placed = list(Pipeline(source=source, batch_size=8, sharding=sharding, workers=2))
    here = list(
        Pipeline(source=source, stages=[lambda b: sharder.shard(b, sharding)], batch_size=8)
    )
    assert [b["x"].sharding for b in placed] == [b["x"].sharding for b in here]
    assert [b["x"].tolist() for b in placed] == [b["x"].tolist() for b in here]
