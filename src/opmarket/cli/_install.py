"""``opmarket install NAME``: a plugin, and the GPU companion that fits this machine
(opmarket.registry's install decides which; pip installs)."""

from __future__ import annotations

import os
import subprocess
import sys

import click

from opmarket.cli._usage import CONTEXT, EXIT_PROBLEM, UsageError, check_index_url

__all__ = ["install"]


@click.command(context_settings=CONTEXT)
@click.argument("name")
@click.option(
    "--index-url",
    metavar="URL",
    callback=check_index_url,
    help="The simple index to install from (default: $PIP_INDEX_URL, else PyPI); all it is "
    "asked must answer within $OPMARKET_INDEX_TIMEOUT seconds (default 60).",
)
@click.option("--dry-run", is_flag=True, help="Choose and show pip's plan; install nothing.")
def install(name: str, index_url: str | None, dry_run: bool) -> None:
    """Install plugin NAME and the GPU companion that fits this machine, with pip.

    The companions are NAME's extras named cuda<major> on the index; one is installed when a
    GPU is visible and its driver supports that CUDA version. What was chosen and why is
    printed first. Exit code 1 when pip fails, 2 when NAME is not on the index.

    \b
    Examples:
      opmarket install opmarket-time-two --index-url http://127.0.0.1:8000/simple/
      opmarket install opmarket-time-two --dry-run
    """
    from packaging.utils import parse_wheel_filename

    from opmarket._fetch import Fetcher, FetchError, printable
    from opmarket.registry._install import (
        DEFAULT_INDEX,
        InstallError,
        choose_extra,
        newest_wheel,
        project_files,
        wheel_extras,
    )
    from opmarket.registry._machine import machine_facts

    index = index_url or os.environ.get("PIP_INDEX_URL") or DEFAULT_INDEX
    if index_url is None:
        check_index_url(None, "$PIP_INDEX_URL", index)
    try:
        fetcher = Fetcher()  # one deadline for every request to the index below
    except FetchError as exc:
        raise UsageError(str(exc)) from None
    try:
        wheel = newest_wheel(project_files(index, name, fetcher))
        if wheel is None:
            raise UsageError(f"{name!r}: no wheel for this Python and platform on {index}")
        extras = wheel_extras(wheel, fetcher)
    except InstallError as exc:
        raise UsageError(str(exc)) from None
    version = parse_wheel_filename(wheel.filename)[1]
    choice = choose_extra(machine_facts(), extras)
    requirement = f"{name}[{choice.extra}]=={version}" if choice.extra else f"{name}=={version}"
    click.echo(f"{name} {version}: {printable(wheel.filename)}")
    for reason in choice.reasons:
        click.echo(f"  {reason}")
    cmd = [sys.executable, "-m", "pip", "install", "--index-url", index, requirement]
    if dry_run:
        cmd.append("--dry-run")
    click.echo(("would run: " if dry_run else "running: ") + " ".join(["python", *cmd[1:]]))
    if subprocess.run(cmd, check=False).returncode != 0:
        sys.exit(EXIT_PROBLEM)
