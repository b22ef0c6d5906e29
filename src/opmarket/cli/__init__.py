"""The command lines: ``opmarket`` (one group, noun subcommands) and ``compat-check``.

Every command lives in this package and calls the library packages (sdk, registry, compat,
web), which import no click. Exit codes everywhere: 0 fine, 1 the command found a problem,
2 bad usage or unreadable input (one line, never a traceback).
"""

from __future__ import annotations

from opmarket.cli._main import main

__all__ = ["main"]
