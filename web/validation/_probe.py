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
import select
import signal
import socket
import struct
import subprocess
import sys
import traceback
import zipfile
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any


def _sibling(name: str) -> ModuleType:
    """The module ``name`` that the sandbox binds beside this script (compiled like it, or
    its source): the harness has no site-packages, and the zygote must not import
    ``opmarket.web`` (the server's dependencies are not the plugin's business)."""
    import importlib.util

    here = Path(__file__)
    spec = importlib.util.spec_from_file_location(name, here.with_name(name + here.suffix))
    assert spec is not None and spec.loader is not None, name
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if TYPE_CHECKING:
    from opmarket.web.validation import _reuse
elif __name__ == "__main__":
    _reuse = _sibling("_reuse")
else:
    from opmarket.web.validation import _reuse

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


def _zygote(argv: list[str]) -> int:
    sock = socket.socket(fileno=int(argv[0]))
    _load_own()
    protected = _reuse.non_dumpable()
    os.closerange(3, sock.fileno())  # nothing a plugin process could share with it
    os.closerange(sock.fileno() + 1, 1 << 16)
    start = _reuse.fingerprint()
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(sock, 65536, 4)
        except OSError:
            return 0
        if not message:
            return 0  # the harness ended
        if json.loads(message).get("check"):
            same = _reuse.reaped() and _reuse.fingerprint() == start and not _reuse.spent()
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
        """Whether it says nothing changed it since it started (see :func:`_reuse.fingerprint`)."""
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


def _restore(start: dict[str, Any], zygote: _Zygote) -> str:
    """Put the sandbox back as the harness found it after a job: "" when it is (then it
    may serve another), else what is not."""
    if not _reuse.kill_all_but({1, os.getpid(), zygote.proc.pid}):
        return "its processes could not all be killed"
    if _reuse.sockets_left():
        return "TCP sockets of its job outlive it (TIME_WAIT)"
    with contextlib.suppress(OSError):
        os.kill(zygote.proc.pid, signal.SIGCONT)  # a job may have stopped it
    if zygote.proc.poll() is not None or not zygote.unchanged():
        return "its zygote ended or was changed"
    if _reuse.fingerprint() != start["self"]:
        return "its harness was changed"
    if _reuse.spent():
        return "its harness used half its CPU time limit"
    _reuse.wipe(start["files"])
    now = _reuse.listing()
    if now != start["files"]:
        left = sorted(set(now or {}) ^ set(start["files"]))[:3]
        return f"its tmpfs folders could not be put back ({', '.join(left) or 'too many'})"
    return ""


def _harness(argv: list[str]) -> int:
    job_fd, result_fd = int(argv[0]), int(argv[1])
    protected = _reuse.non_dumpable()
    serving = "--serve" in argv[2:] and _reuse.own_sandbox()
    start = {"files": _reuse.listing(), "self": _reuse.fingerprint()} if serving else {}
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
