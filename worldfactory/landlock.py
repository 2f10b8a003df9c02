"""Landlock, the kernel's unprivileged access control, through its three system calls (ctypes).

A process restricts itself, and every process it could start, for the rest of its life: here to
read and execute anywhere, write only beneath the folders it names (a scratch folder, /dev/null),
and, where the kernel's Landlock ABI is 4 or newer, no TCP bind or connect at all; ABI 6 adds
scopes (no signals to, and no abstract Unix sockets of, processes outside the domain). It needs
no root, no user namespace and no setuid helper: only PR_SET_NO_NEW_PRIVS, which the caller sets.
Kernel documentation: Documentation/userspace-api/landlock.rst (linux 6.x), the ABI numbers below.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import platform
import struct
import sys
from typing import Any

# x86_64 system call numbers (the same on aarch64's generic table: 444 to 446).
SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446
CREATE_RULESET_VERSION = 1 << 0
RULE_PATH_BENEATH, RULE_NET_PORT = 1, 2
PR_SET_NO_NEW_PRIVS = 38

# File-system rights, by the ABI that introduced them.
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR, MAKE_REG = 1 << 4, 1 << 5, 1 << 6, 1 << 7, 1 << 8
MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15
FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
BIND_TCP, CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6
READ_ONLY = EXECUTE | READ_FILE | READ_DIR


class LandlockError(OSError):
    """The kernel refused a Landlock call (or has no Landlock)."""


@functools.cache
def _syscall() -> Any:
    fn = ctypes.CDLL(None, use_errno=True).syscall
    fn.restype = ctypes.c_long
    return fn


def abi() -> int:
    """The kernel's Landlock ABI version; 0 where there is none (see `missing` for why)."""
    return _probe()[0]


def missing() -> str | None:
    """Why this process cannot use Landlock, in words; None when it can."""
    return _probe()[1]


@functools.cache
def _probe() -> tuple[int, str | None]:
    if not sys.platform.startswith("linux") or platform.machine() not in ("x86_64", "aarch64"):
        return 0, f"Landlock is driven here on x86_64 and aarch64 Linux only, not {sys.platform} {platform.machine()}"
    version = _syscall()(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION))
    if version > 0:
        return int(version), None
    err = ctypes.get_errno()
    why = {errno.ENOSYS: "this kernel has no Landlock (Linux 5.13+ built with CONFIG_SECURITY_LANDLOCK)",
           errno.EOPNOTSUPP: "Landlock is built into this kernel but off (add landlock to the lsm= boot parameter)",
           errno.EPERM: "Landlock's system calls are refused here (a container's seccomp policy?)"}
    return 0, why.get(err, f"Landlock is not usable here ({os.strerror(err)})")


def fs_rights(version: int) -> int:
    """Every file-system right this ABI version knows (all of them are handled: what no rule grants is refused)."""
    return next(mask for v, mask in sorted(FS_BY_ABI.items(), reverse=True) if version >= v)


def _call(name: str, *args: object) -> int:
    number = {"create_ruleset": SYS_CREATE_RULESET, "add_rule": SYS_ADD_RULE, "restrict_self": SYS_RESTRICT_SELF}
    out = int(_syscall()(number[name], *args))
    if out < 0:
        err = ctypes.get_errno()
        raise LandlockError(err, f"landlock_{name}: {os.strerror(err)}")
    return out


def _allow(ruleset: int, path: str, rights: int) -> None:
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        attr = ctypes.create_string_buffer(struct.pack("=Qi", rights, fd))  # packed: u64 then s32
        _call("add_rule", ctypes.c_int(ruleset), ctypes.c_int(RULE_PATH_BENEATH), attr, ctypes.c_uint32(0))
    finally:
        os.close(fd)


def restrict(writable: tuple[str, ...], writable_files: tuple[str, ...] = ("/dev/null",)) -> dict[str, int | bool]:
    """Restrict this process for good: read and execute anywhere, write only beneath `writable` (and to
    `writable_files`), no TCP where the ABI allows. Sets PR_SET_NO_NEW_PRIVS. Returns what was enforced."""
    version = abi()
    if version < 1:
        raise LandlockError(errno.ENOSYS, str(missing()))
    handled_fs = fs_rights(version)
    handled_net = BIND_TCP | CONNECT_TCP if version >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if version >= 6 else 0
    if version >= 6:
        attr = struct.pack("=QQQ", handled_fs, handled_net, scoped)
    elif version >= 4:
        attr = struct.pack("=QQ", handled_fs, handled_net)
    else:
        attr = struct.pack("=Q", handled_fs)
    buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = _call("create_ruleset", buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    try:
        _allow(ruleset, "/", READ_ONLY)
        for folder in writable:
            _allow(ruleset, folder, handled_fs)
        for path in writable_files:
            if os.path.exists(path):
                _allow(ruleset, path, (READ_FILE | WRITE_FILE | TRUNCATE) & handled_fs)
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            raise LandlockError(err, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(err)}")
        _call("restrict_self", ctypes.c_int(ruleset), ctypes.c_uint32(0))
    finally:
        os.close(ruleset)
    return {"abi": version, "network": bool(handled_net), "scoped": bool(scoped)}
