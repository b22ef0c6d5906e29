"""Running the harness (``_probe.py``) in the sandbox: its environment, the job and the
secret it must echo, and the result pipe read here, capped; what the pipeline decides from
comes back checked (``_report``).

Each validation gets a sandbox of its own, started for it and discarded after it. A
validation worker starts the sandbox of its next job as soon as its current one has ended
(``warm=True``), so that the interpreter, numpy and opmarket are loaded while it is idle:
that sandbox is a fresh bubblewrap with its own processes, tmpfs and input folder, which no
upload has touched before its own job is handed over (on a pipe, with the job's secret),
and it serves that job only. Nothing passes from one validation to the next: the previous
sandbox's processes and control group are gone before the next one starts.
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
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opmarket.web.sandbox._run import Limits, start_sandboxed
from opmarket.web.sandbox._started import Outcome, Started
from opmarket.web.validation._report import HarnessResult, ReportError, parse_harness

__all__ = ["discard_waiting", "run_probe", "start_ahead", "tail"]

_PROBE = Path(__file__).with_name("_probe.py")
_COMPILE = "import py_compile, sys; py_compile.compile(sys.argv[1], sys.argv[2], doraise=True)"

log = logging.getLogger("opmarket.web.validation")
_RESULT_CAP = 16 * 1024 * 1024
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
    that neither of a sandbox's two processes parses it again (a script given as source is
    compiled at every start, and never cached). Its source, when it cannot be compiled."""
    folder = Path(tempfile.mkdtemp(prefix=f"opmarket-job-{os.getpid()}-probe-"))  # 0700
    atexit.register(shutil.rmtree, folder, True)
    code = folder / "probe.pyc"
    try:
        subprocess.run(
            [interpreter, "-I", "-S", "-c", _COMPILE, str(_PROBE), str(code)],
            capture_output=True,
            timeout=120,
            check=True,
            cwd="/",
        )
        code.chmod(0o644)  # the sandbox's user reads it through its bind
    except (OSError, subprocess.SubprocessError) as exc:
        log.warning(
            "%s could not compile %s (%s): the sandbox runs its source", interpreter, _PROBE, exc
        )
        return "/input/probe.py", _PROBE
    return "/input/probe.pyc", code


def _compiled_probe(interpreter: str) -> tuple[str, Path]:
    """:func:`_probe_code`, compiled again where its file is gone: it lies in the temporary
    folder for the process's life, which may be months, and a cleaner of that folder
    removes files not read for days; every sandbox after would fail to start."""
    probe, code = _probe_code(interpreter)
    if not code.exists():
        _probe_code.cache_clear()
        probe, code = _probe_code(interpreter)
    return probe, code


def tail(data: bytes, limit: int = 4000) -> str:
    text = data.decode("utf-8", errors="replace").strip()
    return text if len(text) <= limit else "...\n" + text[-limit:]


def _drain(fd: int, sink: bytearray) -> None:
    with os.fdopen(fd, "rb") as pipe:
        while chunk := pipe.read(65536):
            if len(sink) + len(chunk) > _RESULT_CAP:
                sink.clear()  # too much: not the harness's result
                return
            sink.extend(chunk)


@dataclasses.dataclass(frozen=True, slots=True)
class _Kind:
    """What a sandbox is made with: a job may only use one made for the same."""

    limits: Limits
    interpreter: str
    private: tuple[Path, ...]


@dataclasses.dataclass(eq=False)
class _Sandbox:
    """One started harness waiting for its job: the sandbox, its job pipe, its result
    pipe's reader, and the host folder bound read-only at ``_INBOX``."""

    kind: _Kind
    started: Started
    job_w: int
    result: bytearray
    reader: threading.Thread
    folder: Path

    @classmethod
    def start(cls, kind: _Kind) -> _Sandbox:
        folder = Path(tempfile.mkdtemp(prefix=f"opmarket-job-{os.getpid()}-"))  # 0700
        inbox = folder / "in"
        inbox.mkdir()
        inbox.chmod(0o755)  # the sandbox's user reads it (the folder above keeps others out)
        job_r, job_w = os.pipe()
        result_r, result_w = os.pipe()
        raw = bytearray()
        reader = threading.Thread(target=_drain, args=(result_r, raw), daemon=True)
        reader.start()
        try:
            probe, code = _compiled_probe(kind.interpreter)
            started = start_sandboxed(
                [kind.interpreter, "-I", "-S", probe, "harness", str(job_r), str(result_w)],
                limits=kind.limits,
                interpreter=kind.interpreter,
                env=_env(),
                binds={probe: code, _INBOX: inbox},
                pass_fds=(job_r, result_w),
                private=kind.private,
            )
        except BaseException:
            os.close(job_w)
            shutil.rmtree(folder, ignore_errors=True)
            raise
        finally:
            os.close(job_r)
            os.close(result_w)  # the reader sees the end once every sandboxed copy is gone
        sandbox = cls(kind, started, job_w, raw, reader, folder)
        global _EXIT_HOOKED
        with _LOCK:
            _WAITING.add(sandbox)
            if not _EXIT_HOOKED:  # the first sandbox started: none may outlive the process
                atexit.register(discard_waiting)
                _EXIT_HOOKED = True
        return sandbox

    def hand_over(self, job: dict[str, Any], files: dict[str, Path]) -> bool:
        """Put ``files`` (names under the inbox: host files) where it reads them, and send
        it ``job``; False when it ended before it took the job, or was discarded (the
        process exiting: :func:`discard_waiting` took it first)."""
        with _LOCK:  # this thread owns it from here on, or another discards it
            if self not in _WAITING:
                return False
            _WAITING.discard(self)
        if not self.started.alive():
            return False
        inbox = self.folder / "in"
        try:
            for name, source in files.items():
                dest = inbox / name
                dest.parent.mkdir(exist_ok=True)
                dest.parent.chmod(0o755)
                shutil.copyfile(source, dest)
                dest.chmod(0o644)
        except OSError:
            self.discard()  # it would wait for ever for a job that never comes
            raise
        fd = self._job_fd()
        if fd < 0:
            return False
        try:
            with os.fdopen(fd, "wb") as pipe:
                pipe.write(json.dumps(job).encode())
        except BrokenPipeError:
            return False
        return True

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

    def path(self, name: str) -> str:
        """Where the sandbox reads the inbox's file ``name``."""
        return self.started.host_path(f"{_INBOX}/{name}")

    def finish(self) -> tuple[Outcome, bytes]:
        """Its end (see :meth:`Started.finish`) and what it wrote on the result pipe."""
        self._close_job()
        try:
            outcome = self.started.finish()
        finally:
            self.reader.join(30)
            shutil.rmtree(self.folder, ignore_errors=True)
        return outcome, bytes(self.result)

    def discard(self) -> None:
        """Kill it and remove its folder: it serves no job."""
        with _LOCK:
            _WAITING.discard(self)
        self._close_job()
        self.started.discard()
        self.reader.join(5)
        shutil.rmtree(self.folder, ignore_errors=True)


_WAITING: set[_Sandbox] = set()  # started, not yet handed a job: discarded at exit
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
    _NEXT.sandbox = _Sandbox.start(kind)


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
    """Run the harness in a sandbox of this job's own: its outcome, and its checked result
    or why none. ``warm``: once it ended, start the next job's sandbox in this thread."""
    kind = _Kind(limits, interpreter, tuple(private))
    files = {filename: wheel, **{f"deps/{d.name}": d for d in deps}}
    secret = secrets.token_hex(32)
    sandbox = _take(kind)
    for tried in range(2):  # a waiting sandbox that ended meanwhile: a new one, once
        if sandbox is None:
            sandbox = _Sandbox.start(kind)
        job = {
            "secret": secret,
            "wheel": sandbox.path(filename),
            "dist": dist,
            "gpu": gpu,
            "deps": [sandbox.path(f"deps/{d.name}") for d in deps],
        }
        if sandbox.hand_over(job, files) or tried:
            break  # a new one that ended before its job: its outcome says why
        sandbox.discard()
        sandbox = None
    assert sandbox is not None
    try:
        outcome, raw = sandbox.finish()
    finally:
        if warm:  # this job's sandbox is gone: the next one's starts now, apart from it
            with contextlib.suppress(Exception):  # the next job starts one itself then
                _NEXT.sandbox = _Sandbox.start(kind)
    try:
        return outcome, parse_harness(raw, secret)
    except ReportError as exc:
        return outcome, str(exc)
