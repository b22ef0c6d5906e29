"""What lets a validation sandbox serve another job (``_probe``'s harness and zygote, in the
sandbox): every process of the last job killed, the tmpfs folders as they were, nothing
changed in harness and zygote that another process of the same user may change in them.

The sandbox runs it beside ``_probe.py`` (bound at ``/input``, compiled like it): the
standard library only, as the harness has no site-packages. See ``_probe`` and
docs/marketplace.md ("A sandbox per worker thread, put back after each job").
"""

from __future__ import annotations

import contextlib
import os
import resource
import select
import shutil
import signal
import stat
from typing import Any

__all__ = [
    "SCRATCH",
    "fingerprint",
    "kill_all_but",
    "listing",
    "non_dumpable",
    "own_sandbox",
    "reaped",
    "sockets_left",
    "spent",
    "wipe",
]

#: The sandbox's writable folders (private tmpfs): what a job writes there is removed.
SCRATCH = ("/job", "/tmp", "/dev/shm")
#: Most entries the tmpfs folders may hold between two jobs for the sandbox to serve again.
_MOST_ENTRIES = 10_000


#: ``waitpid``'s ``__WALL``: children whatever signal they end with.
_WALL = 0x40000000
#: ``ioprio_get``'s number, where the standard library has no call for it.
_IOPRIO_GET = {"x86_64": 252, "aarch64": 31}
#: ``sched_getattr``'s: all of a process's scheduling, its own time slice (Linux 6.12) and
#: utilization clamps included, which ``sched_getscheduler`` and ``getpriority`` miss.
_SCHED_GETATTR = {"x86_64": 315, "aarch64": 275}


def _libc() -> Any:
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def non_dumpable() -> bool:
    try:
        return int(_libc().prctl(4, 0, 0, 0, 0)) == 0  # PR_SET_DUMPABLE, 0
    except (OSError, AttributeError):
        return False


def _session_priority() -> str | None:
    """This process's session's priority (its autogroup's): a process of the session that
    made itself dumpable may change it for the whole session, harness and zygote too."""
    try:
        with open("/proc/self/autogroup") as f:
            return f.read()
    except OSError:
        return None  # a kernel without autogroups


def _scheduling() -> str | None:
    """This process's ``sched_attr``, as ``sched_getattr`` says it (hexadecimal)."""
    import ctypes

    number = _SCHED_GETATTR.get(os.uname().machine)
    attr = ctypes.create_string_buffer(56)  # SCHED_ATTR_SIZE_VER1
    if number is None or _libc().syscall(number, 0, attr, len(attr), 0) != 0:
        return None
    return attr.raw.hex()


def fingerprint() -> list[Any]:
    """What another process of the same user may change in this one: its resource limits
    (``prlimit``), I/O priority, priority, CPU affinity, scheduling (all of
    ``sched_setattr``'s) and its session's priority."""
    names = sorted(n for n in dir(resource) if n.startswith("RLIMIT_"))
    ioprio = _IOPRIO_GET.get(os.uname().machine)
    return [
        _session_priority(),
        _scheduling(),
        [[n, *resource.getrlimit(getattr(resource, n))] for n in names],
        _libc().syscall(ioprio, 1, 0) if ioprio else None,  # IOPRIO_WHO_PROCESS, itself
        os.getpriority(os.PRIO_PROCESS, 0),
        sorted(os.sched_getaffinity(0)),
        os.sched_getscheduler(0),
        os.sched_getparam(0).sched_priority,
    ]


def spent() -> bool:
    """Whether this process used half its CPU time limit (``RLIMIT_CPU``, which counts
    every job it served): it must not serve another, which could find the limit hit."""
    soft = resource.getrlimit(resource.RLIMIT_CPU)[0]
    used = resource.getrusage(resource.RUSAGE_SELF)
    return soft != resource.RLIM_INFINITY and used.ru_utime + used.ru_stime > soft / 2


def reaped() -> bool:
    """Remove every ended child of this process; whether none is left. A plugin process
    can make children of its zygote (``clone``'s ``CLONE_PARENT``), which are not the one
    it waits for: ended, each would hold one of the processes the sandbox (and its user)
    may have for as long as the zygote lives."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG | _WALL)
        except ChildProcessError:
            return True  # none left
        if pid == 0:
            return False  # one still runs, after every process of the job was killed


def own_sandbox() -> bool:
    """Whether this runs as a bubblewrap sandbox's command: its own PID namespace (whose
    init is bwrap, this process's parent) and its tmpfs folders."""
    try:
        with open("/proc/1/comm") as f:
            init = f.read().strip()
    except OSError:
        return False
    return os.getppid() == 1 and init == "bwrap" and all(map(os.path.ismount, SCRATCH))


def listing() -> dict[str, list[int]] | None:
    """Every file and folder in the tmpfs folders (not what is mounted inside them): its
    type, mode and owner; None when there are too many or one cannot be read."""
    found: dict[str, list[int]] = {}
    for root in SCRATCH:
        try:
            st = os.lstat(root)
        except OSError:
            continue
        device = st.st_dev
        # the folder itself too: where the sandbox's user owns it (bwrap without root), a
        # job may change its mode
        found[root] = [stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid]
        folders = [root]
        while folders:
            try:
                entries = list(os.scandir(folders.pop()))
            except OSError:
                return None
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    return None
                if st.st_dev != device:
                    continue  # a read-only bind inside it (the interpreter's folders)
                found[entry.path] = [stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid]
                if len(found) > _MOST_ENTRIES:
                    return None
                if stat.S_ISDIR(st.st_mode):
                    folders.append(entry.path)
    return found


def _remove(path: str) -> None:
    """Remove a file or a folder tree the job left, making its folders writable and
    searchable again as far as it takes (what is still there is found by the listing)."""
    for _ in range(8):
        failed: list[str] = []

        def note(_func: Any, where: str, _exc: Any, failed: list[str] = failed) -> None:
            failed.append(where)

        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, onerror=note)
        else:
            with contextlib.suppress(OSError):
                os.unlink(path)
        if not failed:
            return
        for where in failed:
            for folder in (os.path.dirname(where), where):
                with contextlib.suppress(OSError):
                    os.chmod(folder, 0o700)


def wipe(keep: dict[str, list[int]]) -> None:
    """Remove from the tmpfs folders everything not in ``keep`` and give what is in it its
    mode again (the folders of ``keep`` are walked, what is not kept is removed whole)."""
    for root in SCRATCH:
        with contextlib.suppress(OSError):
            if root in keep and stat.S_IMODE(os.lstat(root).st_mode) != keep[root][1]:
                os.chmod(root, keep[root][1])
    folders = list(SCRATCH)
    while folders:
        folder = folders.pop()
        try:
            device = os.lstat(folder).st_dev
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if st.st_dev != device:
                continue  # a read-only bind inside it
            if entry.path not in keep:
                _remove(entry.path)
                continue
            if stat.S_IMODE(st.st_mode) != keep[entry.path][1]:
                with contextlib.suppress(OSError):
                    os.chmod(entry.path, keep[entry.path][1])
            if stat.S_ISDIR(st.st_mode):
                folders.append(entry.path)


def _running(pid: str) -> bool:
    """Whether a thread of process ``pid`` has not ended: its first thread may have ended
    alone (``exit``, not ``exit_group``), a zombie to ``/proc/PID/stat``, while the others
    run on."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False  # gone meanwhile
    for tid in threads:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue  # ended meanwhile
        if state not in (b"Z", b"X"):
            return True
    return False


def kill_all_but(spare: set[int]) -> bool:
    """Kill every process of the sandbox but ``spare`` (its init, the harness, the
    zygote); whether none is left (zombies, ended and holding nothing, aside)."""
    for _ in range(1000):
        left = False
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) in spare or not _running(entry):
                continue
            left = True
            with contextlib.suppress(OSError):
                os.kill(int(entry), signal.SIGKILL)
        if not left:
            return True
        select.select([], [], [], 0.001)
    return False


def sockets_left() -> bool:
    """Whether a socket of the sandbox's own network outlives its job's processes: a TCP
    connection closed first on its side waits a minute in ``TIME_WAIT``, holding its port
    (a bind there fails), which only a new network (a new sandbox) frees."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, "rb") as f:
                if len(f.read().splitlines()) > 1:  # a heading, then a line per socket
                    return True
        except FileNotFoundError:
            continue  # no IPv6
        except OSError:
            return True
    return False
