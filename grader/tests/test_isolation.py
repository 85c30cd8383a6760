"""What keeps a graded kernel from the grader and from the next kernel, piece by piece:
the namespaces' root, the seccomp filter, the kernel's environment and its library copy."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import datarax
import datarax_course
import datarax_grader
from datarax_course.grading import keys_file
from datarax_grader import _sandbox, _seccomp
from datarax_grader._integrity import Library
from datarax_grader._submission import kernel_environment

SCRIPT = Path(_sandbox.__file__)
LOOK_AROUND = """\
import json, os, signal, sys
seen = {"uid": os.getuid(), "ppid": os.getppid(), "root": sorted(os.listdir("/"))}
for place in sys.argv[1:]:
    try:
        open(os.path.join(place, "written"), "w").close()
        seen[place] = "written"
    except OSError as error:
        seen[place] = type(error).__name__
seen["hidden"] = os.listdir(sys.argv[-2])
seen["private"] = os.path.exists(sys.argv[-1])
print(json.dumps(seen))
"""


def _probe() -> str | None:
    with tempfile.TemporaryDirectory(prefix="probe-") as folder:
        return _sandbox.probe(sys.executable, SCRIPT, Path(folder))


WHY_NOT = _probe()


def test_the_probe_says_why_not_or_runs_a_command_inside() -> None:
    """On this machine one of the two holds, and the grader reports which."""
    assert WHY_NOT is None or (isinstance(WHY_NOT, str) and WHY_NOT.strip())


def test_a_python_reached_through_links_is_run_by_a_path_the_kernels_root_holds(
    tmp_path: Path,
) -> None:
    """The root binds folders at their resolved paths, so the folders of the Python's path
    are resolved, and its own name, a virtualenv's link to its interpreter, kept."""
    real = tmp_path / "real" / "bin"
    real.mkdir(parents=True)
    (real / "python").symlink_to(sys.executable)
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    assert _sandbox.reachable(str(tmp_path / "linked" / "bin" / "python")) == str(
        (tmp_path / "real" / "bin").resolve() / "python"
    )


PROBE_LINKED = """
import pathlib, sys, tempfile
from datarax_grader import _sandbox
with tempfile.TemporaryDirectory() as folder:
    print(_sandbox.probe(sys.executable, pathlib.Path(_sandbox.__file__), pathlib.Path(folder)))
"""


def test_a_virtualenv_linked_from_elsewhere_still_gets_the_namespaces(tmp_path: Path) -> None:
    """A grader whose Python lies in a linked folder (a virtualenv linked from elsewhere)
    runs its kernels in namespaces wherever its own Python does, not behind the weaker
    seccomp filter."""
    if WHY_NOT is not None:
        pytest.skip(f"no namespaces on this machine: {WHY_NOT}")
    linked = tmp_path / "linked-env"
    linked.symlink_to(Path(sys.prefix))
    python = linked / Path(sys.executable).relative_to(sys.prefix)
    done = subprocess.run(
        [str(python), "-c", PROBE_LINKED], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None", done.stdout


def test_inside_the_namespaces_only_the_submissions_folders_can_be_written(
    tmp_path: Path,
) -> None:
    if WHY_NOT is not None:
        assert "namespace" in WHY_NOT or WHY_NOT  # reported; the grader falls back
        return
    (tmp_path / "root").mkdir()
    writable, library = tmp_path / "scratch", tmp_path / "lib"
    secret = library / "secret"
    for folder in (writable, secret):
        folder.mkdir(parents=True)
    (secret / "answer_key.py").write_text("KEY = 42\n")
    script = writable / "look.py"
    script.write_text(LOOK_AROUND)
    private = tmp_path / "private.txt"  # beside the bound folders, not bound itself
    private.write_text("the teacher's")
    argv = [sys.executable, "-I", str(script), str(writable), str(library), "/usr"]
    argv += [str(secret), str(private)]
    plan = _sandbox.plan_for(
        tmp_path / "root",
        read_only=[library],
        writable=[writable],
        hidden=[secret, Path.home()],
        argv=argv,
        skip=[],
    )
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(dataclasses.asdict(plan)))
    command = _sandbox.command(sys.executable, SCRIPT, plan_file)
    command = [part.replace("{connection_file}", "-") for part in command]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen[str(writable)] == "written"
    assert seen[str(library)] == seen["/usr"] == "OSError"  # read-only
    assert seen["hidden"] == [] and not seen["private"]  # out of sight
    assert seen["ppid"] == 1 and seen["uid"] != 0  # init of its own, a user without a name


FILTERED = """\
import json, os, signal, subprocess, sys
sys.path.insert(0, sys.argv[1])
from datarax_grader import _seccomp
parent = os.getppid()
_seccomp.protect([parent])
outcomes = []
for target in (parent, -os.getpgid(parent), -1):
    try:
        os.kill(target, signal.SIGCONT)
        outcomes.append("sent")
    except PermissionError:
        outcomes.append("refused")
helper = subprocess.Popen(["sleep", "30"])
helper.kill()
outcomes.append(f"own child: {helper.wait()}")
print(json.dumps(outcomes))
"""


def test_behind_the_filter_a_process_cannot_signal_or_stop_those_it_protects() -> None:
    if os.uname().machine not in ("x86_64", "aarch64"):  # the grader says it has no filter
        with pytest.raises(OSError):
            _seccomp.protect([os.getpid()])
        return
    package_parent = str(Path(datarax.__file__).parents[1])
    done = subprocess.run(
        [sys.executable, "-c", FILTERED, package_parent],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["refused", "refused", "refused", "own child: -9"]


def test_the_kernels_environment_holds_nothing_of_the_teachers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", "unix:path=/run/user/1000/bus")
    monkeypatch.setenv("SSH_AUTH_SOCK", "/tmp/ssh-agent")
    env = kernel_environment(tmp_path)
    assert not {"DBUS_SESSION_BUS_ADDRESS", "SSH_AUTH_SOCK", "DISPLAY"} & set(env)
    for name in ("HOME", "IPYTHONDIR", "JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "TMPDIR"):
        assert Path(env[name]).is_relative_to(tmp_path), (name, env[name])


def test_a_kernel_imports_the_course_from_its_copy_alone(tmp_path: Path) -> None:
    """What the copy leaves out (the answer keys) is not found in a checkout either, which
    an editable install's finder would otherwise search."""
    from datarax_grader._kernel_boot import CopyOnly

    packages = [Path(m.__file__ or "").parent for m in (datarax, datarax_course, datarax_grader)]
    Library.of(packages, left_out=(keys_file().name,)).write(tmp_path)
    finder = CopyOnly(str(tmp_path))
    course = [str(tmp_path / "datarax_course")]
    assert finder.find_spec("datarax_course", None).origin.startswith(str(tmp_path))
    assert finder.find_spec("datarax_course._cases", course).origin.startswith(str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match=r"datarax_course\._keys"):
        finder.find_spec("datarax_course._keys", course)
    assert finder.find_spec("datarax.exercises", [str(tmp_path / "datarax")]) is None
    assert finder.find_spec("numpy", None) is None


def test_each_library_copy_is_fresh_read_only_and_checked(tmp_path: Path) -> None:
    packages = [Path(m.__file__ or "").parent for m in (datarax, datarax_course, datarax_grader)]
    library = Library.of(packages, left_out=(keys_file().name,))
    first, second = tmp_path / "first", tmp_path / "second"
    library.write(first)
    grading = first / "datarax_course" / "_grading.py"
    assert stat.S_IMODE(grading.stat().st_mode) == 0o444
    grading.chmod(0o644)
    grading.write_text("spoiled = True\n")  # what a kernel behind the filter could do
    library.write(second)
    assert "spoiled" not in (second / "datarax_course" / "_grading.py").read_text()
    assert (second / "datarax_grader" / "_kernel_boot.py").is_file()
    assert not (second / "datarax_course" / keys_file().name).exists()
    tampered = dataclasses.replace(library, digest="0" * 64)
    with pytest.raises(RuntimeError, match="does not match"):
        tampered.write(tmp_path / "third")
