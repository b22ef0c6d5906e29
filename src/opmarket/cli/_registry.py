"""``opmarket plugins`` and ``opmarket ops``: what is installed (opmarket.registry's
listing), as a table or JSON.

``opmarket ops`` never imports plugin code: it reads each plugin's ``opmarket.opset.json``.
``opmarket plugins`` loads the plugins (unless ``--no-load``) to report which load and why
the others fail. Exit codes: 0 fine, 1 a plugin failed to load (``plugins``), 2 bad usage.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

import click

from opmarket.cli._usage import CONTEXT, EXIT_PROBLEM, UsageError

__all__ = ["ops", "plugins", "table"]


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell; the last column is not padded."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [header, *rows]
    ]
    return "\n".join(lines) + "\n"


_FORMAT = click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="table for people, json for tools.",
)


@click.command(context_settings=CONTEXT)
@_FORMAT
@click.option(
    "--no-load", is_flag=True, help="Do not import the plugins: list what their manifests say."
)
def plugins(fmt: str, no_load: bool) -> None:
    """List the installed plugins: name, version, ops, kernels by device, status, errors.

    Plugins are found through the entry point group 'opmarket' (OPMARKET_PLUGINS=a,b keeps
    only those, OPMARKET_DISABLE_PLUGINS=1 none) and loaded as opmarket.ops loads them, each
    isolated: a plugin that fails to import or register is shown as failed with its error.
    Exit code 1 when a plugin failed to load.

    \b
    Examples:
      opmarket plugins
      opmarket plugins --format json
    """
    from opmarket.registry._listing import nothing_listed, plugin_rows

    rows = plugin_rows(load=not no_load)
    if fmt == "json":
        click.echo(json.dumps({"plugins": [r.to_json() for r in rows]}, indent=2))
    elif not rows:
        click.echo(nothing_listed("plugins installed (entry point group 'opmarket')"))
    else:
        body = [
            (
                r.name,
                r.distribution,
                r.version,
                r.status,
                r.describe_kernels(),
                ", ".join(r.ops) or "-",
            )
            for r in rows
        ]
        click.echo(
            table(["PLUGIN", "DISTRIBUTION", "VERSION", "STATUS", "KERNELS", "OPS"], body), nl=False
        )
        for r in rows:
            for error in r.errors:
                click.echo(f"{r.name} ({r.distribution} {r.version}): {error}")
    if any(r.status == "failed" for r in rows):
        sys.exit(EXIT_PROBLEM)


@click.command(context_settings=CONTEXT)
@click.option(
    "--device",
    metavar="DEVICE",
    help="Only kernels for this device (CPU, GPU, ...), and ops that have one.",
)
@click.option(
    "--dtype",
    metavar="DTYPE",
    help="Only kernels that handle this dtype (float16, half, DT_HALF, ...), and ops "
    "that have one.",
)
@_FORMAT
def ops(device: str | None, dtype: str | None, fmt: str) -> None:
    """List the installed plugins' ops: op, plugin, signature, kernels.

    Read from each plugin's manifest (opmarket.opset.json); no plugin code is imported.

    \b
    Examples:
      opmarket ops
      opmarket ops --device GPU --dtype float16
      opmarket ops --format json
    """
    from opmarket.registry._listing import describe_kernels, nothing_listed, op_rows
    from opmarket.sdk import UnknownDTypeError, as_dtype

    wanted = None
    if dtype is not None:
        try:
            wanted = as_dtype(dtype)
        except (UnknownDTypeError, TypeError, ValueError):
            raise UsageError(f"--dtype: unknown dtype {dtype!r}") from None
    rows, problems = op_rows(device.upper() if device else None, wanted)
    for problem in problems:
        click.echo(f"warning: {problem}", err=True)
    if fmt == "json":
        click.echo(json.dumps({"ops": [r.to_json() for r in rows], "problems": problems}, indent=2))
        return
    if not rows:
        click.echo("no ops match" if device or dtype else nothing_listed("plugin ops installed"))
        return
    body = [(r.op.name, r.entry.name, r.signature, describe_kernels(r.kernels)) for r in rows]
    click.echo(table(["OP", "PLUGIN", "SIGNATURE", "KERNELS"], body), nl=False)
