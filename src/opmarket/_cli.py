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
from opmarket._usage import EXIT_PROBLEM, EXIT_USAGE, UsageError, missing_extra, write_output

__all__ = ["EXIT_PROBLEM", "EXIT_USAGE", "UsageError", "main", "write_output"]

# Each command's module, attribute and one-line help: a command's module is imported only
# when that command runs (or shows its own --help), so `opmarket --help` imports none of them.
_LAZY_COMMANDS: dict[str, tuple[str, str, str]] = {
    "compat": (
        "opmarket.compat._cli",
        "main",
        "Tell whether release NEW breaks graphs or code written against release OLD.",
    ),
    "snapshot": (
        "opmarket.compat._cli",
        "snapshot",
        "Write the op-set (ops and kernels) of one release, as plugin repos commit it.",
    ),
    "plugins": (
        "opmarket.registry._cli",
        "plugins",
        "List the installed plugins: name, version, ops, kernels by device, status, errors.",
    ),
    "ops": (
        "opmarket.registry._cli",
        "ops",
        "List the installed plugins' ops: op, plugin, signature, kernels.",
    ),
    "env-check": (
        "opmarket._cli_envcheck",
        "env_check",
        "Tell whether each wheel loads in this environment, without loading it.",
    ),
    "doctor": (
        "opmarket.registry._doctor",
        "doctor",
        "Show this machine's CPU, GPUs and CUDA runtimes, and which kernel runs each op.",
    ),
    "install": (
        "opmarket.registry._install",
        "install",
        "Install plugin NAME and the GPU companion that fits this machine, with pip.",
    ),
    "build": (
        "opmarket._build",
        "build",
        "Build a plugin's wheel the way the index accepts it (manylinux for native code).",
    ),
    "manifest": (
        "opmarket._build",
        "manifest",
        "Write a plugin's manifest (opmarket.opset.json) from what its code registers.",
    ),
    "seed": (
        "opmarket.web._seed",
        "seed_command",
        "Fill a data folder's database with COUNT synthetic projects, for benchmarks.",
    ),
    "serve": (
        "opmarket.web._cli",
        "serve",
        "Serve the marketplace: the simple index at /simple/, uploads at /legacy/, the catalog",
    ),
    "users": ("opmarket.web._cli", "users", "Marketplace users (who may upload)."),
    "tokens": (
        "opmarket.web._cli",
        "tokens",
        "API tokens for uploads (twine: user __token__, password the token).",
    ),
    "validate": (
        "opmarket.web._cli",
        "validate",
        "Validate WHEEL as the marketplace does on upload: archive checks, install in",
    ),
    "yank": (
        "opmarket.web._cli",
        "yank",
        "Yank release VERSION of PROJECT (PEP 592): installers skip it unless pinned to it.",
    ),
    "new": (
        "opmarket._scaffold._new",
        "new",
        "Create a plugin project NAME: one op with spec, kernel, tests, CI, ready to build.",
    ),
    "host": (
        "opmarket.web._cli_index",
        "host",
        "Host dependency wheels (not plugins) on the index: archive checks only, no validation.",
    ),
    "status": (
        "opmarket.web._cli_index",
        "status",
        "Print the validation verdict of release NAME==VERSION on an index.",
    ),
    "worker": (
        "opmarket.web._cli",
        "worker",
        "Validate uploads without serving: take jobs from the catalog's database until",
    ),
}

# The extra that a command's package needs: without it, a command says which extra to install
# (exit 2), whether its module or the command itself imports what is missing.
_EXTRA_OF_PACKAGE = {"opmarket.web": "web"}
# The top-level modules an extra brings (its requirements, and what opmarket imports of their
# own dependencies: starlette and pydantic under fastapi). A missing module not listed is a
# broken install or a plugin's own dependency, not the extra: its traceback is the report.
# tests/test_cli.py checks the list against the extra's requirements in the metadata.
_EXTRA_MODULES = {
    "web": frozenset(
        {
            "alembic",
            "auditwheel",
            "fastapi",
            "jinja2",
            "multipart",
            "python_multipart",
            "nvidia",
            "psycopg",
            "pydantic",
            "pydantic_core",
            "pydantic_settings",
            "readme_renderer",
            "pyseccomp",
            "sqlalchemy",
            "starlette",
            "uvicorn",
            "variantlib",
        }
    )
}


def _extra(cmd_name: str | None) -> str | None:
    module = _LAZY_COMMANDS.get(cmd_name or "", ("", "", ""))[0]
    for package, extra in _EXTRA_OF_PACKAGE.items():
        if module.startswith(package + "."):
            return extra
    return None


def _missing(cmd_name: str | None, exc: ModuleNotFoundError) -> UsageError | None:
    """The extra-to-install error for a module missing under command ``cmd_name``, or None
    when that module is not one the command's extra brings (a bug, a plugin's own
    dependency) or the command needs no extra."""
    extra = _extra(cmd_name)
    top = (exc.name or "").partition(".")[0]
    if extra is None or top not in _EXTRA_MODULES[extra]:
        return None
    return missing_extra(f"opmarket {cmd_name}", top, extra)


class _LazyGroup(click.Group):
    """A group whose subcommands are imported on first use (``_LAZY_COMMANDS``)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *_LAZY_COMMANDS])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in _LAZY_COMMANDS:
            import importlib  # lazy by design: only the command that runs is imported

            module, attr, _ = _LAZY_COMMANDS[cmd_name]
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
        # As click lists commands, but from the one-line help above: no command is imported.
        helps = {name: help_ for name, (_, _, help_) in _LAZY_COMMANDS.items()}
        for name in super().list_commands(ctx):
            command = super().get_command(ctx, name)
            if command is not None and not command.hidden:
                helps[name] = command.help or ""
        limit = formatter.width - 6 - max(map(len, helps))
        # A stand-in command with the same help gives click's own shortening of it.
        short = {n: click.Command(n, help=h).get_short_help_str(limit) for n, h in helps.items()}
        rows = sorted(short.items())
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(
    cls=_LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
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
