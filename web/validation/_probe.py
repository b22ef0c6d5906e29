"""The part of validation that runs inside the sandbox: a harness, and a zygote that forks
each job's plugin process.

``python -I -S _probe.py harness JOB_FD RESULT_FD [--serve]`` is the harness (the standard
library only: no site-packages to start). It makes itself non-dumpable (a process of the
same user can then neither read its memory nor open its file descriptors through /proc, nor
ptrace it) and starts the zygote (``_probe.py zygote SOCKET_FD``), which imports what judges
the plugin (numpy, opmarket: :data:`_OWN`), makes itself non-dumpable, closes every file it
does not need, and then forks one plugin process per job. No plugin's code ever runs in the
zygote: each plugin process starts as a copy of an interpreter that loaded only that. Both
are started before the job exists, so that a validation worker starts its sandbox while it
is idle (``_harness``).

Jobs come on JOB_FD and results go on RESULT_FD as frames (:func:`write_frame`): a job is
one JSON object with the job's secret, the wheel to unpack, its distribution name, whether
a GPU is there, the dependency wheels found on this index and the output cap. The harness
unpacks the wheel into ``target`` in its working folder (each dependency into ``deps``
beside it) and asks the zygote for a plugin process, handing it four pipes: its job (the
folder and the name, written by the harness: never the secret, and never seen by the
zygote), its report, its stdout and its stderr. When that process has ended the harness
writes one frame: the secret, how the process ended, what it printed (capped) and what it
reported on its report pipe.

Without ``--serve`` the harness serves one job and ends (its sandbox ends with it). With
``--serve``, which only a bubblewrap sandbox gets (its own PID namespace, tmpfs folders and
IPC namespace; the harness checks that it is one), it serves jobs until JOB_FD ends, and
between two jobs puts the sandbox back as it found it (:func:`_restore`): every process
but the sandbox's init, the harness and the zygote killed, the tmpfs folders holding what
they held at the start, the zygote resumed (a job may have stopped it), and harness and
zygote checked unchanged in what a process of the same user may change in another
(resource limits, priority, CPU affinity, scheduling, their session's priority). A
result says ``reusable`` only when all of that held; the supervisor ends the sandbox
otherwise. SysV IPC and POSIX message queues, which would outlive a job's processes, are
refused by the seccomp filter.

The plugin's process imports the plugin: anything it reports is what the plugin's code says
about itself, and the supervisor treats it so (``_report``). What it prints is the log only.
This file must not import ``opmarket.web`` (the server's dependencies are not the plugin's
business) and runs with the interpreter's standard library and opmarket only.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import resource
import select
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import traceback
import zipfile
from pathlib import Path
from typing import Any

#: Most bytes of report the harness accepts from the plugin's process.
REPORT_CAP = 8 * 1024 * 1024


def _step(name: str, status: str, *lines: str) -> dict[str, Any]:
    return {"name": name, "status": status, "log": [line for line in lines if line]}


def _signature(op: Any) -> str:
    ins = ", ".join(a.spec for a in op.inputs)
    outs = ", ".join(a.spec for a in op.outputs)
    attrs = "; ".join(a.spec for a in op.attrs)
    return f"{op.name}({ins}) -> ({outs})" + (f" [{attrs}]" if attrs else "")


def unpack(wheel: str, target: Path) -> None:
    """Unpack a wheel whose member names were checked outside (inspect), as an installer
    would: purelib/platlib ``.data`` folders go to the top, other ``.data`` is left out."""
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            parts = info.filename.split("/")
            if len(parts) > 2 and parts[0].endswith(".data") and parts[1] in ("purelib", "platlib"):
                parts = parts[2:]
            elif parts[0].endswith(".data"):
                continue
            if info.is_dir():
                continue
            out = target.joinpath(*parts)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(zf.read(info))


def probe(target: str, dist_name: str, gpu: bool) -> dict[str, Any]:
    """Load the distribution's plugins from ``target`` and say what they register and how
    their kernels compare with their references (run in the plugin's process)."""
    import importlib.metadata

    from packaging.utils import canonicalize_name

    sys.path.insert(0, target)
    steps: list[dict[str, Any]] = []
    out: dict[str, Any] = {"steps": steps}
    dists = [
        d
        for d in importlib.metadata.distributions(path=[target])
        if canonicalize_name(d.metadata["Name"] or "") == canonicalize_name(dist_name)
    ]
    if not dists:
        steps.append(_step("entry point", "failed", f"{dist_name} is not installed in {target}"))
        return out
    dist = dists[0]
    eps = [ep for ep in dist.entry_points if ep.group == "opmarket"]
    if not eps:
        steps.append(
            _step("entry point", "failed", "the wheel declares no entry point in group 'opmarket'")
        )
        return out
    steps.append(_step("entry point", "passed", *(f"{ep.name} = {ep.value}" for ep in eps)))

    from opmarket import registry

    reg = registry.new_registry()
    infos = registry.load_plugins_from([target], registry=reg, distribution=dist_name)
    failed = [i for i in infos if i.status != "loaded"]
    if failed:
        steps.append(_step("load", "failed", *(f"{i.name}: {i.error}" for i in failed)))
        return out
    steps.append(
        _step(
            "load", "passed", *(f"{i.name}: {len(i.ops)} op(s): {', '.join(i.ops)}" for i in infos)
        )
    )
    ops: list[Any] = []
    kernels: list[Any] = []
    for info in infos:
        snap = reg.snapshot(source=info.source)
        ops.extend(snap.ops)
        kernels.extend(snap.kernels)
    from opmarket.sdk import OpSet, opset_to_json

    opset = OpSet.of(
        sorted(ops, key=lambda o: o.name),
        kernels,
        name=str(canonicalize_name(dist_name)),
        version=dist.version,
    )
    out["opset"] = opset_to_json(opset)
    out["ops"] = [
        {"name": o.name, "signature": _signature(o), "summary": o.summary} for o in opset.ops
    ]
    # A plugin may declare no op of its own: a GPU companion registers kernels for its base
    # plugin's ops, and only where a GPU is (the server holds it to its manifest).
    companion = "" if ops else "; no op of its own (kernels for other plugins' ops)"
    steps.append(
        _step(
            "snapshot",
            "passed",
            f"{len(opset.ops)} op(s), {len(opset.kernels)} kernel(s) registered here{companion}",
        )
    )
    names = [o.name for o in opset.ops]
    devices = ["CPU", "GPU"] if gpu else ["CPU"]
    report = registry.check_conformance(names, registry=reg, devices=devices)
    out["kernels"] = [
        {
            "op": r.op,
            "device": r.device,
            "dtypes": ", ".join(f"{k}={v}" for k, v in r.types),
            "status": r.status,
            "message": r.message,
        }
        for r in report.results
    ]
    out["registered_kernels"] = sorted(
        {f"{name}\t{k.device}" for name in names for k in reg.kernels(name)}
    )
    steps.append(
        _step(
            "conformance",
            "failed" if report.failures else "passed",
            *(str(r) for r in report.results),
        )
    )
    return out


#: What the plugin's process imports to judge the plugin: all of it is imported before the
#: wheel or its dependencies are importable, so that none of theirs stands in for it.
_OWN = {
    "importlib.metadata": (),
    "numpy": (),
    "numpy.random": (),  # conformance's generators: loaded while waiting, not per job
    "ml_dtypes": (),  # numpy's types for bfloat16 and the float8s (opmarket.sdk's dtypes)
    "packaging.utils": (),
    "pluggy": (),
    "opmarket.sdk": ("OpSet", "opset_to_json"),  # lazy exports: their modules, loaded now
    "opmarket.registry": ("new_registry", "load_plugins_from", "check_conformance"),
}


#: Most bytes of a job frame the harness reads (the supervisor writes it).
JOB_CAP = 1024 * 1024
_HEADER = struct.Struct(">I")
#: The sandbox's writable folders (private tmpfs): what a job writes there is removed.
SCRATCH = ("/job", "/tmp", "/dev/shm")
#: Most entries the tmpfs folders may hold between two jobs for the sandbox to serve again.
_MOST_ENTRIES = 10_000


def write_frame(fd: int, value: dict[str, Any]) -> None:
    """Write ``value`` on ``fd`` as one frame: its JSON's length (4 bytes, big-endian),
    then its JSON."""
    data = json.dumps(value).encode()
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def _read_exactly(fd: int, size: int) -> bytes | None:
    data = bytearray()
    while len(data) < size:
        chunk = os.read(fd, min(size - len(data), 1 << 20))
        if not chunk:
            return None
        data.extend(chunk)
    return bytes(data)


def read_frame(fd: int, cap: int = JOB_CAP) -> dict[str, Any] | None:
    """The next frame's JSON object on ``fd``; None when it ended (or sent a frame over
    ``cap`` bytes or one that is not a JSON object: its writer is the supervisor, and
    nothing it did not mean is served)."""
    header = _read_exactly(fd, _HEADER.size)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    data = _read_exactly(fd, size) if size <= cap else None
    try:
        value = json.loads(data) if data is not None else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def read_job(fd: int, cap: int = JOB_CAP) -> dict[str, Any]:
    """The JSON object written on ``fd`` until its writer closed it ({} when none came)."""
    data = bytearray()
    with os.fdopen(fd, "rb") as pipe:
        while len(data) <= cap and (chunk := pipe.read(65536)):
            data.extend(chunk)
    try:
        job = json.loads(data) if data and len(data) <= cap else {}
    except ValueError:
        return {}
    return job if isinstance(job, dict) else {}


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


def _non_dumpable() -> bool:
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


def _fingerprint() -> list[Any]:
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


def _spent() -> bool:
    """Whether this process used half its CPU time limit (``RLIMIT_CPU``, which counts
    every job it served): it must not serve another, which could find the limit hit."""
    soft = resource.getrlimit(resource.RLIMIT_CPU)[0]
    used = resource.getrusage(resource.RUSAGE_SELF)
    return soft != resource.RLIM_INFINITY and used.ru_utime + used.ru_stime > soft / 2


# -- the zygote and its plugin processes ----------------------------------------------


def _load_own() -> None:
    import importlib

    # Imports make many objects and free few: with the collector on, its passes over the
    # young objects would cost a third of the imports' CPU and find almost nothing. What
    # they made is then moved out of the collector's sight (freeze), and the plugin's code
    # runs with a collector as usual.
    gc.disable()
    try:
        for name, exports in _OWN.items():
            module = importlib.import_module(name)
            for export in exports:
                getattr(module, export)
    finally:
        gc.freeze()
        gc.enable()


def _reaped() -> bool:
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


def _zygote(argv: list[str]) -> int:
    sock = socket.socket(fileno=int(argv[0]))
    _load_own()
    protected = _non_dumpable()
    os.closerange(3, sock.fileno())  # nothing a plugin process could share with it
    os.closerange(sock.fileno() + 1, 1 << 16)
    start = _fingerprint()
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(sock, 65536, 4)
        except OSError:
            return 0
        if not message:
            return 0  # the harness ended
        if json.loads(message).get("check"):
            same = _reaped() and _fingerprint() == start and not _spent()
            sock.send(json.dumps({"same": same}).encode())
            continue
        if len(fds) != 4 or not protected:
            return 1  # the harness sent no pipes, or the zygote could not be protected
        pid = os.fork()
        if pid == 0:
            code = 70
            try:
                sock.close()
                code = _plugin(*fds)
            finally:
                os._exit(code)
        for fd in fds:
            os.close(fd)
        sock.send(json.dumps({"pid": pid}).encode())
        _, status = os.waitpid(pid, 0)
        sock.send(json.dumps({"exit": os.waitstatus_to_exitcode(status)}).encode())


def _plugin(job_fd: int, report_fd: int, out_fd: int, err_fd: int) -> int:
    """One job's plugin process, forked from the zygote: its output on its own pipes, its
    job read from the harness, the plugin probed, the report written."""
    os.dup2(out_fd, 1)
    os.dup2(err_fd, 2)
    os.close(out_fd)
    os.close(err_fd)
    # Its own standard input: the zygote's /dev/null is one open file for every process
    # forked from it, whose flags and owner (fcntl) one job could set for the next.
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.close(null)
    for name in ("random", "numpy.random"):  # seeded anew, as in a process of its own
        module = sys.modules.get(name)
        if module is not None:
            module.seed()
    job = read_job(job_fd)
    if not job:
        return 0
    if job.get("deps"):  # after the environment's own folders: importable, never in its
        # place (nor scanned for plugins)
        sys.path.append(str(job["deps"]))
    try:
        result = probe(str(job["target"]), str(job["dist"]), bool(job.get("gpu")))
    except BaseException:
        result = {"steps": [_step("load", "failed", traceback.format_exc())]}
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    with os.fdopen(report_fd, "w") as report:
        json.dump(result, report)
    return 0


# -- the harness ----------------------------------------------------------------------


class _Zygote:
    """The harness's zygote: its process and the socket it takes orders on."""

    def __init__(self) -> None:
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.proc = subprocess.Popen(
            [sys.executable, "-I", __file__, "zygote", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            close_fds=True,
            stdin=subprocess.DEVNULL,
        )
        theirs.close()

    def answer(self, timeout: float | None) -> dict[str, Any] | None:
        """Its next message (None: it ended, or said nothing within ``timeout``)."""
        try:
            ready, _, _ = select.select([self.sock], [], [], timeout)
            message = self.sock.recv(65536) if ready else b""
            value = json.loads(message) if message else None
        except (OSError, ValueError):
            return None
        return value if isinstance(value, dict) else None

    def unchanged(self) -> bool:
        """Whether it says nothing changed it since it started (see :func:`_fingerprint`)."""
        try:
            self.sock.send(b'{"check": true}')
        except OSError:
            return False
        answer = self.answer(10.0)
        return answer is not None and answer.get("same") is True


class _Streams:
    """The plugin process's report, stdout and stderr, each read up to its cap."""

    def __init__(self, report: int, out: int, err: int, cap: int) -> None:
        self.caps = {report: REPORT_CAP, out: cap, err: cap}
        self.data = {fd: bytearray() for fd in self.caps}
        self.open = set(self.caps)
        self.over: set[int] = set()
        for fd in self.caps:
            os.set_blocking(fd, False)

    def read(self, fd: int) -> None:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return
        if not chunk:
            self.open.discard(fd)
        elif len(self.data[fd]) + len(chunk) > self.caps[fd]:
            self.over.add(fd)  # the rest is not read: the process is stopped
            self.open.discard(fd)
        else:
            self.data[fd].extend(chunk)

    def close(self) -> None:
        for fd in self.caps:
            os.close(fd)


def _collect(streams: _Streams, zygote: _Zygote, pid: int) -> int | None:
    """Read the plugin process's pipes until it ended (processes it forked may hold them
    open: their end is not waited for), stopping it when one says more than its cap; its
    exit code, as the zygote saw it (None: the zygote ended, and with it what knew it)."""
    try:
        ended_fd = os.pidfd_open(pid)  # its end, even while a job keeps the zygote stopped
    except OSError:
        ended_fd = -1  # it ended long ago, or an old kernel: the zygote says when
    code: int | None = None
    ended = heard = False
    try:
        while True:
            waiting: list[Any] = [*streams.open]
            waiting += [] if heard else [zygote.sock]
            waiting += [] if ended or ended_fd < 0 else [ended_fd]
            ready, _, _ = select.select(waiting, [], [], 0 if ended else None)
            if ended and not ready:
                break  # what was written before its end is read
            for item in ready:
                if item is zygote.sock:
                    answer = zygote.answer(0)
                    code = answer.get("exit") if answer else None
                    ended = heard = True
                elif item == ended_fd:
                    ended = True
                else:
                    streams.read(item)
            if streams.over:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            if ended and heard and not streams.open:
                break
    finally:
        if ended_fd >= 0:
            os.close(ended_fd)
    for _ in range(0 if heard else 20):  # a job may have stopped the zygote: resume it
        with contextlib.suppress(OSError):
            os.kill(zygote.proc.pid, signal.SIGCONT)
        answer = zygote.answer(0.1)
        if answer is not None or zygote.proc.poll() is not None:
            return answer.get("exit") if answer else None
    return code


def _text(data: bytearray) -> str:
    return data.decode("utf-8", "surrogateescape")  # JSON carries it; the bytes come back


def _run_job(job: dict[str, Any], zygote: _Zygote, protected: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"secret": str(job.get("secret", "")), "protected": protected}
    target = Path("target").absolute()
    deps = [str(d) for d in job.get("deps", [])]
    try:
        unpack(str(job["wheel"]), target)
        for dep in deps:  # its dependencies from this index, beside it (_deps)
            unpack(dep, Path("deps").absolute())
    except (OSError, KeyError, zipfile.BadZipFile) as exc:
        out["install_error"] = f"{type(exc).__name__}: {exc}"
        return out
    pipes = [os.pipe() for _ in range(4)]  # its job, report, stdout, stderr
    theirs = [pipes[0][0], *(w for _, w in pipes[1:])]
    try:
        socket.send_fds(zygote.sock, [b"{}"], theirs)
        sent = True
    except OSError:
        sent = False
    finally:
        for fd in theirs:
            os.close(fd)
    order = {
        "target": str(target),
        "dist": str(job["dist"]),
        "gpu": bool(job.get("gpu")),
        "deps": str(Path("deps").absolute()) if deps else "",
    }
    with contextlib.suppress(BrokenPipeError), os.fdopen(pipes[0][1], "wb") as pipe:
        pipe.write(json.dumps(order).encode())
    report_fd, out_fd, err_fd = (r for r, _ in pipes[1:])
    streams = _Streams(report_fd, out_fd, err_fd, int(job.get("max_output", 4 << 20)))
    try:
        started = zygote.answer(None) if sent else None
        pid = started.get("pid") if started else None
        if not isinstance(pid, int):  # the zygote is gone: how it ended says why
            zygote.proc.kill()
            out["returncode"] = zygote.proc.wait()
            return out
        code = _collect(streams, zygote, pid)
        out["returncode"] = -signal.SIGKILL if code is None else code
        out["stdout"] = _text(streams.data[out_fd])
        out["stderr"] = _text(streams.data[err_fd])
        if out_fd in streams.over or err_fd in streams.over:
            out["output_over"] = True
        if report_fd in streams.over:
            out["report_error"] = f"reported more than {REPORT_CAP} bytes"
        else:
            data = streams.data[report_fd]
            try:
                out["report"] = json.loads(data) if data else None
            except ValueError as exc:
                out["report_error"] = f"sent a report that is not JSON: {exc}"
    finally:
        streams.close()
    return out


def _own_sandbox() -> bool:
    """Whether this runs as a bubblewrap sandbox's command: its own PID namespace (whose
    init is bwrap, this process's parent) and its tmpfs folders."""
    try:
        init = Path("/proc/1/comm").read_text().strip()
    except OSError:
        return False
    return os.getppid() == 1 and init == "bwrap" and all(map(os.path.ismount, SCRATCH))


def _listing() -> dict[str, list[int]] | None:
    """Every file and folder in the tmpfs folders (not what is mounted inside them): its
    type, mode and owner; None when there are too many or one cannot be read."""
    found: dict[str, list[int]] = {}
    for root in SCRATCH:
        try:
            device = os.lstat(root).st_dev
        except OSError:
            continue
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


def _wipe(keep: dict[str, list[int]]) -> None:
    """Remove from the tmpfs folders everything not in ``keep`` and give what is in it its
    mode again (the folders of ``keep`` are walked, what is not kept is removed whole)."""
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


def _kill_all_but(spare: set[int]) -> bool:
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


def _sockets_left() -> bool:
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


def _restore(start: dict[str, Any], zygote: _Zygote) -> str:
    """Put the sandbox back as the harness found it after a job: "" when it is (then it
    may serve another), else what is not."""
    if not _kill_all_but({1, os.getpid(), zygote.proc.pid}):
        return "its processes could not all be killed"
    if _sockets_left():
        return "TCP sockets of its job outlive it (TIME_WAIT)"
    with contextlib.suppress(OSError):
        os.kill(zygote.proc.pid, signal.SIGCONT)  # a job may have stopped it
    if zygote.proc.poll() is not None or not zygote.unchanged():
        return "its zygote ended or was changed"
    if _fingerprint() != start["self"]:
        return "its harness was changed"
    if _spent():
        return "its harness used half its CPU time limit"
    _wipe(start["files"])
    now = _listing()
    if now != start["files"]:
        left = sorted(set(now or {}) ^ set(start["files"]))[:3]
        return f"its tmpfs folders could not be put back ({', '.join(left) or 'too many'})"
    return ""


def _harness(argv: list[str]) -> int:
    job_fd, result_fd = int(argv[0]), int(argv[1])
    protected = _non_dumpable()
    serving = "--serve" in argv[2:] and _own_sandbox()
    start = {"files": _listing(), "self": _fingerprint()} if serving else {}
    zygote = _Zygote()
    try:
        while (job := read_frame(job_fd)) is not None:
            out = _run_job(job, zygote, protected)
            why = "it serves one job"
            if serving:
                why = _restore(start, zygote) if start["files"] is not None else "no listing"
            out["reusable"], out["not_reusable"] = not why, why
            write_frame(result_fd, out)
            if not out["reusable"]:
                break
    finally:
        zygote.proc.kill()
        zygote.proc.wait()
    return 0


def main(argv: list[str]) -> int:
    """``harness ...`` or ``zygote ...`` (see the module's docstring)."""
    if argv[:1] == ["harness"]:
        return _harness(argv[1:])
    if argv[:1] == ["zygote"]:
        return _zygote(argv[1:])
    print(f"usage: {Path(__file__).name} harness|zygote ...", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
