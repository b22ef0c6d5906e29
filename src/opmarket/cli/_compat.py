"""``compat-check`` (also ``opmarket compat``) and ``opmarket snapshot``.

Exit codes: 0 nothing breaks, 1 something breaks or the version bump is too small (what
counts is ``--fail-on``), 2 bad usage or unreadable input (one line naming the file and what is
wrong).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from opmarket.cli._usage import UsageError, check_index_url, write_output

__all__ = ["main", "snapshot"]

# The report formats (compat._report.FORMATS, which a test keeps equal): spelled here so that
# `compat-check --help` imports nothing of the engine. Each command imports what it runs.
FORMATS = ("text", "json", "markdown")
FAIL_ON = ("breaking", "version", "never")  # compat._report.FAIL_ON, the same way
DIRECTIONS = ("backward", "forward")  # compat._rule.DIRECTIONS, the same way


@click.command(
    "compat-check",
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.argument("sources", nargs=-1, metavar="OLD NEW")
@click.option(
    "--history",
    metavar="HISTORY",
    help="Check NEW against every release in HISTORY (an opmarket history file, or "
    "TensorFlow ops_history files: one file or a folder); give NEW only.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="text",
    show_default=True,
    help="text reads like a linter, json for tools, markdown for a pull request.",
)
@click.option(
    "--graphs",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Replay every graph saved with the old release (*.json, recursively) against NEW.",
)
@click.option(
    "--fail-on",
    type=click.Choice(FAIL_ON),
    default="breaking",
    show_default=True,
    help="What exits 1: any breaking change or a version bump too small; only a version "
    "bump too small for what changed (a break released as a major bump passes); nothing.",
)
@click.option(
    "--direction",
    type=click.Choice(DIRECTIONS),
    default="backward",
    show_default=True,
    help="PyTorch's schema rules: backward (NEW runs what was made against OLD) or forward "
    "(OLD runs what is made against NEW), as PyTorch's own check. TensorFlow's rules are "
    "always backward.",
)
@click.option("--old-version", metavar="VERSION", help="The old release's version.")
@click.option("--new-version", metavar="VERSION", help="The new release's version.")
@click.option(
    "--index-url",
    metavar="URL",
    callback=check_index_url,
    help="Package index (simple API) to fetch NAME==VERSION sources from; all it is asked "
    "must answer within $OPMARKET_INDEX_TIMEOUT seconds (default 60).",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the report here instead of standard output.",
)
def main(  # noqa: PLR0917  (click passes every option as an argument)
    sources: tuple[str, ...],
    history: str | None,
    fmt: str,
    graphs: Path | None,
    fail_on: str,
    direction: str,
    old_version: str | None,
    new_version: str | None,
    index_url: str | None,
    output: Path | None,
) -> None:
    """Tell whether release NEW breaks graphs or code written against release OLD.

    OLD and NEW are op-set files (canonical JSON, spec-form JSON, TensorFlow text format),
    wheels, installed distributions, or NAME==VERSION from --index-url; or two PyTorch
    schema lists (one schema a line). Breaking means what TensorFlow's GraphDef
    compatibility check rejects, plus lost kernels and graphs that no longer validate, and
    what PyTorch's schema check rejects for the schemas the torch bridge registers.

    \b
    Examples:
      compat-check old.json new.json
      compat-check dist/plugin-1.0.0-py3-none-any.whl dist/plugin-1.1.0-py3-none-any.whl
      compat-check --history opmarket-history.json new.json --format markdown
      compat-check torch-2.12-schemas.txt torch-2.13-schemas.txt --direction forward
      compat-check opmarket-zero-out==1.0.0 dist/*.whl --index-url http://host/simple/
    """
    from opmarket.compat._check import check
    from opmarket.compat._report import render
    from opmarket.compat._version import InvalidVersionError
    from opmarket.sdk import DocumentError, InvalidOpDefError

    wanted = 1 if history else 2
    if len(sources) != wanted:
        usage = "NEW (with --history)" if history else "OLD NEW"
        raise UsageError(f"expected {usage}, got {len(sources)} argument(s)")
    old, new = (None, sources[0]) if history else (sources[0], sources[1])
    try:
        report = check(
            old,
            new,
            history=history,
            graphs=graphs,
            old_version=old_version,
            new_version=new_version,
            index_url=index_url,
            direction=direction,
        )
    except (DocumentError, InvalidOpDefError, InvalidVersionError) as exc:
        raise UsageError(str(exc).splitlines()[0]) from None
    if fail_on == "version" and report.version is None:
        raise UsageError(
            "--fail-on version needs both releases' versions: give --old-version and "
            "--new-version, or compare wheels, installed distributions or NAME==VERSION"
        )
    report.fail_on = fail_on
    write_output(render(report, fmt), output)
    sys.exit(report.exit_code)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("target", metavar="DIST|MODULE|WHEEL")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write the canonical op-set JSON here (default: standard output).",
)
@click.option(
    "--append",
    "history",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Add the release to this history file (created when missing).",
)
@click.option(
    "--version",
    "version",
    metavar="VERSION",
    help="The release's version, when TARGET does not say (a module).",
)
def snapshot(target: str, output: Path | None, history: Path | None, version: str | None) -> None:
    """Write the op-set (ops and kernels) of one release, as plugin repos commit it.

    TARGET is an installed distribution, a wheel file, or an importable module; a module
    contributes the opmarket.opset.json beside it, or the OpSet/OpDef objects it defines.

    \b
    Examples:
      opmarket snapshot opmarket-zero-out -o opset.json
      opmarket snapshot opmarket-zero-out --append opmarket-history.json
    """
    from packaging.version import InvalidVersion, Version

    from opmarket.compat._history import add_release
    from opmarket.compat._snapshot import take_snapshot
    from opmarket.sdk import DocumentError, InvalidOpDefError, opset_to_json

    if version is not None:
        try:
            Version(version)
        except InvalidVersion:
            raise UsageError(f"--version: {version!r} is not a valid version (PEP 440)") from None
    try:
        opset = take_snapshot(target, version=version)
        if history is not None:
            click.echo(add_release(history, opset), err=True)
    except (DocumentError, InvalidOpDefError) as exc:
        raise UsageError(str(exc).splitlines()[0]) from None
    except OSError as exc:
        raise UsageError(f"{history}: cannot write: {exc.strerror or exc}") from None
    if output is not None or history is None:
        write_output(opset_to_json(opset), output)
