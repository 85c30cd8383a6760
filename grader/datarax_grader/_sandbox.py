"""A graded notebook's kernel in namespaces of its own, where Linux lets a user make them.

The grader starts the kernel as ``unshare --user --map-root-user --mount --pid --net
--fork --kill-child python -I _sandbox.py PLAN CONNECTION_FILE``. This file then runs as
the first process of the new PID namespace, root of a user namespace of its own (which
is the grader's user, nothing more), and before anything of the student's runs it:

1. builds a new root: an empty file system holding, read-only, the system folders
   (``/usr``, ``/etc``, ``/lib``...), ``/sys`` and the Python installation the kernel
   runs (`Plan.read_only`), a fresh ``/proc`` of the new PID namespace, a minimal
   ``/dev``, and writable only an empty ``/tmp``, ``/dev/shm`` and the submission's own
   folders (`Plan.writable`: its scratch folder, its home, the kernel's sockets);
   anything a bound folder holds that the kernel must not read (the grader's library)
   is covered by an empty one (`Plan.hidden`);
2. moves into that root and drops the old one (``pivot_root``), so nothing else of the
   machine (the teacher's home, the original notebooks, the submissions, the grades,
   the grader's files) is there to read or write, and raises the loopback interface of
   the new network namespace, which holds nothing else (no internet, no socket of the
   desktop);
3. starts the kernel in a further user namespace in which its user has no name and no
   capability (``unshare(CLONE_NEWUSER)``), so it can neither undo those mounts nor make
   namespaces of its own, and waits for it as the namespace's ``init``, which ignores
   the signals a process inside may send it. When the kernel ends, this process exits,
   and Linux kills every process left in the namespace.

The grader's processes are outside the PID namespace: a kernel can neither see nor
signal them. This file imports only the standard library, so it runs by path.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_RDONLY = 2, 4, 8, 1
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18
_MNT_DETACH, _AT_RECURSIVE, _MOUNT_ATTR_RDONLY = 2, 0x8000, 1
_CLONE_NEWUSER = 0x10000000
_SYSCALLS = {  # (pivot_root, mount_setattr) by machine
    "x86_64": (155, 442),
    "aarch64": (41, 442),
}
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/sys")
_DEVICES = ("null", "zero", "full", "random", "urandom")
_PACKAGE_FOLDERS = ("site-packages", "dist-packages")
NAMESPACES = ["--user", "--map-root-user", "--mount", "--pid", "--net", "--fork", "--kill-child"]


@dataclasses.dataclass(frozen=True)
class Plan:
    """What the kernel's root holds: `root` an empty folder to build it in, folders bound
    `read_only` and `writable` at their own paths, `hidden` ones covered by an empty
    folder, and the kernel's command `argv` ("{connection_file}" in it is replaced)."""

    root: str
    read_only: list[str]
    writable: list[str]
    hidden: list[str]
    argv: list[str]


def plan_for(
    root: Path,
    *,
    read_only: list[Path],
    writable: list[Path],
    hidden: list[Path],
    argv: list[str],
    skip: list[Path],
) -> Plan:
    """The plan for a kernel running this Python: the system folders, this Python's
    installation (its prefixes and the package folders on its `sys.path`, the user's
    site-packages included; not the working folder or other entries) and `read_only`,
    except the folders in `skip` (a checkout holding the grader's library, say)."""
    places = [*_SYSTEM, sys.prefix, sys.base_prefix, sys.exec_prefix, *map(str, read_only)]
    places += [entry for entry in sys.path if Path(entry).name in _PACKAGE_FOLDERS]
    skipped = {Path(p).resolve() for p in skip}
    found: set[str] = set()
    for place in places:
        path = Path(place)
        if path.exists() and path.resolve() not in skipped:
            found.add(str(path) if path.is_symlink() and place in _SYSTEM else str(path.resolve()))
    bound: list[str] = []
    for place in sorted(found, key=len):  # a folder inside one already bound comes along
        if not any(Path(place).is_relative_to(outer) for outer in bound):
            bound.append(place)
    shown = [*bound, *map(str, writable)]
    covered = [  # only what a bound folder would show, and nothing the kernel needs
        str(place)
        for place in (Path(p).resolve() for p in hidden if Path(p).exists())
        if any(place.is_relative_to(outer) and str(place) != outer for outer in bound)
        and not any(Path(inner).is_relative_to(place) for inner in shown)
    ]
    return Plan(str(root), bound, [str(p) for p in writable], covered, argv)


def reachable(python: str) -> str:
    """`python`'s path with every link among its folders resolved, the file's own name kept.

    A kernel's root binds folders at their resolved paths (`plan_for`), so a Python
    reached through a linked folder (a virtualenv linked from elsewhere) is run by this
    path, which exists there too. The file itself stays a link where it is one: a
    virtualenv's ``bin/python`` finds its environment from where the link lies.

    Example:
        >>> reachable("/usr/bin/../bin/python3") == str(Path("/usr/bin").resolve() / "python3")
        True
    """
    path = Path(python)
    return str(path.parent.resolve() / path.name)


def command(python: str, script: Path, plan_file: Path) -> list[str]:
    """The command that runs the kernel of `plan_file` in namespaces of its own."""
    return [
        "unshare",
        *NAMESPACES,
        python,
        "-I",
        "-B",
        str(script),
        str(plan_file),
        "{connection_file}",
    ]


def probe(python: str, script: Path, folder: Path) -> str | None:
    """None when this machine runs a kernel in namespaces (tried with a command that
    writes a file in its writable folder); else why not, in one line."""
    writable = folder / "writable"
    writable.mkdir(parents=True, exist_ok=True)
    (folder / "root").mkdir(exist_ok=True)
    mark = writable / "ran"
    argv = [reachable(python), "-I", "-c", f"open({str(mark)!r}, 'w').close()"]
    plan = plan_for(
        folder / "root", read_only=[], writable=[writable], hidden=[], argv=argv, skip=[]
    )
    plan_file = folder / "plan.json"
    plan_file.write_text(json.dumps(dataclasses.asdict(plan)), encoding="utf-8")
    try:
        done = subprocess.run(
            [part.replace("{connection_file}", "-") for part in command(python, script, plan_file)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"{type(error).__name__}: {error}"
    if done.returncode == 0 and mark.exists():
        return None
    said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
    return said[:300]


# Inside the namespaces. -------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


def _mount(source: str | None, target: str, kind: str | None, flags: int, data: str = "") -> None:
    encoded = [None if part is None else part.encode() for part in (source, target, kind, data)]
    _check(_libc.mount(encoded[0], encoded[1], encoded[2], flags, encoded[3]), f"mount {target}")


class _MountAttr(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in ("set", "clear", "propagation", "userns")]


def _read_only(target: str) -> None:
    """Makes the mount at `target` and every mount under it read-only."""
    number = _SYSCALLS[os.uname().machine][1]
    attr = _MountAttr(_MOUNT_ATTR_RDONLY, 0, 0, 0)
    where = target.encode()
    _check(
        _libc.syscall(number, -100, where, _AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr)),
        f"read-only {target}",
    )


def _bind(root: str, source: str, writable: bool) -> None:
    target = root + source
    if os.path.islink(source):  # /bin -> usr/bin: the same link in the new root
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.symlink(os.readlink(source), target)
        return
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        Path(target).touch()
    _mount(source, target, None, _MS_BIND | _MS_REC)
    if not writable:
        _read_only(target)


def _build(plan: Plan) -> None:
    root = plan.root
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    _mount("tmpfs", root, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=755,size=16m")
    os.makedirs(root + "/dev")
    _mount("tmpfs", root + "/dev", "tmpfs", _MS_NOSUID | _MS_NOEXEC, "mode=755,size=1m")
    for name in _DEVICES:
        Path(root + "/dev/" + name).touch()
        _mount("/dev/" + name, root + "/dev/" + name, None, _MS_BIND)
    for name, target in (("fd", "fd"), ("stdin", "fd/0"), ("stdout", "fd/1"), ("stderr", "fd/2")):
        os.symlink("/proc/self/" + target, root + "/dev/" + name)
    for place in ("/tmp", "/dev/shm"):
        os.makedirs(root + place)
        _mount("tmpfs", root + place, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=1777,size=512m")
    for place in plan.read_only:
        _bind(root, place, writable=False)
    os.makedirs(root + "/proc", exist_ok=True)
    _mount("proc", root + "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    for place in plan.writable:
        _bind(root, place, writable=True)
    for place in plan.hidden:
        if os.path.isdir(root + place):
            _mount("tmpfs", root + place, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=555,size=4k")
    old = root + "/.old-root"
    os.makedirs(old)
    number = _SYSCALLS[os.uname().machine][0]
    _check(_libc.syscall(number, root.encode(), old.encode()), "pivot_root")
    os.chdir("/")
    _check(_libc.umount2(b"/.old-root", _MNT_DETACH), "unmount the old root")
    os.rmdir("/.old-root")
    _mount(None, "/", None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)


def _loopback_up() -> None:
    import fcntl
    import socket
    import struct

    get_flags, set_flags, up = 0x8913, 0x8914, 1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(probe, get_flags, request)[:18])[1]
        fcntl.ioctl(probe, set_flags, struct.pack("16sH14x", b"lo", flags | up))


def main(argv: list[str]) -> int:
    """``_sandbox.py PLAN_FILE CONNECTION_FILE``: builds the root, runs the kernel as a
    nameless user, and waits for it (the namespace's init)."""
    plan = Plan(**json.loads(Path(argv[0]).read_text(encoding="utf-8")))
    kernel = [part.replace("{connection_file}", argv[1]) for part in plan.argv]
    try:
        _build(plan)
        _loopback_up()
    except OSError as error:
        print(f"the kernel's namespaces could not be set up: {error}", file=sys.stderr)
        return 70
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(number, signal.SIG_IGN)
    child = os.fork()
    if child == 0:
        for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
            signal.signal(number, signal.SIG_DFL)
        if _libc.unshare(_CLONE_NEWUSER) != 0:
            os._exit(71)
        os.execv(kernel[0], kernel)
    while True:  # reap every process that ends in the namespace; leave with the kernel
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return 0
        if pid == child:
            return os.waitstatus_to_exitcode(status) & 0xFF


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
