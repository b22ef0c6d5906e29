"""``opmarket host`` (the operator hosts dependencies) and ``opmarket status`` (an upload's
verdict, asked of a running index)."""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from packaging.version import Version

from opmarket._usage import EXIT_PROBLEM, UsageError, check_index_url

__all__ = ["EXIT_PENDING", "host", "status"]

#: ``opmarket status`` without ``--wait`` on a file still being validated.
EXIT_PENDING = 3


@click.command()
@click.argument("wheels", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--data",
    "data",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="The marketplace's data folder [env OPMARKET_DATA_DIR; default ./opmarket-data].",
)
def host(wheels: tuple[Path, ...], data: Path | None) -> None:
    """Host dependency wheels (not plugins) on the index: archive checks only, no validation.

    Their names are closed to uploads. For what plugins need and the index does not
    validate, such as opmarket's own wheel or numpy's.

    \b
    Examples:
      opmarket host dist/opmarket-0.2.0-py3-none-any.whl --data ./market
    """
    from opmarket.web._cli import _state
    from opmarket.web._hosted import HostError, host_wheel

    state = _state(data)
    for wheel in wheels:
        if not wheel.is_file():
            raise UsageError(f"{wheel}: no such file")
        try:
            done = host_wheel(state, wheel)
        except HostError as exc:
            raise UsageError(str(exc)) from None
        click.echo(f"{'hosted' if done.new else 'already hosted'}: {done.filename}")


def _base(index_url: str) -> str:
    url = index_url.rstrip("/")
    return url.removesuffix("/simple")


def _files(base: str, project: str) -> list[dict[str, Any]] | None:
    quoted = urllib.parse.quote(project)
    try:
        with urllib.request.urlopen(f"{base}/api/packages/{quoted}", timeout=30) as r:
            files = json.load(r)["files"]
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise UsageError(f"{base}: HTTP {exc.code} for package {project!r}") from None
    except (urllib.error.URLError, OSError, ValueError, KeyError) as exc:
        raise UsageError(f"{base}: cannot ask the index: {exc}") from None
    return list(files)


@click.command()
@click.argument("requirement", metavar="NAME==VERSION")
@click.option(
    "--index-url",
    required=True,
    callback=check_index_url,
    help="The index, e.g. http://host:8000/simple/.",
)
@click.option("--wait", is_flag=True, help="Wait until every file of the release is decided.")
@click.option("--timeout", type=float, default=3600.0, help="Longest --wait, in seconds.")
def status(requirement: str, index_url: str, wait: bool, timeout: float) -> None:
    """Print the validation verdict of release NAME==VERSION on an index.

    Exit code 0 validated (or hosted), 1 rejected, 2 usage error or no such release, 3 still
    pending (without --wait).
    """
    from packaging.utils import canonicalize_name
    from packaging.version import InvalidVersion, Version

    name, sep, version = requirement.partition("==")
    if not sep or not name.strip() or not version.strip():
        raise UsageError(f"{requirement!r}: give NAME==VERSION, e.g. acme-clip==0.1.0")
    try:
        wanted = Version(version.strip())
    except InvalidVersion:
        raise UsageError(f"{requirement!r}: {version!r} is not a valid version") from None
    project = str(canonicalize_name(name.strip()))
    base = _base(index_url)
    deadline = time.monotonic() + timeout
    while True:
        files = [f for f in _files(base, project) or [] if _same(f.get("version", ""), wanted)]
        if not files:
            raise UsageError(f"no release {wanted} of {project!r} on {base}")
        pending = [f for f in files if f.get("status") == "pending"]
        if not pending or not wait or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    for f in files:
        click.echo(f"{f['filename']}: {f['status']}")
        if f["status"] == "rejected":
            for line in str(f.get("log", "")).splitlines()[1:]:
                click.echo(f"  {line}")
    if any(f["status"] == "rejected" for f in files):
        sys.exit(EXIT_PROBLEM)
    if pending:
        sys.exit(EXIT_PENDING)


def _same(version: str, wanted: Version) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return bool(Version(version) == wanted)
    except InvalidVersion:
        return False
