"""What every opmarket command line shares: user errors as one line with exit code 2, and
output files written whole.

Its own module, not part of the ``opmarket`` group's, so that ``compat-check`` (its own
console script) uses them without importing the group and every command on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

__all__ = [
    "CONTEXT",
    "EXIT_PROBLEM",
    "EXIT_USAGE",
    "UsageError",
    "check_index_url",
    "missing_extra",
    "need_module",
    "write_output",
]

#: Every command's click context settings: -h as well as --help, lines up to 100 columns.
CONTEXT: dict[str, Any] = {"help_option_names": ["-h", "--help"], "max_content_width": 100}
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


def missing_extra(what: str, module: str, extra: str) -> UsageError:
    """The error for a command run without the extra it needs: which package is missing and
    the pip line that brings it."""
    return UsageError(
        f"{what} needs the {module!r} package, which this Python lacks: "
        f"pip install 'opmarket[{extra}]'"
    )


def need_module(module: str, what: str, extra: str) -> None:
    """``missing_extra`` raised unless ``module`` can be imported."""
    import importlib.util  # lazy: the CLI's root stays light

    try:
        found = importlib.util.find_spec(module) is not None
    except ImportError:  # a parent package that is missing, or an import hook refusing it
        found = False
    if not found:
        raise missing_extra(what, module, extra)


def check_index_url(_ctx: Any, param: Any, value: str | None) -> str | None:
    """A click callback for ``--index-url``: the URL as given when it is ``http(s)://HOST...``
    or ``file://...``, else a UsageError that says so (urllib's own errors for such a URL
    are tracebacks). ``param`` may be a label instead (``"$PIP_INDEX_URL"``)."""
    if value is None:
        return None
    from urllib.parse import urlsplit

    if isinstance(param, str):
        name = param
    else:
        name = f"--{param.name.replace('_', '-')}" if param is not None and param.name else "URL"
    if any(c.isspace() or not c.isprintable() for c in value):
        raise UsageError(f"{name}: {value!r} is not a URL: it has spaces or control characters")
    try:
        parts = urlsplit(value)
        host = parts.hostname
        parts.port  # noqa: B018  (a port that is not a number raises here)
    except ValueError as exc:
        raise UsageError(f"{name}: {value!r} is not a URL: {exc}") from None
    web = parts.scheme in ("http", "https") and bool(host)
    local = parts.scheme == "file" and bool(parts.path) and parts.netloc in ("", "localhost")
    if not (web or local):
        raise UsageError(
            f"{name}: {value!r} is not the URL of an index: give http://HOST/..., "
            "https://HOST/... or file:///PATH/"
        )
    return value


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
