"""The server's own log lines (uploads, verdicts) on stderr under ``opmarket serve``."""

from __future__ import annotations

import logging
import sys

__all__ = ["log_to_stderr"]


def log_to_stderr(level: int = logging.INFO) -> None:
    """Show the ``opmarket`` loggers' records at ``level`` and above on stderr, one line
    each with the time; once per process."""
    logger = logging.getLogger("opmarket")
    if any(getattr(h, "_opmarket_serve", False) for h in logger.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler._opmarket_serve = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(min(logger.level or level, level))
