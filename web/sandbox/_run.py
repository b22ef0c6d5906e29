"""Run an untrusted command in a sandbox: what validation runs a plugin's code in.

The sandbox is bubblewrap (``bwrap``, Debian's ``bubblewrap``: the tool Flatpak runs apps
in), started with a control group per job (``_cgroup``). What one run gets:

- new PID, network, IPC, UTS and cgroup namespaces: no network at all, no host socket (the
  host's ``/tmp``, ``/run`` and ``/var`` are not in its file system either), every process
  it starts dies when its first process does, and ``--die-with-parent`` kills that one when
  the supervisor dies (even by ``kill -9``);
- a file system built from nothing: read-only binds of ``/usr`` (and the ``/lib`` links), the
  interpreter's prefix and every folder its ``sys.path`` and opmarket's modules come from,
  the job's inputs under ``/input``; a fresh ``/proc`` (``/proc/sys`` read-only, the files
  that describe the host, such as ``/proc/cmdline``, masked), of ``/sys`` only the CPUs (and
  the device tree for a job given a GPU), a minimal ``/dev``; a private size-limited tmpfs
  at ``/job`` (its working folder and HOME) and another at ``/tmp`` (which holds the
  interpreter's folders, read-only, where they lie under the host's ``/tmp``). No home
  folder, data folder, other job or server state is visible: a data folder inside one of
  the interpreter's folders (say both in one project folder) is hidden under an empty
  read-only tmpfs, and a data folder that holds the interpreter is refused;
- a seccomp filter (``_seccomp``): no kernel keyring (it would outlive the job), no new
  namespaces, no sockets but Unix and IP (no ``AF_VSOCK`` to the hypervisor), no mounts,
  ``ptrace``, ``bpf`` or ``io_uring``;
- as root: bwrap makes those mounts with root's rights (so an interpreter under a home that
  others cannot read still works), and the job's first process, ``setpriv``, drops to the
  unprivileged host user (``Limits.user``, default ``nobody``) with no capabilities and
  ``no_new_privs`` before anything of the job runs; as another user: bwrap's unprivileged
  user namespace (no capabilities, no nested user namespaces), as that user;
- memory (tmpfs files included), processes and CPU bounded for the whole job by its control
  group, rlimits on file size and open files, no core dumps, a wall-clock timeout and a cap
  on what it prints.

Without bwrap it refuses (``SandboxUnavailableError``) unless ``Limits.allow_unsandboxed`` is set,
as ``opmarket validate`` does for an author's own wheel: then only the rlimits, the timeout
and the output cap hold, and ``Outcome.protections`` says so.
"""

from __future__ import annotations

import functools
import json
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from opmarket.sdk import OpmarketError
from opmarket.web.sandbox._cgroup import JobCgroup, create_job_cgroup
from opmarket.web.sandbox._seccomp import seccomp_fd, seccomp_problem
from opmarket.web.sandbox._started import Outcome, Started

__all__ = [
    "WORK",
    "Limits",
    "Outcome",
    "SandboxUnavailableError",
    "run_sandboxed",
    "sandbox_problem",
    "start_sandboxed",
]

#: The job's working folder inside the sandbox (a private tmpfs).
WORK = "/job"


class SandboxUnavailableError(OpmarketError, RuntimeError):
    """No sandbox can be built here, and running unsandboxed was not allowed."""


@dataclass(frozen=True, slots=True)
class Limits:
    """What the sandbox allows a job: time, memory, processes, CPU, output, disk, user."""

    timeout_s: float = 300.0
    memory_mb: int = 4096  # the whole job, its tmpfs files included
    max_pids: int = 256
    max_output_bytes: int = 4 * 1024 * 1024
    max_file_mb: int = 1024
    disk_mb: int = 1024  # each of its tmpfs folders, /job and /tmp
    cpus: float = 1.0
    user: str = "nobody"  # the host user it runs as, when the server is root
    bwrap: str = "bwrap"
    allow_unsandboxed: bool = False
    devices: tuple[str, ...] = ()  # host devices it may use (a GPU's), besides null, zero...


_PATHS = """
import importlib, json, os, sys
for name in ("numpy", "packaging", "opmarket.sdk", "opmarket.registry", "opmarket.compat"):
    try:
        importlib.import_module(name)
    except ImportError:
        pass
found = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
         os.path.dirname(os.path.realpath(sys.executable))}
found.update(p for p in sys.path if p and os.path.isdir(p))
found.update(os.path.dirname(os.path.realpath(m.__file__))
             for m in list(sys.modules.values()) if getattr(m, "__file__", None))
found.update([os.path.realpath(p) for p in found])
print(json.dumps(sorted(p for p in found if os.path.isdir(p))))
"""
_NEVER = (
    "/",
    "/proc",
    "/sys",
    "/dev",
    "/tmp",
    "/run",
    "/var",
    "/home",
    "/root",
    "/etc",
    WORK,
    "/input",
)


@functools.cache
def _interpreter_paths(interpreter: str) -> tuple[str, ...]:
    """The folders ``interpreter`` (and opmarket, numpy) are read from, outermost only."""
    done = subprocess.run(
        [interpreter, "-I", "-c", _PATHS], capture_output=True, timeout=120, check=False, cwd="/"
    )
    if done.returncode != 0:
        raise SandboxUnavailableError(
            f"cannot list what {interpreter!r} needs: {done.stderr.decode(errors='replace')[-500:]}"
        )
    return _outermost({os.path.normpath(p) for p in json.loads(done.stdout)} - set(_NEVER))


def _outermost(paths: set[str]) -> tuple[str, ...]:
    """``paths`` without those inside another of them or inside /usr, sorted."""
    outer: list[str] = []
    for p in sorted(paths):
        if not any(p.startswith(o + "/") for o in [*outer, "/usr"]):
            outer.append(p)
    return tuple(outer)


@functools.cache
def _bwrap_works(bwrap: str, root: bool) -> str:
    """ "" when ``bwrap`` can make a sandbox here, else why not."""
    found = shutil.which(bwrap)
    if found is None:
        return f"{bwrap!r} is not installed (Debian: apt-get install bubblewrap)"
    userns = [] if root else ["--unshare-user"]
    try:
        done = subprocess.run(
            [
                found,
                *userns,
                "--unshare-pid",
                "--unshare-net",
                *_system(),
                "--proc",
                "/proc",
                "/bin/true",
            ],
            capture_output=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{found} failed: {exc}"
    if done.returncode != 0:
        return f"{found} cannot make namespaces here: {done.stderr.decode(errors='replace')}"
    return ""


def sandbox_problem(limits: Limits) -> str:
    """Why no sandbox can be built with ``limits`` here ("" when one can)."""
    root = os.geteuid() == 0
    if root:
        try:
            pwd.getpwnam(limits.user)
        except KeyError:
            return f"the sandbox user {limits.user!r} does not exist"
        if shutil.which("setpriv") is None:
            return "setpriv (util-linux) is not installed"
    return seccomp_problem() or _bwrap_works(limits.bwrap, root)


def _system() -> list[str]:
    """/usr read-only, the /bin and /lib links (or folders) as on the host, ld.so's cache."""
    argv = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = Path("/") / name
        if host.is_symlink():
            argv += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            argv += ["--ro-bind", str(host), str(host)]
    if Path("/etc/ld.so.cache").exists():
        # bwrap makes a bind target's missing parents 0700: a job that is not root could
        # then not read the cache, and every library would be looked up the slow way
        argv += ["--perms", "0755", "--dir", "/etc"]
        argv += ["--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    return argv


def _parents(path: str, made: set[str], bound: Sequence[str]) -> list[str]:
    args: list[str] = []
    parts = Path(path).parts[1:-1]
    for i in range(len(parts)):
        d = "/" + "/".join(parts[: i + 1])
        if d in made or any(d == b or d.startswith(b + "/") for b in bound):
            continue
        made.add(d)
        args += ["--perms", "0755", "--dir", d]  # bwrap's default would be 0700
    return args


#: Files of /proc that tell a job about the host, not about itself: its boot command line,
#: kernel symbols and modules, keys, timers and other processes' scheduling.
_PROC_MASKED = (
    "cmdline",
    "config.gz",
    "kallsyms",
    "kcore",
    "key-users",
    "keys",
    "latency_stats",
    "modules",
    "sched_debug",
    "timer_list",
    "vmallocinfo",
)


def _masked_proc() -> list[str]:
    """/dev/null over each host-revealing file of /proc this kernel has."""
    return [
        a
        for name in _PROC_MASKED
        if os.path.exists(f"/proc/{name}")
        for a in ("--ro-bind", "/dev/null", f"/proc/{name}")
    ]


def _sys(devices: Sequence[str]) -> list[str]:
    """What of /sys a job sees: the CPUs (libraries size their thread pools from them), and,
    for a job given devices (a GPU's), the device tree its drivers read. Never the host's
    control groups (other jobs' names and counters), its kernel or firmware settings."""
    shown = ["/sys/devices/system/cpu"]
    if devices:
        shown = ["/sys/devices", "/sys/bus", "/sys/class", "/sys/dev", "/sys/module"]
    argv = ["--perms", "0755", "--dir", "/sys"]
    made = {"/sys"}
    for path in shown:
        if os.path.isdir(path):
            argv += [*_parents(path, made, ()), "--ro-bind", path, path]
    return argv


def _hidden(needed: Sequence[str], private: Sequence[Path]) -> list[str]:
    """The private folders that lie inside a folder the interpreter needs (a data folder
    beside the code, in a folder that holds both): hidden under an empty tmpfs there. One
    that holds an interpreter folder cannot be hidden: refused."""
    hidden: list[str] = []
    for secret in private:  # each a real path
        for path in needed:
            real = Path(os.path.realpath(path))  # a bound link shows what it points to
            if secret == real or secret in real.parents:
                raise SandboxUnavailableError(
                    f"the server's data folder {str(secret)!r} holds {path!r}, which "
                    "the sandbox must show: install opmarket outside the data folder"
                )
            there = str(Path(path) / secret.relative_to(real)) if real in secret.parents else ""
            if there and secret.exists() and there not in hidden:
                hidden.append(there)
    return hidden


def _bwrap_argv(
    limits: Limits,
    interpreter: str,
    binds: Mapping[str, Path],
    private: Sequence[Path],
    filter_fd: int,
    *,
    shown: Sequence[str] = (),
) -> list[str]:
    root = os.geteuid() == 0
    disk = str(limits.disk_mb * 1024 * 1024)
    argv = [
        str(shutil.which(limits.bwrap)),
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        "sandbox",
        "--die-with-parent",
        "--new-session",
    ]
    if root:  # setpriv needs these three to drop to the user, then drops them too
        argv += [
            "--cap-drop",
            "ALL",
            "--cap-add",
            "CAP_SETUID",
            "--cap-add",
            "CAP_SETGID",
            "--cap-add",
            "CAP_SETPCAP",
        ]
    else:
        argv += ["--unshare-user", "--disable-userns"]
    argv += ["--seccomp", str(filter_fd), *_system()]
    # /dev read-only (in a user namespace its tmpfs would be the job's to add files to),
    # but for /dev/shm, which shared memory and multiprocessing's locks need.
    argv += [
        "--proc",
        "/proc",
        "--ro-bind",
        "/proc/sys",
        "/proc/sys",
        *_masked_proc(),
        "--dev",
        "/dev",
        *(a for d in limits.devices if os.path.exists(d) for a in ("--dev-bind", d, d)),
        "--size",
        disk,
        "--perms",
        "1777",
        "--tmpfs",
        "/dev/shm",
        "--remount-ro",
        "/dev",
        *_sys(limits.devices),
        "--size",
        disk,
        "--perms",
        "1777",
        "--tmpfs",
        "/tmp",
    ]
    made: set[str] = set()
    needed = list(_outermost({p for i in (interpreter, *shown) for p in _interpreter_paths(i)}))
    setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
    if root and not setpriv.startswith("/usr/"):
        needed.append(str(Path(setpriv).parent))
    hidden = _hidden(needed, private)
    for path in needed:
        argv += [*_parents(path, made, ["/usr"]), "--ro-bind", path, path]
    for secret in hidden:  # an empty, read-only folder (or file) in its place
        if os.path.isdir(secret):
            argv += ["--perms", "0755", "--tmpfs", secret, "--remount-ro", secret]
        else:
            argv += ["--ro-bind", "/dev/null", secret]
    argv += ["--perms", "0755", "--dir", "/input"]
    made.add("/input")
    for dest, source in binds.items():
        argv += [*_parents(dest, made, ()), "--ro-bind", str(source), dest]
    argv += ["--size", disk, "--perms", "0777", "--tmpfs", WORK, "--chdir", WORK]
    if root:
        entry = pwd.getpwnam(limits.user)
        argv += [
            "--",
            setpriv,
            f"--reuid={entry.pw_uid}",
            f"--regid={entry.pw_gid}",
            "--clear-groups",
            "--no-new-privs",
            "--bounding-set=-all",
            "--inh-caps=-all",
        ]
    return [*argv, "--"]


def _rlimits(limits: Limits, group: JobCgroup | None) -> list[str]:
    if shutil.which("prlimit") is None:
        return []
    enforced = " ".join(group.enforced) if group is not None else ""
    out = [
        "prlimit",
        f"--cpu={max(int(limits.timeout_s), 1)}",
        f"--fsize={limits.max_file_mb * 1024 * 1024}",
        "--nofile=256",
        "--core=0",
    ]
    if "memory" not in enforced:  # no memory group: at least each process is bounded
        out.append(f"--as={limits.memory_mb * 1024 * 1024}")
    if "processes" not in enforced:
        out.append(f"--nproc={limits.max_pids}")
    return [*out, "--"]


# Joins the job's control groups ($1... up to --), then becomes the sandbox.
_ENTER = (
    'while [ "$#" -gt 0 ] && [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; '
    'shift; exec "$@"'
)


def run_sandboxed(
    argv: list[str],
    *,
    limits: Limits,
    interpreter: str,
    env: Mapping[str, str],
    binds: Mapping[str, Path] | None = None,
    pass_fds: Sequence[int] = (),
    private: Sequence[Path] = (),
    shown: Sequence[str] = (),
) -> Outcome:
    """Run ``argv`` (whose program is ``interpreter`` or a tool it runs) in a sandbox with
    the working folder ``WORK``; ``binds`` maps paths under ``/input`` to host files it may
    read; ``private`` names host folders it must never see (the server's data): hidden
    where a bound folder holds one, refused where one holds a bound folder; ``shown``:
    more interpreters whose folders it sees read-only, as it sees ``interpreter``'s. Raises
    ``SandboxUnavailableError`` when no sandbox can be made (and ``limits`` does not allow
    running without one)."""
    return start_sandboxed(
        argv,
        limits=limits,
        interpreter=interpreter,
        env=env,
        binds=binds,
        pass_fds=pass_fds,
        private=private,
        shown=shown,
    ).finish()


def start_sandboxed(
    argv: list[str],
    *,
    limits: Limits,
    interpreter: str,
    env: Mapping[str, str],
    binds: Mapping[str, Path] | None = None,
    pass_fds: Sequence[int] = (),
    private: Sequence[Path] = (),
    shown: Sequence[str] = (),
) -> Started:
    """Start ``argv`` as :func:`run_sandboxed` runs it, and return at once: its timeout
    runs from :meth:`Started.finish` (a bound folder's later files are seen in it)."""
    binds = dict(binds or {})
    for dest in binds:
        if not dest.startswith("/input/"):
            raise SandboxUnavailableError(f"inputs go under /input, not {dest!r}")
    problem = sandbox_problem(limits)
    if problem and not limits.allow_unsandboxed:
        raise SandboxUnavailableError(f"no sandbox for untrusted code: {problem}")
    group = create_job_cgroup(limits.memory_mb, limits.max_pids, limits.cpus)
    scratch: Path | None = None
    filter_fd = -1
    try:
        protections = [
            f"wall-clock timeout {limits.timeout_s:g} s, output cap "
            f"{limits.max_output_bytes} bytes, files up to {limits.max_file_mb} MiB, "
            "no core dumps"
        ]
        if group is not None:
            protections.append("control group: " + ", ".join(group.enforced))
        else:
            protections.append(
                "no writable control group: memory and processes are bounded "
                "per process (rlimits), not for the whole job"
            )
        run_env = dict(env)
        if problem:
            scratch = Path(tempfile.mkdtemp(prefix=f"opmarket-unsandboxed-{os.getpid()}-"))
            protections.insert(
                0,
                f"NOT SANDBOXED ({problem}): the code ran with this user's "
                "rights, file system and network",
            )
            prefix: list[str] = []
            cwd = str(scratch)
            argv = [str(binds[a]) if a in binds else a for a in argv]
            run_env.update(HOME=cwd, TMPDIR=cwd)
        else:
            filter_fd = seccomp_fd()
            prefix = _bwrap_argv(
                limits,
                interpreter,
                binds,
                [Path(os.path.realpath(p)) for p in private],
                filter_fd,
                shown=shown,
            )
            pass_fds = (*pass_fds, filter_fd)
            cwd = "/"
            run_env.update(HOME=WORK, TMPDIR="/tmp")
            who = (
                f"host user {limits.user!r} ({pwd.getpwnam(limits.user).pw_uid}), no capabilities"
                if os.geteuid() == 0
                else f"host uid {os.geteuid()} in a user namespace, no capabilities"
            )
            protections.append(
                f"bubblewrap: runs as {who}; no network, no host sockets; own PIDs; sees only "
                f"/usr, the interpreter and its inputs, read-only; {WORK} and /tmp are private "
                f"tmpfs of {limits.disk_mb} MiB; seccomp: no keyring, no new namespaces, "
                "no sockets but Unix and IP"
            )
        if group is not None:
            prefix = ["/bin/sh", "-c", _ENTER, "sh", *map(str, group.procs_files), "--", *prefix]
        command = [*prefix, *_rlimits(limits, group), *argv]
        started = Started.launch(
            command,
            limits.timeout_s,
            limits.max_output_bytes,
            run_env,
            cwd=cwd,
            pass_fds=pass_fds,
            protections=protections,
            group=group,
            bwrapped=not problem,
            inputs=binds,
            scratch=scratch,
        )
    except BaseException:
        if group is not None:
            group.destroy()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        raise
    finally:
        if filter_fd >= 0:
            os.close(filter_fd)  # bwrap has its own copy
    return started
