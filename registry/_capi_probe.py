"""The first-load probe of a C-ABI library: run its init in a subprocess first, so that a
crash there (a segfault, an ``abort``) is reported instead of ending this process. A clean
probe is remembered in the cache folder by the file's path, size and time."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from opmarket.registry._errors import LibraryError
from opmarket.sdk import OpmarketError
from opmarket.sdk._files import cache_dir

__all__ = ["PROBE_TIMEOUT_S", "probe", "probe_main"]

#: How long a first-load probe may take.
PROBE_TIMEOUT_S = 120
# Bumped when what a probe checks changes, so that older marks are not trusted.
_PROBE_VERSION = 3

# Not ``-m``: runpy warns when the package already imported the module.
_CHILD = (
    "import sys; from opmarket.registry._capi_probe import probe_main; "
    "sys.exit(probe_main(sys.argv[1:]))"
)


def _probe_key(path: Path) -> str:
    st = path.stat()
    text = f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0{_PROBE_VERSION}\0{sys.version}"
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def probe(path: Path) -> None:
    """Load ``path`` in a subprocess unless a probe of this very file passed before;
    LibraryError when the child crashes or reports an error. ``OPMARKET_CAPI_PROBE=0``
    skips it (a crash in init then ends this process)."""
    if os.environ.get("OPMARKET_CAPI_PROBE", "1").strip() in ("0", "false", "no"):
        return
    mark = cache_dir() / "capi" / "probed" / _probe_key(path)
    if mark.is_file():
        return
    env = {**os.environ, "OPMARKET_DISABLE_PLUGINS": "1"}
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, str(path)],
            capture_output=True,
            text=True,
            env=env,
            check=False,
            cwd=tempfile.gettempdir(),
            timeout=PROBE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise LibraryError(
            f"library {path} did not finish its init within "
            f"{PROBE_TIMEOUT_S}s (probed in a subprocess)"
        ) from None
    if done.returncode < 0:
        try:
            name = signal.Signals(-done.returncode).name
        except ValueError:
            name = f"signal {-done.returncode}"
        raise LibraryError(
            f"library {path} crashed in its init ({name}; probed in a "
            "subprocess, this process is unharmed)"
        )
    lines = done.stdout.strip().splitlines()
    try:
        report = json.loads(lines[-1]) if lines else {}
    except ValueError:
        report = {}
    if done.returncode != 0 or not report.get("ok"):
        message = report.get("error") or (
            done.stderr.strip()[-2000:] or f"exit status {done.returncode}"
        )
        raise LibraryError(message)
    try:
        mark.parent.mkdir(parents=True, exist_ok=True)
        mark.write_text(str(path), encoding="utf-8")
    except OSError:
        pass  # an unwritable cache only means probing this library again next time


def probe_main(argv: list[str]) -> int:
    """The probe's child process (``_CHILD PATH``): load the library here and say how it
    went on the last line of stdout, as JSON."""
    from opmarket.registry._capi import load_declarations

    try:
        load_declarations(Path(argv[0]), probe=False)
    except OpmarketError as exc:
        print(json.dumps({"ok": False, "error": str(exc)}))
        return 1
    print(json.dumps({"ok": True}))
    return 0
