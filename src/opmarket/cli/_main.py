"""The ``opmarket`` command line: one group, noun subcommands.

Exit codes everywhere: 0 fine, 1 the command found a problem (invalid ops, breaking
changes), 2 bad usage or unreadable input. User errors are one-line messages, never tracebacks.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, cast

import click

from opmarket import __version__
from opmarket.cli._usage import (
    CONTEXT,
    EXIT_PROBLEM,
    EXIT_USAGE,
    UsageError,
    missing_extra,
    write_output,
)

__all__ = ["EXIT_PROBLEM", "EXIT_USAGE", "UsageError", "main", "write_output"]

# Each command's module and attribute: a command's module is imported only when that command
# runs (or when help lists the commands: each module of this package imports only click until
# its command runs). The one-line helps are the commands' own (their docstrings).
_COMMANDS: dict[str, tuple[str, str]] = {
    "build": ("opmarket.cli._build", "build"),
    "compat": ("opmarket.cli._compat", "main"),
    "doctor": ("opmarket.cli._doctor", "doctor"),
    "env-check": ("opmarket.cli._envcheck", "env_check"),
    "host": ("opmarket.cli._index", "host"),
    "install": ("opmarket.cli._install", "install"),
    "manifest": ("opmarket.cli._build", "manifest"),
    "new": ("opmarket._scaffold._new", "new"),
    "ops": ("opmarket.cli._registry", "ops"),
    "plugins": ("opmarket.cli._registry", "plugins"),
    "seed": ("opmarket.cli._seed", "seed_command"),
    "serve": ("opmarket.cli._web", "serve"),
    "snapshot": ("opmarket.cli._compat", "snapshot"),
    "status": ("opmarket.cli._index", "status"),
    "tokens": ("opmarket.cli._web", "tokens"),
    "users": ("opmarket.cli._web", "users"),
    "validate": ("opmarket.cli._web", "validate"),
    "worker": ("opmarket.cli._web", "worker"),
    "yank": ("opmarket.cli._web", "yank"),
}

# The marketplace's commands: a module they import that one of the web extras brings, when
# missing, is reported as that extra to install (exit 2), whether the command's module or the
# command itself imports it.
_WEB_COMMANDS = frozenset({"host", "seed", "serve", "status", "tokens", "users", "validate"})
_WEB_COMMANDS |= {"worker", "yank"}
# The top-level modules each extra brings (its requirements, and what opmarket imports of their
# own dependencies: starlette and pydantic under fastapi). A missing module not listed is a
# broken install or a plugin's own dependency, not an extra: its traceback is the report.
# tests/test_cli.py checks the lists against the extras' requirements in the metadata.
_EXTRA_MODULES = {
    "web": frozenset(
        {
            "alembic",
            "fastapi",
            "jinja2",
            "multipart",
            "python_multipart",
            "pydantic",
            "pydantic_core",
            "pydantic_settings",
            "readme_renderer",
            "pyseccomp",
            "sqlalchemy",
            "starlette",
            "uvicorn",
        }
    ),
    "web-gpu": frozenset({"auditwheel", "nvidia", "variantlib"}),
    "postgres": frozenset({"psycopg"}),
}


def _missing(cmd_name: str | None, exc: ModuleNotFoundError) -> UsageError | None:
    """The extra-to-install error for a module missing under command ``cmd_name``, or None
    when that module is not one a web extra brings (a bug, a plugin's own dependency) or the
    command needs no extra."""
    if cmd_name not in _WEB_COMMANDS:
        return None
    top = (exc.name or "").partition(".")[0]
    for extra, modules in _EXTRA_MODULES.items():
        if top in modules:
            return missing_extra(f"opmarket {cmd_name}", top, extra)
    return None


class _LazyGroup(click.Group):
    """A group whose subcommands are imported on first use (``_COMMANDS``)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *_COMMANDS])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in _COMMANDS:
            import importlib  # lazy by design: only the command that runs is imported

            module, attr = _COMMANDS[cmd_name]
            try:
                command = getattr(importlib.import_module(module), attr)
            except ModuleNotFoundError as exc:
                error = _missing(cmd_name, exc)
                if error is None:
                    raise
                raise error from None
            assert isinstance(command, click.Command)
            return command
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ModuleNotFoundError as exc:  # imported by the command as it runs
            error = _missing(ctx.invoked_subcommand, exc)
            if error is None:
                raise
            raise error from None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Each command's first sentence whole, wrapped where the terminal is narrow; click
        # would cut it at the terminal's width with "...".
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=sys.maxsize)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=_LazyGroup, context_settings=CONTEXT)
@click.version_option(__version__, prog_name="opmarket")
def main() -> None:
    """opmarket: ML op/kernel plugins, their compatibility, and a marketplace for them.

    \b
    Formats every command reads (detected from the content):
      canonical op-set JSON   {"format": "opmarket.opset", "format_version": 1, "ops": [...]}
      spec-form JSON          {"ops": [{"name": "ZeroOut", "inputs": ["to_zero: int32"], ...}]}
      TensorFlow text format  an OpDef, or an OpList such as ops.pbtxt or an ops history file

    Exit codes: 0 fine, 1 a problem was found in the input, 2 bad usage or unreadable input.
    """


@main.command()
@click.argument("source", metavar="IN", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--to",
    "fmt",
    type=click.Choice(["json", "tf-pbtxt", "spec"]),
    default="json",
    show_default=True,
    help="json: canonical op-set JSON; tf-pbtxt: TensorFlow OpList text format; "
    "spec: spec-form JSON with REGISTER_OP strings.",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    help="Write here instead of standard output (nothing is written if IN has errors).",
)
def convert(source: Path, fmt: str, output: Path | None) -> None:
    """Convert the ops in IN to another format.

    IN may be spec-form JSON, canonical JSON or TensorFlow text format. Every op is
    validated as TensorFlow's OpDefBuilder and ValidateOpDef would; if any is invalid, every
    problem is listed (file, op, field, message), nothing is written, and the exit code is 1.

    \b
    Examples:
      opmarket convert ops.json --to tf-pbtxt -o ops.pbtxt
      opmarket convert ops.pbtxt --to spec
    """
    from opmarket.sdk import DocumentError, InvalidOpDefError, read_document, render_document
    from opmarket.sdk._documents import OutputFormat

    try:
        doc = read_document(source)
        if doc.format == "history":
            raise DocumentError(
                str(source), "this is an op history (several releases); name one release's op-set"
            )
    except DocumentError as exc:
        raise UsageError(str(exc)) from None
    if doc.problems:
        report_problems(doc.problems)
        sys.exit(EXIT_PROBLEM)
    notes: list[str] = []
    try:
        text = render_document(
            doc.ops,
            cast("OutputFormat", fmt),
            doc.kernels,
            name=doc.name,
            version=doc.version,
            source=str(source),
            notes=notes,
        )
    except InvalidOpDefError as exc:
        report_problems(exc.problems)
        sys.exit(EXIT_PROBLEM)
    if doc.kernels and fmt != "json":
        notes.append(f"{len(doc.kernels)} kernel(s) left out: only canonical JSON carries kernels")
    for note in notes:
        click.echo(f"note: {note}", err=True)
    write_output(text, output)


def report_problems(problems: Any) -> None:
    """Print every problem, one line each, then a count."""
    problems = list(problems)
    for p in problems:
        click.echo(f"error: {p}", err=True)
    click.echo(f"{len(problems)} problem(s) found", err=True)
