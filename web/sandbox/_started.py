"""A sandboxed command that has been started: its output read as it comes, its end waited
for with the wall-clock timeout counted from :meth:`Started.finish`, and everything it left
(its control group, a scratch folder) removed when it ends or is discarded.

Starting and finishing are apart so that validation can start the next job's sandbox
before the job exists (``_harness``): the command then waits, its interpreter and libraries
loaded, for its input on a pipe, and its timeout runs from the hand-over. Nothing here
runs a second command in it; the command itself may serve several jobs (``_harness``), each
with its own deadline, and :meth:`Started.finish` takes the last one's.
"""

from __future__ import annotations

import contextlib
import io
import os
import select
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from opmarket.web.sandbox._cgroup import JobCgroup

__all__ = ["Outcome", "Started"]


@dataclass(slots=True)
class Outcome:
    """How the command ended; ``problem`` says why it was stopped, when it was."""

    returncode: int
    stdout: bytes
    stderr: bytes
    problem: str = ""
    protections: list[str] = field(default_factory=list)
    peak_memory_bytes: int | None = None


def _reader(stream: io.BufferedReader, sink: bytearray, cap: int, over: threading.Event) -> None:
    while chunk := stream.read1(65536):
        if len(sink) + len(chunk) > cap:
            sink.extend(chunk[: max(cap - len(sink), 0)])
            over.set()
            return
        sink.extend(chunk)


class _Ended:
    """Waits for a child's end without reaping it (a pidfd; polling where there is none)."""

    def __init__(self, pid: int) -> None:
        try:
            self.fd = os.pidfd_open(pid)
        except (AttributeError, OSError):  # an old kernel: the waits are the poll's pauses
            self.fd = -1

    def wait(self, timeout: float) -> None:
        if self.fd < 0:
            time.sleep(timeout)
        else:
            select.select([self.fd], [], [], timeout)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


@dataclass(eq=False)
class Started:
    """One started sandboxed command (see the module's docstring)."""

    proc: subprocess.Popen[bytes]
    timeout_s: float  # from the hand-over (:meth:`finish`)
    max_output_bytes: int
    protections: list[str]
    group: JobCgroup | None
    bwrapped: bool
    inputs: Mapping[str, Path]  # its ``/input`` paths and the host paths behind them
    scratch: Path | None = None
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    over: threading.Event = field(default_factory=threading.Event)
    readers: list[threading.Thread] = field(default_factory=list)
    ended: bool = False

    @classmethod
    def launch(
        cls,
        command: list[str],
        timeout_s: float,
        max_output_bytes: int,
        env: Mapping[str, str],
        *,
        cwd: str,
        pass_fds: Sequence[int],
        protections: list[str],
        group: JobCgroup | None,
        bwrapped: bool,
        inputs: Mapping[str, Path],
        scratch: Path | None,
    ) -> Started:
        """Start ``command`` (the sandbox's whole command line) and its output readers."""
        proc = subprocess.Popen(
            command,
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            pass_fds=tuple(pass_fds),
        )
        started = cls(
            proc,
            timeout_s,
            max_output_bytes,
            protections,
            group,
            bwrapped,
            dict(inputs),
            scratch,
        )
        for stream, sink in ((proc.stdout, started.stdout), (proc.stderr, started.stderr)):
            assert isinstance(stream, io.BufferedReader)
            reader = threading.Thread(
                target=_reader,
                daemon=True,
                args=(stream, sink, max_output_bytes, started.over),
            )
            reader.start()
            started.readers.append(reader)
        return started

    def alive(self) -> bool:
        """Whether it still runs (and has printed no more than it may)."""
        return not self.ended and self.proc.poll() is None and not self.over.is_set()

    def host_path(self, inside: str) -> str:
        """Where the command finds ``inside`` (a path under ``/input``): the same path in
        the sandbox, the host file behind it when it runs unsandboxed."""
        if self.bwrapped:
            return inside
        for dest in sorted(self.inputs, key=len, reverse=True):
            if inside == dest or inside.startswith(dest + "/"):
                return str(self.inputs[dest]) + inside[len(dest) :]
        return inside

    def finish(self, deadline: float | None = None, *, stop: str = "") -> Outcome:
        """Wait for its end, at most ``timeout_s`` from now (or until ``deadline``, a
        ``time.monotonic()`` time: a job's, handed over earlier); then kill what is left
        of it, remove its group, and say how it ended. ``stop``: end it now, for that
        reason."""
        problem = stop
        if deadline is None:
            deadline = time.monotonic() + self.timeout_s
        ended = _Ended(self.proc.pid)
        try:
            while not stop and self.proc.poll() is None and not self.over.is_set():
                if time.monotonic() >= deadline:
                    problem = f"still running after {self.timeout_s:g} s; stopped"
                    break
                ended.wait(0.05)  # wakes as it ends: a poll's pause would add to each job
        finally:
            ended.close()
        peak = self._end()
        if self.over.is_set() and not problem:
            problem = f"printed more than {self.max_output_bytes} bytes; stopped"
        code = self.proc.returncode
        if code > 128 and self.bwrapped:  # bwrap says 128+N when its command died of N
            with contextlib.suppress(ValueError):
                code = -signal.Signals(code - 128)
        if not problem and code < 0:
            problem = f"killed by signal {signal.Signals(-code).name}"
        return Outcome(
            code, bytes(self.stdout), bytes(self.stderr), problem, self.protections, peak
        )

    def discard(self) -> None:
        """Kill it and remove what it left, without an outcome (a job never handed over)."""
        self._end()

    def _end(self) -> int | None:
        """Kill its session and group, wait for it; its group's peak memory when known."""
        if self.ended:
            return None
        self.ended = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        peak = self.group.peak_memory_bytes() if self.group is not None else None
        if self.group is not None:
            self.group.destroy()
        self.proc.wait()
        for r in self.readers:
            r.join(5)
        for s in (self.proc.stdout, self.proc.stderr):
            if s is not None:
                s.close()
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
        return peak
