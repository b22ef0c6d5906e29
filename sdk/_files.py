"""Files written whole (a reader sees the old content or the new one, never half of either),
and where opmarket keeps what it can make again (its cache folder)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["cache_dir", "write_atomic"]


def cache_dir() -> Path:
    """opmarket's cache folder, for everything it can make again (entry point scans, C-ABI
    probes, compiled shims and inline sources): ``$OPMARKET_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/opmarket``, else ``~/.cache/opmarket``."""
    explicit = os.environ.get("OPMARKET_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg or Path.home() / ".cache", "opmarket")


def write_atomic(path: str | os.PathLike[str], data: str | bytes, *, fsync: bool = False) -> None:
    """Write ``data`` (text as UTF-8) to a temporary file beside ``path``, then rename it into
    place; ``fsync`` flushes it to disk first (for data that must survive a crash). On any
    error the temporary file is removed and ``path`` is left as it was."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
