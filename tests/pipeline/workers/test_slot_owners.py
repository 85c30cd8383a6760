"""Slot files are deleted only once their owner is proven gone, by the lock it held for
its life: never those of a live pipeline whose pid this process cannot see (another PID
namespace sharing /dev/shm), and soon after a pipeline's process ends or runs another
program (exec), by its workers or the next start."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _support.processes import write_script

from datarax.pipeline.workers._owners import shared_folder, sweep
from datarax.pipeline.workers._slots import Slots

INVISIBLE_PID = (1 << 22) + 12_345  # above the largest pid Linux hands out

HOLDER = """
import fcntl, os, sys
folder, owner = sys.argv[1], sys.argv[2]
lock = os.open(os.path.join(folder, owner + ".lock"), os.O_RDWR | os.O_CREAT | os.O_EXCL)
fcntl.flock(lock, fcntl.LOCK_EX)
open(os.path.join(folder, owner + "-abc-slot1234"), "wb").write(bytes(4096))
print("holding", flush=True)
sys.stdin.readline()
"""


def _names(start: str) -> list[str]:
    return sorted(name for name in os.listdir(shared_folder()) if name.startswith(start))


def _wait_until_none(start: str, within_s: float = 10.0) -> list[str]:
    """The files named `start`... still there after `within_s` (none: returns at once)."""
    deadline = time.monotonic() + within_s
    while _names(start) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _names(start)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="flock and fork of POSIX systems")
def test_a_live_owner_whose_pid_is_not_visible_here_keeps_its_files() -> None:
    """What a pipeline in another PID namespace looks like from here: a pid no process
    here has, its lock held. Its files stay through a start and a sweep, and go once
    its lock is free."""
    owner = f"datarax-slots-{INVISIBLE_PID}-12345-feedbeef"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, shared_folder(), owner],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "holding\n"
        made = [f"{owner}-abc-slot1234", f"{owner}.lock"]
        assert _names(owner) == made
        Slots().close()  # a new pipeline's start sweeps
        sweep()
        assert _names(owner) == made, "a live owner's files were deleted"
        holder.communicate("go on\n", timeout=30)
        assert holder.returncode == 0
        sweep()
        assert _names(owner) == []
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=10)
        for name in _names(owner) if owner else []:
            Path(shared_folder(), name).unlink(missing_ok=True)


OTHER_NAMESPACE = """
import sys
import numpy as np
from datarax.pipeline import Pipeline
from datarax.pipeline.workers._owners import this_owner
if __name__ == "__main__":
    pipeline = Pipeline(source={"x": np.arange(64.0)}, batch_size=8, workers=2)
    epoch = [batch["x"].sum() for batch in pipeline]
    print(this_owner(), flush=True)
    sys.stdin.readline()  # meanwhile the test starts a pipeline out here
    again = [batch["x"].sum() for batch in pipeline]
    print("same batches" if again == epoch else "other batches", flush=True)
"""
UNSHARE = ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"]


def _unshare_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    try:
        done = subprocess.run([*UNSHARE, "true"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@pytest.mark.skipif(not _unshare_works(), reason="needs unshare and user+PID namespaces")
def test_a_pipeline_in_another_pid_namespace_keeps_its_files_through_our_start(
    tmp_path: Path,
) -> None:
    script, env = write_script(tmp_path, OTHER_NAMESPACE)
    inside = subprocess.Popen(
        [*UNSHARE, sys.executable, str(script)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert inside.stdout is not None
        owner = inside.stdout.readline().strip()
        assert owner.startswith("datarax-slots-"), owner
        theirs = _names(owner)
        assert len(theirs) > 0, "the pipeline in the other namespace made no slot file"
        Slots().close()  # our start sweeps /dev/shm, which the namespaces share
        assert _names(owner) == theirs, "our start deleted a live pipeline's files"
        said, errors = inside.communicate("go on\n", timeout=120)
        assert inside.returncode == 0 and said.strip() == "same batches", errors[-2000:]
        assert _wait_until_none(owner) == []  # and once it ended, nothing is left
    finally:
        if inside.poll() is None:
            inside.kill()
            inside.wait(timeout=10)


EXECS = """
import os, sys
import numpy as np
from datarax.pipeline import Pipeline
from datarax.pipeline.workers._owners import this_owner
if __name__ == "__main__":
    pipeline = Pipeline(source={"x": np.arange(64.0)}, batch_size=8, workers=2)
    kept = list(pipeline)
    print(this_owner(), flush=True)
    waits = "import sys; print('new program', flush=True); sys.stdin.readline()"
    os.execv(sys.executable, [sys.executable, "-c", waits])
"""


def test_after_exec_the_old_programs_files_go_while_the_new_one_runs(tmp_path: Path) -> None:
    """exec keeps the pid and its start time: only the freed lock says the files'
    pipeline is gone. Its workers delete them."""
    script, env = write_script(tmp_path, EXECS)
    child = subprocess.Popen(
        [sys.executable, str(script)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert child.stdout is not None
        owner = child.stdout.readline().strip()
        assert owner.startswith(f"datarax-slots-{child.pid}-"), owner
        assert child.stdout.readline() == "new program\n"
        assert _wait_until_none(owner) == [], "the files outlived their program"
        assert child.poll() is None  # the new program still runs, under the same pid
        child.communicate("done\n", timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)


HOLDS_THEN_EXECS = """
import os, sys
from datarax.pipeline.workers._owners import shared_folder, this_owner
owner = this_owner()
open(os.path.join(shared_folder(), owner + "abc-slot1234"), "wb").write(bytes(4096))
print(owner, flush=True)
os.execv(sys.executable, [sys.executable, "-c", "import sys; sys.stdin.readline()"])
"""


def test_a_lock_does_not_survive_exec_so_the_next_start_deletes_the_files(
    tmp_path: Path,
) -> None:
    """No worker here: the next start's sweep is what deletes them."""
    script, env = write_script(tmp_path, HOLDS_THEN_EXECS)
    child = subprocess.Popen(
        [sys.executable, str(script)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    owner = ""
    try:
        assert child.stdout is not None
        owner = child.stdout.readline().strip()
        assert owner.startswith("datarax-slots-") and _names(owner), owner
        deadline = time.monotonic() + 10
        while _names(owner) and time.monotonic() < deadline:  # once exec has happened
            Slots().close()
            time.sleep(0.05)
        assert _names(owner) == [] and child.poll() is None
        child.communicate("done\n", timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)
        for name in _names(owner) if owner else []:
            Path(shared_folder(), name).unlink(missing_ok=True)
