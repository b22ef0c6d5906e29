"""The system calls a sandboxed job may not make: a seccomp filter for bubblewrap's ``--seccomp``.

Namespaces and a control group hide the host, but some kernel state is neither: the keyring
of the uid a job runs as outlives the job (one validation's ``add_key`` was read by the
next), new user namespaces give a job capabilities over mounts it makes (when the server is
root, bubblewrap does not stop them), and socket families such as ``AF_VSOCK`` reach past
any network namespace (to the hypervisor). The filter, built with libseccomp (through
pyseccomp, its ctypes binding; libseccomp picks the machine's syscall table, rejects the
other ABIs a process can switch to, such as i386 and x32 on x86_64, and is what Flatpak and
container runtimes build theirs with) and modelled on Flatpak's, allows everything but:

- the kernel keyring (``add_key``, ``keyctl``, ``request_key``): EPERM;
- SysV IPC objects and POSIX message queues (``shmget``, ``semget``, ``msgget``,
  ``mq_open``), which outlive the processes that made them (a sandbox serves several jobs,
  ``validation/_probe``): EPERM. Shared memory and semaphores as files in ``/dev/shm``
  (``shm_open``, ``sem_open``, multiprocessing's locks) are removed between jobs;
- new namespaces: ``unshare`` and ``clone`` with any ``CLONE_NEW*`` flag, ``setns``:
  EPERM; ``clone3``, whose flags sit in memory a filter cannot read: ENOSYS, so that libc
  falls back to ``clone``;
- sockets other than ``AF_UNIX``, ``AF_INET`` and ``AF_INET6`` (``socket``, ``socketpair``):
  EAFNOSUPPORT, as a kernel without that family says; ``io_uring``, which can open sockets
  without those calls: ENOSYS;
- mounts and root changes, ``ptrace``, ``bpf``, ``perf_event_open``, ``userfaultfd``,
  ``personality`` changes, kernel modules and ``kexec``, ``syslog``, ``acct``, swap,
  ``quotactl``, file handles: EPERM.

Validation needs none of these; ``tests/web/test_hostile_kernel.py`` shows them refused.
"""

from __future__ import annotations

import errno
import os
from functools import cache
from typing import Any

__all__ = ["SeccompUnavailableError", "seccomp_fd", "seccomp_problem"]

_DENIED = (
    # the kernel keyring: state that outlives the job
    "add_key",
    "keyctl",
    "request_key",
    # SysV IPC and POSIX message queues: objects that outlive the processes that made them
    "shmget",
    "semget",
    "msgget",
    "mq_open",
    # namespaces (clone and unshare by flag, below)
    "setns",
    # mounts and roots
    "mount",
    "umount",
    "umount2",
    "pivot_root",
    "chroot",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    # other processes and the kernel's innards
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "syslog",
    "acct",
    "quotactl",
    "swapon",
    "swapoff",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "name_to_handle_at",
    "open_by_handle_at",
    "lookup_dcookie",
    "uselib",
)
_NO_SYSCALL = ("clone3", "io_uring_setup", "io_uring_enter", "io_uring_register")

_CLONE_NEW = {
    "CLONE_NEWTIME": 0x00000080,
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}
#: AF_UNSPEC (0: the kernel's own error), AF_UNIX, AF_INET, AF_INET6.
_FAMILIES = (0, 1, 2, 10)
_LAST_FAMILY = 64  # AF_MAX is 46 in Linux 6.x; every number above is refused too
_PER_LINUX = 0  # personality(PER_LINUX): the one persona allowed


class SeccompUnavailableError(RuntimeError):
    """libseccomp (or its binding) is missing: no filter can be made here."""


def _library() -> Any:
    try:
        import pyseccomp
    except (ImportError, RuntimeError, OSError) as exc:  # RuntimeError: no libseccomp.so
        raise SeccompUnavailableError(
            f"libseccomp is not usable ({exc}); Debian: apt-get install libseccomp2, "
            "and pip install pyseccomp"
        ) from None
    return pyseccomp


def _rules(lib: Any) -> Any:
    """The filter: everything allowed but what the module's docstring lists."""
    f = lib.SyscallFilter(lib.ALLOW)
    f.set_attr(lib.Attr.ACT_BADARCH, lib.KILL_PROCESS)
    # s390 passes clone's flags second; every other architecture first.
    machine = os.uname().machine
    flags_arg = 1 if machine.startswith("s390") else 0

    def add(action: int, name: str, *args: Any) -> None:
        if lib.resolve_syscall(lib.Arch.NATIVE, name) < 0:
            return  # not a system call on this architecture (umount, uselib on arm64)
        f.add_rule(action, name, *args)

    eperm = lib.ERRNO(errno.EPERM)
    for name in _DENIED:
        add(eperm, name)
    for name in _NO_SYSCALL:
        add(lib.ERRNO(errno.ENOSYS), name)
    for bit in _CLONE_NEW.values():
        add(eperm, "unshare", lib.Arg(0, lib.MASKED_EQ, bit, bit))
        add(eperm, "clone", lib.Arg(flags_arg, lib.MASKED_EQ, bit, bit))
    nofamily = lib.ERRNO(errno.EAFNOSUPPORT)
    for call in ("socket", "socketpair"):
        for family in range(_LAST_FAMILY + 1):
            if family not in _FAMILIES:
                add(nofamily, call, lib.Arg(0, lib.EQ, family))
        add(nofamily, call, lib.Arg(0, lib.GT, _LAST_FAMILY))
    # personality() can turn off address randomisation (ADDR_NO_RANDOMIZE) for what it
    # runs next: plain Linux only, as Flatpak allows.
    add(eperm, "personality", lib.Arg(0, lib.NE, _PER_LINUX))
    return f


@cache
def _program() -> bytes:
    lib = _library()
    f = _rules(lib)
    fd = os.memfd_create("opmarket-seccomp")
    try:
        with os.fdopen(os.dup(fd), "rb+") as out:
            f.export_bpf(out)
        os.lseek(fd, 0, os.SEEK_SET)
        data = b""
        while chunk := os.read(fd, 65536):
            data += chunk
    finally:
        os.close(fd)
    return data


def seccomp_problem() -> str:
    """Why no filter can be made here ("" when one can)."""
    try:
        _program()
    except (SeccompUnavailableError, OSError) as exc:
        return str(exc)
    return ""


def seccomp_fd() -> int:
    """A new file descriptor holding the compiled filter (classic BPF, as bubblewrap's
    ``--seccomp FD`` reads it); the caller passes it to bwrap and closes it."""
    data = _program()
    fd = os.memfd_create("opmarket-seccomp")
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
