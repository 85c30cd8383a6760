"""Whose slot files are whose, and when an owner is gone: proven by a lock, not guessed.

Slot files (`datarax.pipeline.workers._slots`) lie in a folder other processes share:
``/dev/shm``, which containers with a shared IPC namespace share while each has PIDs of
its own, so a pid in a file's name says nothing certain about its owner. Instead each
process that owns slot files holds an exclusive ``flock`` on a lock file of its own,
``datarax-slots-<pid>-<start>-<token>.lock`` (`this_owner`, from its first set of slots
to its end), and every slot file it owns is named starting with
``datarax-slots-<pid>-<start>-<token>-``. The system releases the lock when the process
ends, however it ends, and when it replaces its program (``exec``: the lock file is
opened close-on-exec); a process forked from it closes its copy at once. So:

- `sweep` deletes the files of every owner whose lock it can take, then that lock file,
  and the slot files whose lock file is gone (a worker may make one after its owner's
  files were swept); it never deletes a file whose owner holds its lock, whatever PID
  namespace that owner runs in;
- a worker whose pipeline's process is gone or runs another program waits until that
  process's lock is free, at most a few seconds, then sweeps (`sweep_after`);
- a process that exits deletes its lock file once none of its slot files is left.

Names of another form are left alone. Earlier releases named their files
``datarax-batch-...`` and judged owners by pid, so the two never delete each other's
files. Without ``flock`` (Windows, where there are no workers) nothing is swept.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import secrets
import tempfile
import threading
import time
from dataclasses import dataclass

from datarax._syscompat import proc_stat

try:
    import fcntl
except ImportError:  # Windows: no flock, so no owner can be proven gone
    fcntl = None

PREFIX = "datarax-slots-"
_LOCK = ".lock"
_SLOT_FIELDS = 5  # <pid>-<start>-<token>-<set>-<random>
_POLL_S = 0.01  # how often a waiting worker tries its pipeline's lock


def shared_folder() -> str:
    """Where slot files go: /dev/shm (memory) where it exists, else the temp folder."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        return "/dev/shm"
    return tempfile.gettempdir()


def pid_prefix(pid: int) -> str:
    """The start of the names of the files owned by process `pid` (its pid and start
    time, as this process sees them; read while it lives).

    Example:
        >>> pid_prefix(os.getpid()).startswith(f"datarax-slots-{os.getpid()}-")
        True
    """
    stat = proc_stat(pid)
    return f"{PREFIX}{pid}-{0 if stat is None else stat.start_time}-"


@dataclass(frozen=True)
class _Owner:
    pid: int
    prefix: str  # of its slot files' names
    lock: str  # the lock file's path
    descriptor: int | None  # holding the lock (None: no flock here)


_state: dict[str, _Owner] = {}
_making = threading.Lock()


def this_owner() -> str:
    """The start of the names of this process's slot files; its lock is taken (and its
    lock file made) at the first call in each process.

    Example:
        >>> this_owner() == this_owner()
        True
    """
    with _making:
        owner = _state.get("owner")
        if owner is None or owner.pid != os.getpid():
            owner = _state["owner"] = _take_lock()
        return owner.prefix


def _same_file(descriptor: int, path: str) -> bool:
    try:
        return os.path.samestat(os.fstat(descriptor), os.stat(path))
    except OSError:
        return False


def _take_lock() -> _Owner:
    start = pid_prefix(os.getpid())
    while True:
        prefix = f"{start}{secrets.token_hex(4)}-"
        lock = os.path.join(shared_folder(), prefix[:-1] + _LOCK)
        if fcntl is None:
            return _Owner(os.getpid(), prefix, lock, None)
        descriptor = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)  # close-on-exec
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        if _same_file(descriptor, lock):
            return _Owner(os.getpid(), prefix, lock, descriptor)
        os.close(descriptor)  # swept between its making and its locking: another name


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):  # deleted already (by a worker, or a sweep)
        os.unlink(path)


def _files_of(prefix: str) -> list[str]:
    return glob.glob(os.path.join(shared_folder(), glob.escape(prefix) + "*"))


def _try_lock(lock: str) -> int | None:
    """A descriptor holding `lock`, or None: its owner holds it (or it is gone)."""
    assert fcntl is not None
    try:
        descriptor = os.open(lock, os.O_RDONLY)
    except OSError:  # swept meanwhile, or another user's
        return None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(descriptor)
        return None
    return descriptor


def _sweep_owner(lock: str) -> int:
    """Deletes the files of the owner of `lock` if its lock can be taken; how many."""
    descriptor = _try_lock(lock)
    if descriptor is None:
        return 0
    try:
        if not _same_file(descriptor, lock):
            return 0  # swept by another process meanwhile
        files = _files_of(os.path.basename(lock)[: -len(_LOCK)] + "-")
        for path in files:
            _unlink(path)
        _unlink(lock)
        return len(files)
    finally:
        os.close(descriptor)


def sweep() -> int:
    """Deletes the slot files of every owner proven gone; returns how many."""
    if fcntl is None:
        return 0
    folder = shared_folder()
    locks = glob.glob(os.path.join(folder, PREFIX + "*" + _LOCK))
    swept = sum(_sweep_owner(lock) for lock in locks)
    for path in glob.glob(os.path.join(folder, PREFIX + "*")):
        fields = os.path.basename(path)[len(PREFIX) :].split("-")
        if path.endswith(_LOCK) or len(fields) != _SLOT_FIELDS:
            continue  # a lock, or a name this module did not make
        # Its lock file was made before it: gone now, its owner was proven gone.
        if not os.path.exists(os.path.join(folder, PREFIX + "-".join(fields[:3]) + _LOCK)):
            _unlink(path)
            swept += 1
    return swept


def _held(prefix: str) -> bool:
    """Whether an owner whose names start with `prefix` holds its lock."""
    for lock in _files_of(prefix):
        if lock.endswith(_LOCK):
            descriptor = _try_lock(lock)
            if descriptor is None and os.path.exists(lock):
                return True
            if descriptor is not None:
                os.close(descriptor)  # only a look: released at once
    return False


def sweep_after(prefix: str, wait_s: float) -> int:
    """Waits until no owner whose names start with `prefix` (a `pid_prefix`) holds its
    lock, at most `wait_s` seconds, then sweeps; returns how many files went."""
    if fcntl is None:
        return 0
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and _held(prefix):
        time.sleep(_POLL_S)
    return sweep()


def _forget_in_child() -> None:
    """In a forked child: the parent's lock is the parent's alone."""
    global _making
    _making = threading.Lock()
    owner = _state.pop("owner", None)
    if owner is not None and owner.descriptor is not None:
        with contextlib.suppress(OSError):
            os.close(owner.descriptor)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


@atexit.register  # registered on import, before the worker pools': so it runs after them
def _leave() -> None:
    """At exit: this process's lock file goes, once none of its slot files is left."""
    owner = _state.get("owner")
    if owner is not None and owner.pid == os.getpid() and not _files_of(owner.prefix):
        _unlink(owner.lock)
