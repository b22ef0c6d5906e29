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
from opmarket._usage import EXIT_USAGE, UsageError, write_output

__all__ = ["EXIT_PROBLEM", "EXIT_USAGE", "UsageError", "main", "write_output"]

EXIT_PROBLEM = 1


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
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
    from opmarket.sdk import DocumentError, InvalidOpDef, read_document, render_document
    from opmarket.sdk._documents import OutputFormat

    try:
        doc = read_document(source)
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
    except InvalidOpDef as exc:
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


# Subcommands of the other packages are registered below.

from opmarket.compat import _cli as compat_cli  # noqa: E402 (registered after the group)

main.add_command(compat_cli.main, "compat")
main.add_command(compat_cli.snapshot)

from opmarket.web._cli import (  # noqa: E402  # after main
    serve,
    tokens,
    users,
    validate,
    worker,
    yank,
)

main.add_command(serve)
main.add_command(users)
main.add_command(tokens)
main.add_command(validate)
main.add_command(yank)
main.add_command(worker)

from opmarket.registry import _cli as registry_cli  # noqa: E402  # after main

main.add_command(registry_cli.plugins)
main.add_command(registry_cli.ops)
