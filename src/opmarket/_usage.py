"""What every opmarket command line shares: user errors as one line with exit code 2, and
output files written whole.

Its own module, not part of ``opmarket._cli``, so that ``compat-check`` (its own console
script) uses them without importing the ``opmarket`` group and every command on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

__all__ = ["EXIT_PROBLEM", "EXIT_USAGE", "UsageError", "write_output"]

#: The command found a problem in its input (invalid ops, breaking changes, a rejected wheel).
EXIT_PROBLEM = 1
#: Bad usage or unreadable input.
EXIT_USAGE = 2


class UsageError(click.ClickException):
    """A user error: ``PROG: error: MESSAGE`` on one line of stderr, exit code 2.

    PROG is the program the user ran (``opmarket``, ``compat-check``), read from the click
    context when the error is raised (click shows it after the context is gone).
    """

    exit_code = EXIT_USAGE

    def __init__(self, message: str) -> None:
        super().__init__(message)
        ctx = click.get_current_context(silent=True)
        self.prog = (ctx.find_root().info_name if ctx is not None else None) or "opmarket"

    def show(self, file: Any = None) -> None:
        click.echo(f"{self.prog}: error: {self.format_message()}", err=True)


def write_output(text: str, output: Path | None) -> None:
    """Write to ``output`` whole (a temporary file renamed into place), or to stdout;
    UsageError naming the file when it cannot be written."""
    if output is None:
        click.echo(text, nl=False)
        return
    from opmarket.sdk._files import write_atomic  # lazy: the CLI's root stays light

    try:
        write_atomic(output, text)
    except OSError as exc:  # a missing folder, a file where one should be
        raise UsageError(f"{output}: cannot write: {exc.strerror or exc}") from None
