"""One control group per validation job: memory, processes and CPU bounded for the whole
process tree, on cgroup v1 (a hierarchy per controller) or v2 (one unified hierarchy).

A job's group is made under the server's own group (so the server's limits still hold) and
is named ``opmarket-<server pid>-<random>``: ``sweep_stale`` removes the groups of servers
that are gone (killed with ``kill -9``), after killing whatever is still in them.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["JobCgroup", "create_job_cgroup", "pid_alive", "sweep_stale"]

_ROOT = Path("/sys/fs/cgroup")
_PREFIX = "opmarket-"
_V1 = ("memory", "pids", "cpu")


def _own_paths() -> dict[str, str]:
    """Controller (or ``""`` for v2) -> this process's group path, from /proc/self/cgroup."""
    out: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                out[name] = path
    return out


def _parents() -> dict[str, Path]:
    """Where job groups go: v1 controller -> folder, or ``{"": folder}`` on v2."""
    own = _own_paths()
    parents: dict[str, Path] = {}
    for name in _V1:
        base = _ROOT / name
        if (base / "cgroup.procs").exists() and name in own:
            parents[name] = base / own[name].lstrip("/")
    if parents:
        return parents
    if (_ROOT / "cgroup.controllers").exists() and "" in own:
        return {"": _ROOT / own[""].lstrip("/")}
    return {}


@dataclass
class JobCgroup:
    """The groups of one job (one per v1 controller, or one on v2) and what they enforce."""

    folders: list[Path] = field(default_factory=list)
    enforced: list[str] = field(default_factory=list)
    version: int = 1

    @property
    def procs_files(self) -> list[Path]:
        """The ``cgroup.procs`` files a process writes its pid into to join the job."""
        return [f / "cgroup.procs" for f in self.folders]

    def pids(self) -> set[int]:
        """Every process now in the job's groups."""
        found: set[int] = set()
        for procs in self.procs_files:
            with contextlib.suppress(OSError):
                found.update(int(p) for p in procs.read_text().split())
        return found

    def peak_memory_bytes(self) -> int | None:
        """The most memory the job used at once (pages, tmpfs files included), if known."""
        for folder in self.folders:
            for name in ("memory.max_usage_in_bytes", "memory.peak"):
                with contextlib.suppress(OSError, ValueError):
                    return int((folder / name).read_text())
        return None

    def reset_peak(self) -> bool:
        """Start counting the peak memory again (for the next job of a sandbox that serves
        several); whether it could be (cgroup v1 only: v2's ``memory.peak`` is not reset
        for all readers)."""
        return any(_write(f / "memory.max_usage_in_bytes", "0") for f in self.folders)

    def destroy(self) -> None:
        """Kill every process left in the job's groups, then remove the groups."""
        for folder in self.folders:
            _remove(folder)
        with _LOCK:
            _LIVE.pop(id(self), None)


# The groups of jobs still running: removed when this process exits normally (a stopping
# server's last jobs); after kill -9, ``sweep_stale`` in another process removes them.
_LIVE: dict[int, JobCgroup] = {}
_LOCK = threading.Lock()


@atexit.register
def _destroy_live() -> None:
    with _LOCK:
        live = list(_LIVE.values())
    for group in live:
        group.destroy()


def _write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
    except OSError:
        return False
    return True


def create_job_cgroup(memory_mb: int, max_pids: int, cpus: float) -> JobCgroup | None:
    """New groups bounding a job's memory (with swap), process count and CPU share; None
    when no cgroup hierarchy is writable here (not root, or not delegated)."""
    parents = _parents()
    if not parents:
        return None
    name = f"{_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}"
    group = JobCgroup(version=2 if "" in parents else 1)
    memory = memory_mb * 1024 * 1024
    try:
        if group.version == 2:
            parent = parents[""]
            # Controllers must be enabled for children; the parent may hold processes
            # (then the kernel refuses and the job runs without those limits).
            _write(parent / "cgroup.subtree_control", "+memory +pids +cpu")
            folder = parent / name
            folder.mkdir()
            group.folders.append(folder)
            if _write(folder / "memory.max", str(memory)):
                _write(folder / "memory.swap.max", "0")
                group.enforced.append(f"memory {memory_mb} MiB for the whole job")
            if _write(folder / "pids.max", str(max_pids)):
                group.enforced.append(f"at most {max_pids} processes")
            if _write(folder / "cpu.max", f"{int(cpus * 100_000)} 100000"):
                group.enforced.append(f"{cpus:g} CPU")
            if not group.enforced:
                group.destroy()
                return None
            return _register(group)
        for controller, parent in parents.items():
            folder = parent / name
            folder.mkdir()
            group.folders.append(folder)
            if controller == "memory" and _write(folder / "memory.limit_in_bytes", str(memory)):
                # With swap accounting, memory+swap gets the same bound: no escape to swap.
                _write(folder / "memory.memsw.limit_in_bytes", str(memory))
                group.enforced.append(f"memory {memory_mb} MiB for the whole job")
            elif controller == "pids" and _write(folder / "pids.max", str(max_pids)):
                group.enforced.append(f"at most {max_pids} processes")
            elif controller == "cpu" and _write(
                folder / "cpu.cfs_quota_us", str(int(cpus * 100_000))
            ):
                _write(folder / "cpu.cfs_period_us", "100000")
                group.enforced.append(f"{cpus:g} CPU")
    except OSError:
        group.destroy()
        return None
    if not group.enforced:
        group.destroy()
        return None
    return _register(group)


def _register(group: JobCgroup) -> JobCgroup:
    with _LOCK:
        _LIVE[id(group)] = group
    return group


def _remove(folder: Path) -> None:
    pauses = [0.002 * 2**i for i in range(5)] + [0.05] * 100  # about 5 s in all
    for pause in pauses:
        try:
            pids = (folder / "cgroup.procs").read_text().split()
        except OSError:
            pids = []
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            # the killed processes are still exiting: most often for a few milliseconds
            threading.Event().wait(pause)


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale() -> int:
    """Remove the job groups of server processes that no longer exist (and kill what is
    left in them); how many were removed."""
    removed = 0
    for parent in _parents().values():
        with contextlib.suppress(OSError):
            for folder in parent.iterdir():
                owner = folder.name.removeprefix(_PREFIX).split("-", 1)[0]
                if not folder.name.startswith(_PREFIX) or not owner.isdigit():
                    continue
                if pid_alive(int(owner)):
                    continue
                _remove(folder)
                removed += not folder.exists()
    return removed
