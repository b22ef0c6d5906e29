"""Run an untrusted command with limits: what validation runs a plugin's code in.

What it does, when the machine allows (``describe`` says which applied):

- its own temporary working directory and HOME, a minimal environment;
- rlimits: address space (memory), CPU seconds, file size, open files, no core dumps;
- a wall-clock timeout after which the whole process group is killed;
- a cap on what it prints: past it the process is killed (no flooding of logs or disk);
- as root: a pids cgroup (a fork bomb hits its ``pids.max`` and nothing else), and new
  mount, network, IPC and PID namespaces (every mount read-only but its folder; no network;
  every process it started dies with it); no capabilities and ``no_new_privs``;
- as root, when the sandbox user can run the interpreter: that unprivileged user (with
  RLIMIT_NPROC) instead of root.

What it does not protect against: reading files that the user it runs as may read (the
file system is visible, read-only: use a container or a dedicated machine for hostile uploads),
kernel exploits, and CPU/memory pressure within the limits (it shares the machine). Without
root it has only the rlimits, the timeout and the output cap.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import threading
import uuid
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

__all__ = ["Limits", "Outcome", "run_sandboxed"]


@dataclass(frozen=True, slots=True)
class Limits:
    """What the sandbox allows a command: time, memory, processes, output, file size, user."""

    timeout_s: float = 300.0
    memory_mb: int = 4096
    max_pids: int = 256
    max_output_bytes: int = 4 * 1024 * 1024
    max_file_mb: int = 1024
    user: str = "nobody"


@dataclass(slots=True)
class Outcome:
    """How the command ended; ``problem`` says why it was stopped, when it was."""

    returncode: int
    stdout: bytes
    stderr: bytes
    problem: str = ""
    protections: list[str] = field(default_factory=list)


_CGROUP_V1 = Path("/sys/fs/cgroup/pids")
_CGROUP_V2 = Path("/sys/fs/cgroup")


def _pids_cgroup_root() -> Path | None:
    if os.geteuid() != 0:
        return None
    if (_CGROUP_V1 / "cgroup.procs").exists() and os.access(_CGROUP_V1, os.W_OK):
        return _CGROUP_V1
    controllers = _CGROUP_V2 / "cgroup.controllers"
    if controllers.exists() and "pids" in controllers.read_text().split():
        return _CGROUP_V2
    return None


_NAMESPACES = ["unshare", "--mount", "--propagation", "private", "--net", "--ipc", "--pid",
               "--fork", "--kill-child", "--mount-proc"]

# Inside the new mount namespace: every mount read-only but the working folder ($0).
_READ_ONLY = """
mount --bind "$0" "$0" || exit 97
for m in $(awk '{print $5}' /proc/self/mountinfo | sort -u); do
  [ "$m" = "$0" ] && continue
  case "$m" in /proc|/proc/*) continue;; esac
  mount -o remount,bind,ro "$m" 2>/dev/null || true
done
exec "$@"
"""


@cache
def _namespaces_work() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("setpriv") is None:
        return False
    done = subprocess.run([*_NAMESPACES, "true"], capture_output=True, timeout=30, check=False)
    return done.returncode == 0


@cache
def _user_can_run(user: str, executable: str) -> tuple[int, int] | None:
    """(uid, gid) of ``user`` when it exists and may run ``executable`` (an interpreter
    under a private home directory is not runnable by others)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return None
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return None
    done = subprocess.run(
        # Through a shell: setpriv itself may exec a file the user could not.
        ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups",
         "/bin/sh", "-c", 'exec "$0" -I -c "import opmarket.sdk"', executable],
        capture_output=True, timeout=60, cwd="/", check=False,
    )  # fmt: skip
    return (entry.pw_uid, entry.pw_gid) if done.returncode == 0 else None


def _reader(stream: object, sink: bytearray, cap: int, over: threading.Event) -> None:
    import io

    assert isinstance(stream, io.BufferedReader)
    while chunk := stream.read1(65536):
        if len(sink) + len(chunk) > cap:
            sink.extend(chunk[: max(cap - len(sink), 0)])
            over.set()
            return
        sink.extend(chunk)


def run_sandboxed(
    argv: list[str], *, workdir: Path, limits: Limits, interpreter: str, env: dict[str, str]
) -> Outcome:
    """Run ``argv`` (whose program is ``interpreter`` or a tool it runs) in ``workdir``."""
    protections = [
        f"rlimits: {limits.memory_mb} MiB address space, {int(limits.timeout_s)} s CPU, "
        f"{limits.max_file_mb} MiB files, 256 open files, no core dumps",
        f"wall-clock timeout {limits.timeout_s:g} s, output cap {limits.max_output_bytes} bytes",
    ]
    prefix: list[str] = []
    cgroup: Path | None = None
    root = _pids_cgroup_root()
    if root is not None:
        cgroup = root / f"opmarket-{uuid.uuid4().hex[:12]}"
        try:
            cgroup.mkdir()
            (cgroup / "pids.max").write_text(str(limits.max_pids))
            prefix += ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(cgroup / "cgroup.procs")]
            protections.append(f"pids cgroup: at most {limits.max_pids} processes")
        except OSError:
            cgroup = None
    namespaces = _namespaces_work()
    if namespaces:
        prefix += [*_NAMESPACES, "sh", "-c", _READ_ONLY, str(workdir)]
        protections.append("namespaces: no network, own IPC, own PIDs, own mounts with the "
                           "file system read-only but its folder")
    ids = _user_can_run(limits.user, interpreter)
    nproc: list[str] = []
    # no_new_privs and no capabilities: even as root it cannot remount, mount, or write
    # through permissions it does not own.
    drop = ["--no-new-privs", "--bounding-set=-all", "--inh-caps=-all"]
    if ids is not None:
        uid, gid = ids
        prefix += ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", *drop]
        os.chown(workdir, uid, gid)
        for path in workdir.rglob("*"):
            os.chown(path, uid, gid, follow_symlinks=False)
        nproc = [f"--nproc={limits.max_pids}"]
        protections.append(f"runs as unprivileged user {limits.user!r} ({uid})")
    elif namespaces:
        prefix += ["setpriv", *drop]
        protections.append(
            f"as root without capabilities: {limits.user!r} cannot run {interpreter} "
            "(set OPMARKET_SANDBOX_USER, or install Python where that user can read it)"
        )
    if shutil.which("prlimit"):
        prefix += [
            "prlimit", f"--as={limits.memory_mb * 1024 * 1024}",
            f"--cpu={max(int(limits.timeout_s), 1)}",
            f"--fsize={limits.max_file_mb * 1024 * 1024}", "--nofile=256", "--core=0",
            *nproc, "--",
        ]  # fmt: skip
    stdout, stderr = bytearray(), bytearray()
    over = threading.Event()
    try:
        proc = subprocess.Popen(
            [*prefix, *argv], cwd=workdir, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        )  # fmt: skip
        readers = [
            threading.Thread(target=_reader, args=(s, sink, limits.max_output_bytes, over),
                             daemon=True)
            for s, sink in ((proc.stdout, stdout), (proc.stderr, stderr))
        ]  # fmt: skip
        for r in readers:
            r.start()
        problem = ""
        waited = 0.0
        while True:
            try:
                proc.wait(timeout=0.1)
                break
            except subprocess.TimeoutExpired:
                waited += 0.1
            if over.is_set():
                problem = f"printed more than {limits.max_output_bytes} bytes; stopped"
                break
            if waited >= limits.timeout_s:
                problem = f"still running after {limits.timeout_s:g} s; stopped"
                break
        _kill_group(proc)
        for r in readers:
            r.join(5)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        if over.is_set() and not problem:
            problem = f"printed more than {limits.max_output_bytes} bytes; stopped"
        code = proc.returncode if proc.returncode is not None else -9
        if not problem and code < 0:
            problem = f"killed by signal {signal.Signals(-code).name}"
        return Outcome(code, bytes(stdout), bytes(stderr), problem, protections)
    finally:
        if cgroup is not None:
            _remove_cgroup(cgroup)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _remove_cgroup(cgroup: Path) -> None:
    # Processes that escaped the process group are still in the cgroup: kill them first.
    for _ in range(50):
        try:
            pids = (cgroup / "cgroup.procs").read_text().split()
        except OSError:
            pids = []
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        try:
            cgroup.rmdir()
            return
        except OSError:
            threading.Event().wait(0.1)
