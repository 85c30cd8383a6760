"""Keeping a kernel's hands off the grader where no namespace can: a seccomp filter.

Where Linux does not let the grader's user make namespaces, a kernel runs as the
teacher, and Linux lets a process signal any other process of its user. Before the
student's first cell, the kernel therefore installs a seccomp filter on itself, which
every process it starts inherits and none can remove (`protect`). The filter refuses
(``EPERM``):

- a signal sent to the protected processes (the grader and its runner), their process
  groups or every process at once (``kill``, ``tgkill``, ``rt_sigqueueinfo``,
  ``rt_tgsigqueueinfo``, and ``prlimit64``, which could set their CPU limit);
- ``tkill``, ``pidfd_send_signal``, ``pidfd_getfd``, ``ptrace`` and
  ``process_vm_readv``/``writev``, which name their target in ways the filter cannot
  read, and ``fcntl``/``ioctl`` that would direct a file's signals to another process;
- any system call of another architecture's table (32-bit calls on x86_64).

What it cannot refuse is what goes through another process that the filter does not
bind: a service of the desktop (``systemd-run --user``, ``at``) started over its socket
runs as the teacher, outside the filter; docs/teaching.md lists what remains. This file
imports only the standard library; the filter is for x86_64 and aarch64 Linux.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import struct

_ARCHES = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_NUMBERS = {  # name: (x86_64, aarch64)
    "kill": (62, 129),
    "tgkill": (234, 131),
    "rt_sigqueueinfo": (129, 138),
    "rt_tgsigqueueinfo": (297, 240),
    "prlimit64": (302, 261),
    "tkill": (200, 130),
    "ptrace": (101, 117),
    "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),
    "pidfd_send_signal": (424, 424),
    "pidfd_getfd": (438, 438),
    "fcntl": (72, 25),
    "ioctl": (16, 29),
}
_AIMED = ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "prlimit64")  # pid first
_REFUSED = ("tkill", "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_send_signal")
_REFUSED += ("pidfd_getfd",)
_REDIRECTS = {"fcntl": (8, 15), "ioctl": (0x8901, 0x8902)}  # F_SETOWN(_EX); FIOSETOWN, SIOCSPGRP
_LOAD, _EQUAL, _AT_LEAST, _RETURN = 0x20, 0x15, 0x35, 0x06
_ALLOW, _REFUSE = 0x7FFF0000, 0x00050000 | errno.EPERM
_X32 = 0x40000000


def _program(arch: int, machine: int, targets: list[int]) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jump if true, jump if false, constant) instructions."""
    numbers = {name: pair[machine] for name, pair in _NUMBERS.items()}
    words = sorted({value & 0xFFFFFFFF for value in targets})
    checks = [(numbers[name], 16, words) for name in _AIMED]  # args[0], low half
    checks += [(numbers[name], 24, list(cmds)) for name, cmds in _REDIRECTS.items()]  # args[1]
    head: list[tuple[int, int, int, int]] = [(_LOAD, 0, 0, 4), (_EQUAL, 1, 0, arch)]
    head.append((_RETURN, 0, 0, _REFUSE))  # another architecture's system call
    head.append((_LOAD, 0, 0, 0))
    if machine == 0:
        head.append((_AT_LEAST, 0, 1, _X32))
        head.append((_RETURN, 0, 0, _REFUSE))
    for name in _REFUSED:
        head += [(_EQUAL, 0, 1, numbers[name]), (_RETURN, 0, 0, _REFUSE)]
    blocks = [[(_LOAD, 0, 0, offset)] for _, offset, _ in checks]
    for block, (_, _, values) in zip(blocks, checks, strict=True):
        for value in values:
            block += [(_EQUAL, 0, 1, value), (_RETURN, 0, 0, _REFUSE)]
        block.append((_RETURN, 0, 0, _ALLOW))
    dispatch_length = 2 * len(checks) + 1
    program = list(head)
    offsets = [sum(len(b) for b in blocks[:i]) for i in range(len(blocks))]
    for i, (number, _, _) in enumerate(checks):
        # after this jump: the rest of the dispatch, then blocks[:i]
        skip = (dispatch_length - 2 * i - 1) + offsets[i]
        program += [(_EQUAL, 0, 1, number), (0x05, 0, 0, skip - 1)]  # 0x05: jump always
    program.append((_RETURN, 0, 0, _ALLOW))
    for block in blocks:
        program += block
    return program


class _Filter(ctypes.Structure):
    _fields_ = [("length", ctypes.c_ushort), ("instructions", ctypes.c_void_p)]


def protect(pids: list[int]) -> None:
    """Installs the filter on this process (and what it starts): `pids`, their process
    groups and "every process" cannot be signalled from here on.

    Raises:
        OSError: the filter could not be installed (not Linux, or another machine).
    """
    machine = os.uname().machine
    if machine not in _ARCHES:
        raise OSError(errno.ENOSYS, f"no seccomp filter for {machine}")
    targets = [-1]
    for pid in pids:
        targets.append(pid)
        with contextlib.suppress(OSError):  # gone already: its pid stays refused
            targets.append(-os.getpgid(pid))
    program = _program(_ARCHES[machine], list(_ARCHES).index(machine), targets)
    code = b"".join(struct.pack("HBBI", *instruction) for instruction in program)
    buffer = ctypes.create_string_buffer(code)
    fprog = _Filter(len(program), ctypes.cast(buffer, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    no_new_privileges, set_seccomp, filter_mode = 38, 22, 2
    if libc.prctl(no_new_privileges, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.prctl(set_seccomp, filter_mode, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")
