"""Running the harness (``_probe.py``) in the sandbox: its environment, the secret it must
echo, and the result pipe read here, capped; what the pipeline decides from comes back
checked (``_report``)."""

from __future__ import annotations

import os
import secrets
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opmarket.web.sandbox._run import Limits, run_sandboxed
from opmarket.web.validation._report import HarnessResult, ReportError, parse_harness

__all__ = ["run_probe", "tail"]

_PROBE = Path(__file__).with_name("_probe.py")
_RESULT_CAP = 16 * 1024 * 1024


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
) -> tuple[Any, HarnessResult | str]:
    """Run the harness in the sandbox: its outcome, and its checked result or why none."""
    secret = secrets.token_hex(32)
    secret_r, secret_w = os.pipe()
    os.write(secret_w, secret.encode())
    os.close(secret_w)
    result_r, result_w = os.pipe()
    raw = bytearray()
    reader = threading.Thread(target=_drain, args=(result_r, raw), daemon=True)
    reader.start()
    try:
        outcome = run_sandboxed(
            [
                interpreter,
                "-I",
                "-S",
                "/input/probe.py",
                "harness",
                str(secret_r),
                str(result_w),
                f"/input/{filename}",
                dist,
                *(["--gpu"] if gpu else []),
                *(a for d in deps for a in ("--dep", f"/input/deps/{d.name}")),
            ],
            limits=limits,
            interpreter=interpreter,
            env=_env(),
            binds={
                "/input/probe.py": _PROBE,
                f"/input/{filename}": wheel,
                **{f"/input/deps/{d.name}": d for d in deps},
            },
            pass_fds=(secret_r, result_w),
            private=private,
        )
    finally:
        os.close(secret_r)
        os.close(result_w)  # the reader sees the end once every sandboxed copy is gone too
        reader.join(30)
    try:
        return outcome, parse_harness(bytes(raw), secret)
    except ReportError as exc:
        return outcome, str(exc)
