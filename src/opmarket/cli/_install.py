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

    The release is the newest whose wheel loads here (read as opmarket env-check reads it);
    a newer one that would not is skipped, and why is printed. The companions are NAME's
    extras named cuda<major> on the index; one is installed when a GPU is visible and its
    driver supports that CUDA version. What was chosen and why is printed first. Exit code 1
    when pip fails or no release loads here, 2 when NAME is not on the index.

    \b
    Examples:
      opmarket install opmarket-time-two --index-url http://127.0.0.1:8000/simple/
      opmarket install opmarket-time-two --dry-run
    """
    from packaging.utils import parse_wheel_filename

    from opmarket._fetch import Fetcher, FetchError, printable
    from opmarket.registry._environment import read_environment
    from opmarket.registry._install import (
        DEFAULT_INDEX,
        InstallError,
        choose_extra,
        newest_wheel,
        project_files,
        wheel_extras,
    )
    from opmarket.registry._install_loads import newest_that_loads
    from opmarket.registry._machine import machine_facts

    index = index_url or os.environ.get("PIP_INDEX_URL") or DEFAULT_INDEX
    if index_url is None:
        check_index_url(None, "$PIP_INDEX_URL", index)
    try:
        fetcher = Fetcher()  # one deadline for every request to the index below
    except FetchError as exc:
        raise UsageError(str(exc)) from None
    machine = machine_facts()
    try:
        files = project_files(index, name, fetcher)
        if newest_wheel(files) is None:
            raise UsageError(f"{name!r}: no wheel for this Python and platform on {index}")
        # The newest release whose wheel loads here, as opmarket env-check reads it.
        wheel, skipped = newest_that_loads(files, read_environment(machine=machine), fetcher)
        if wheel is None:
            for line in skipped:
                click.echo(f"  {line}")
            click.echo(f"{name}: no release on {index} loads here", err=True)
            sys.exit(EXIT_PROBLEM)
        extras = wheel_extras(wheel, fetcher)
    except InstallError as exc:
        raise UsageError(str(exc)) from None
    version = parse_wheel_filename(wheel.filename)[1]
    choice = choose_extra(machine, extras)
    requirement = f"{name}[{choice.extra}]=={version}" if choice.extra else f"{name}=={version}"
    click.echo(f"{name} {version}: {printable(wheel.filename)}")
    for line in skipped:
        click.echo(f"  {line}")
    for reason in choice.reasons:
        click.echo(f"  {reason}")
    cmd = [sys.executable, "-m", "pip", "install", "--index-url", index, requirement]
    if dry_run:
        cmd.append("--dry-run")
    click.echo(("would run: " if dry_run else "running: ") + " ".join(["python", *cmd[1:]]))
    if subprocess.run(cmd, check=False).returncode != 0:
        sys.exit(EXIT_PROBLEM)
