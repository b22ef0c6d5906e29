"""Running the harness (``_probe.py``) in the sandbox: its environment, each job and the
secret it must echo, and the result frames read here, capped; what the pipeline decides
from comes back checked (``_report``).

A validation worker keeps a started sandbox per thread (``warm=True``): it is started while
the worker is idle, so that the interpreter, numpy and opmarket are loaded before the
upload comes, and then serves this thread's validations one after the other, each in a
plugin process forked from the sandbox's zygote (an interpreter that loaded only numpy and
opmarket, and in which no plugin's code ever runs). After each job the harness puts the
sandbox back as it found it (every process of the job killed, its tmpfs folders back to
what they held, harness and zygote checked unchanged: ``_probe``) and says whether it did;
a sandbox it could not put back, one that printed too much or ran out of time, and one that
served :data:`MOST_JOBS` is ended, and the next job gets a new one. Nothing passes from
one validation to the next: ``tests/web/test_hostile_warm.py`` tries what a job could leave.
Without ``warm`` a sandbox serves one job and ends with it.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import json
import logging
import os
import secrets
import select
import shutil
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opmarket.web.sandbox._run import Limits, sandbox_problem, start_sandboxed
from opmarket.web.sandbox._started import Outcome, Started
from opmarket.web.validation._probe import REPORT_CAP, write_frame
from opmarket.web.validation._report import HarnessResult, ReportError, parse_harness

__all__ = ["discard_waiting", "run_probe", "start_ahead", "tail"]

_PROBE = Path(__file__).with_name("_probe.py")
#: The module the sandbox's script loads from beside it (``_probe._sibling``).
_SIBLING = "_reuse"
_COMPILE = (
    "import py_compile, sys\n"
    "for source, code in zip(sys.argv[1::2], sys.argv[2::2]):\n"
    "    py_compile.compile(source, code, doraise=True)"
)

log = logging.getLogger("opmarket.web.validation")
_INBOX = "/input/job"  # the job's files, bound read-only: empty until its hand-over


def _env() -> dict[str, str]:
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        # getpass.getuser() reads these first: the sandbox has no /etc/passwd.
        "USER": "sandbox",
        "LOGNAME": "sandbox",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0",
        # One thread per library: threads count against the process limit.
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    for name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):  # some CPUs need these
        if name in os.environ:
            env[name] = os.environ[name]
    return env


@functools.cache
def _probe_code(interpreter: str) -> tuple[str, Path]:
    """Where the sandbox runs the harness from, and the host file bound there: ``_probe.py``
    compiled once per process by ``interpreter`` (its bytecode is that interpreter's), so
    that none of a sandbox's processes parses it again (a script given as source is
    compiled at every start, and never cached), with the module it loads from beside it
    (:func:`_probe_binds`). Its source, when it cannot be compiled."""
    folder = Path(tempfile.mkdtemp(prefix=f"opmarket-job-{os.getpid()}-probe-"))  # 0700
    atexit.register(shutil.rmtree, folder, True)
    code = folder / "probe.pyc"
    pairs = [_PROBE, code, _PROBE.with_name(f"{_SIBLING}.py"), folder / f"{_SIBLING}.pyc"]
    try:
        subprocess.run(
            [interpreter, "-I", "-S", "-c", _COMPILE, *map(str, pairs)],
            capture_output=True,
            timeout=120,
            check=True,
            cwd="/",
        )
        for compiled in folder.iterdir():
            compiled.chmod(0o644)  # the sandbox's user reads them through their binds
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning(
            "%s could not compile %s (%s): the sandbox runs its source", interpreter, _PROBE, exc
        )
        return "/input/probe.py", _PROBE
    return "/input/probe.pyc", code


def _probe_binds(interpreter: str) -> tuple[str, dict[str, Path]]:
    """Where the sandbox runs the harness from, and what to bind for it: the script and
    the module beside it (compiled, or their sources), compiled again where a file is gone
    (the compiled ones lie in the temporary folder for the process's life, which may be
    months, and a cleaner of that folder removes files not read for days: every sandbox
    after would fail to start)."""
    for tried in range(2):
        probe, code = _probe_code(interpreter)
        inside = Path(probe).with_name(_SIBLING + code.suffix)
        binds = {probe: code, str(inside): code.with_name(_SIBLING + code.suffix)}
        if all(host.exists() for host in binds.values()) or tried:
            break
        _probe_code.cache_clear()
    return probe, binds


def tail(data: bytes, limit: int = 4000) -> str:
    text = data.decode("utf-8", errors="replace").strip()
    return text if len(text) <= limit else "...\n" + text[-limit:]


#: Jobs one sandbox serves before it is ended and a new one started (its harness's and
#: zygote's CPU time counts against its per-process CPU limit).
MOST_JOBS = 64
_FRAME = struct.Struct(">I")


def _read_result(fd: int, deadline: float, cap: int) -> tuple[bytes | None, str]:
    """The next result frame's payload on ``fd``, waiting until ``deadline``; else None and
    why: "" (the harness ended), "timeout", or that it sent more than ``cap`` bytes."""
    data = bytearray()
    size = -1
    while size < 0 or len(data) < _FRAME.size + size:
        left = deadline - time.monotonic()
        if left <= 0:
            return None, "timeout"
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return None, ""
        data.extend(chunk)
        if size < 0 and len(data) >= _FRAME.size:
            (size,) = _FRAME.unpack_from(data)
            if size > cap:
                return None, f"its harness sent a result of {size} bytes, more than {cap}"
    return bytes(data[_FRAME.size : _FRAME.size + size]), ""


def _text(value: object) -> bytes:
    """Output the harness carried in its result (as text with the bytes kept: ``_probe``)."""
    return value.encode("utf-8", "surrogateescape") if isinstance(value, str) else b""


@dataclasses.dataclass(frozen=True, slots=True)
class _Kind:
    """What a sandbox is made with: a job may only use one made for the same."""

    limits: Limits
    interpreter: str
    private: tuple[Path, ...]


@dataclasses.dataclass(eq=False)
class _Sandbox:
    """One started harness: the sandbox, its job pipe's writer, its result pipe's reader,
    the host folder bound read-only at ``_INBOX`` (a folder per job in it), and how many
    jobs it served."""

    kind: _Kind
    started: Started
    job_w: int
    result_r: int
    folder: Path
    served: int = 0
    peak_counted: bool = True  # the group's peak memory is this job's (or its first's)

    @classmethod
    def start(cls, kind: _Kind, *, serve: bool) -> _Sandbox:
        """A new sandbox waiting for its first job; ``serve``: for several jobs."""
        folder = Path(tempfile.mkdtemp(prefix=f"opmarket-job-{os.getpid()}-"))  # 0700
        inbox = folder / "in"
        inbox.mkdir()
        inbox.chmod(0o755)  # the sandbox's user reads it (the folder above keeps others out)
        job_r, job_w = os.pipe()
        result_r, result_w = os.pipe()
        try:
            probe, binds = _probe_binds(kind.interpreter)
            started = start_sandboxed(
                [kind.interpreter, "-I", "-S", probe, "harness", str(job_r), str(result_w)]
                # only a sandbox's harness may serve several jobs: it kills every process
                # it sees but its own between them (and checks it is one, too)
                + (["--serve"] if serve and not sandbox_problem(kind.limits) else []),
                limits=kind.limits,
                interpreter=kind.interpreter,
                env=_env(),
                binds={**binds, _INBOX: inbox},
                pass_fds=(job_r, result_w),
                private=kind.private,
            )
        except BaseException:
            os.close(job_w)
            os.close(result_r)
            shutil.rmtree(folder, ignore_errors=True)
            raise
        finally:
            os.close(job_r)
            os.close(result_w)  # the reader sees the end once every sandboxed copy is gone
        sandbox = cls(kind, started, job_w, result_r, folder)
        sandbox.wait_for_job()
        return sandbox

    def wait_for_job(self) -> None:
        """Put it among the sandboxes waiting for a job (discarded at exit)."""
        global _EXIT_HOOKED
        with _LOCK:
            _WAITING.add(self)
            if not _EXIT_HOOKED:  # the first sandbox started: none may outlive the process
                atexit.register(discard_waiting)
                _EXIT_HOOKED = True

    def hand_over(self, job: dict[str, Any], files: dict[str, Path]) -> bool:
        """Put ``files`` (names under this job's inbox folder: host files) where it reads
        them, and send it ``job``; False when it ended before it took the job, or was
        discarded (the process exiting: :func:`discard_waiting` took it first)."""
        with _LOCK:  # this thread owns it from here on, or another discards it
            if self not in _WAITING:
                return False
            _WAITING.discard(self)
        if not self.started.alive():
            return False
        inbox = self.folder / "in" / str(self.served)
        try:
            for name, source in files.items():
                dest = inbox / name
                dest.parent.mkdir(parents=True, exist_ok=True)
                for folder in (inbox, dest.parent):
                    folder.chmod(0o755)
                shutil.copyfile(source, dest)
                dest.chmod(0o644)
        except OSError:
            self.discard()  # it would wait for ever for a job that never comes
            raise
        if self.served and self.started.group is not None:
            self.peak_counted = self.started.group.reset_peak()
        try:
            write_frame(self.job_w, job)
        except OSError:  # it ended meanwhile: its end says why
            return False
        return True

    def path(self, name: str) -> str:
        """Where the sandbox reads this job's inbox file ``name``."""
        return self.started.host_path(f"{_INBOX}/{self.served}/{name}")

    def result(self, deadline: float, *, keep: bool) -> tuple[Outcome, bytes, bool]:
        """This job's outcome and its harness's result (b"": none came), read until
        ``deadline``; and whether the sandbox still serves (``keep``: it may, when its
        harness put it back as it found it)."""
        limits = self.kind.limits
        marks = len(self.started.stdout), len(self.started.stderr)
        cap = 8 * (REPORT_CAP + 2 * limits.max_output_bytes)
        raw, why = _read_result(self.result_r, deadline, cap)
        if raw is None:  # it ended, ran out of time or said too much: so does the sandbox
            stop = (
                f"still running after {limits.timeout_s:g} s; stopped" if why == "timeout" else why
            )
            return self._end(deadline, stop), b"", False
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        data = data if isinstance(data, dict) else {}
        problem = ""
        if data.get("output_over"):
            problem = f"printed more than {limits.max_output_bytes} bytes; stopped"
        out, err = _text(data.get("stdout")), _text(data.get("stderr"))
        self.served += 1
        shutil.rmtree(self.folder / "in" / str(self.served - 1), ignore_errors=True)
        reusable = data.get("reusable") is True and self.started.alive()
        if keep and not reusable:
            log.info(
                "a validation sandbox ends: %s", str(data.get("not_reusable", "it ended"))[:200]
            )
        if not (keep and reusable and self.served < MOST_JOBS):
            ended = self._end(deadline, "")
            outcome = dataclasses.replace(
                ended,
                stdout=out + ended.stdout[marks[0] :],
                stderr=err + ended.stderr[marks[1] :],
                problem=problem or ended.problem,
            )
            return outcome, raw, False
        group = self.started.group
        protections = list(self.started.protections)
        if self.served > 1:
            protections.append(
                f"job {self.served} of a sandbox that was put back as it was after each "
                "job (every process of the last killed, its tmpfs folders emptied)"
            )
        outcome = Outcome(
            0,
            out + bytes(self.started.stdout[marks[0] :]),
            err + bytes(self.started.stderr[marks[1] :]),
            problem,
            protections,
            group.peak_memory_bytes() if group is not None and self.peak_counted else None,
        )
        self.wait_for_job()
        return outcome, raw, True

    def _end(self, deadline: float, stop: str) -> Outcome:
        """End it (its harness ends when its job pipe does) and say how it ended."""
        self._close_job()
        try:
            return self.started.finish(deadline, stop=stop)
        finally:
            self._close_result()
            shutil.rmtree(self.folder, ignore_errors=True)

    def _job_fd(self) -> int:
        """The job pipe's descriptor, now this caller's alone to write or close (-1: another
        took it), so a descriptor is never closed twice nor written after its close."""
        with _LOCK:
            fd, self.job_w = self.job_w, -1
        return fd

    def _close_job(self) -> None:
        fd = self._job_fd()
        if fd >= 0:
            os.close(fd)

    def _close_result(self) -> None:
        with _LOCK:
            fd, self.result_r = self.result_r, -1
        if fd >= 0:
            os.close(fd)

    def discard(self) -> None:
        """Kill it and remove its folder: it serves no more jobs."""
        with _LOCK:
            _WAITING.discard(self)
        self._close_job()
        self.started.discard()
        self._close_result()
        shutil.rmtree(self.folder, ignore_errors=True)


_WAITING: set[_Sandbox] = set()  # waiting for a job (their first or next): discarded at exit
_LOCK = threading.Lock()
_EXIT_HOOKED = False  # discard_waiting registered with atexit (when the first one started)
# Each worker thread's next sandbox: its processes die with the thread that started them
# (bubblewrap's --die-with-parent follows the thread), so only that thread uses it.
_NEXT = threading.local()


def discard_waiting() -> None:
    """Discard every started sandbox that no job has used yet (a hand-over racing this one
    finds its sandbox gone and says so: it never writes to a closed pipe)."""
    with _LOCK:
        waiting = list(_WAITING)
        _WAITING.clear()
    for sandbox in waiting:
        sandbox.discard()


def _take(kind: _Kind) -> _Sandbox | None:
    """This thread's waiting sandbox, if one of ``kind`` was started (another is discarded)."""
    sandbox: _Sandbox | None = getattr(_NEXT, "sandbox", None)
    _NEXT.sandbox = None
    if sandbox is not None and sandbox.kind != kind:
        sandbox.discard()
        return None
    return sandbox


def start_ahead(limits: Limits, *, interpreter: str, private: Sequence[Path]) -> None:
    """Start this thread's next sandbox now (a worker thread before its first job), unless
    one of that kind waits already."""
    kind = _Kind(limits, interpreter, tuple(private))
    sandbox: _Sandbox | None = getattr(_NEXT, "sandbox", None)
    if sandbox is not None and sandbox.kind == kind and sandbox.started.alive():
        return
    if sandbox is not None:
        sandbox.discard()
    _NEXT.sandbox = None
    _NEXT.sandbox = _Sandbox.start(kind, serve=True)


def run_probe(
    wheel: Path,
    filename: str,
    dist: str,
    limits: Limits,
    *,
    gpu: bool,
    interpreter: str,
    private: Sequence[Path],
    deps: Sequence[Path] = (),
    warm: bool = False,
) -> tuple[Outcome, HarnessResult | str]:
    """Run the harness's job in a sandbox: its outcome, and its checked result or why
    none. ``warm``: the sandbox this thread's last job left (or a new one), which then
    serves this thread's next job too; when it cannot, a new one starts for it now."""
    kind = _Kind(limits, interpreter, tuple(private))
    files = {filename: wheel, **{f"deps/{d.name}": d for d in deps}}
    secret = secrets.token_hex(32)
    sandbox = _take(kind)
    for tried in range(2):  # a waiting sandbox that ended meanwhile: a new one, once
        if sandbox is None:
            sandbox = _Sandbox.start(kind, serve=warm)
        job = {
            "secret": secret,
            "wheel": sandbox.path(filename),
            "dist": dist,
            "gpu": gpu,
            "deps": [sandbox.path(f"deps/{d.name}") for d in deps],
            "max_output": limits.max_output_bytes,
        }
        if sandbox.hand_over(job, files) or tried:
            break  # a new one that ended before its job: its outcome says why
        sandbox.discard()
        sandbox = None
    assert sandbox is not None
    kept = False
    try:
        outcome, raw, kept = sandbox.result(time.monotonic() + limits.timeout_s, keep=warm)
    except BaseException:
        sandbox.discard()
        raise
    finally:
        if warm:  # this one, or (once it is gone) the next job's, started now apart from it
            with contextlib.suppress(Exception):  # the next job starts one itself then
                _NEXT.sandbox = sandbox if kept else _Sandbox.start(kind, serve=True)
    try:
        return outcome, parse_harness(raw, secret)
    except ReportError as exc:
        return outcome, str(exc)
