"""``opmarket host`` (the operator hosts dependencies) and ``opmarket status`` (an upload's
verdict, asked of a running index)."""

from __future__ import annotations

import json
import sys
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from packaging.version import Version

from opmarket.cli._usage import EXIT_PROBLEM, UsageError, check_index_url
from opmarket.cli._web import data_option, state_from

__all__ = ["EXIT_PENDING", "host", "status"]

#: ``opmarket status`` without ``--wait`` on a file still being validated.
EXIT_PENDING = 3
_FIELDS = ("filename", "version", "status", "log")  # of a file in /api/packages/NAME


@click.command()
@click.argument("wheels", nargs=-1, required=True, type=click.Path(path_type=Path))
@data_option
def host(wheels: tuple[Path, ...], data: Path | None) -> None:
    """Host dependency wheels (not plugins) on the index: archive checks only, no validation.

    Their names are closed to uploads. For what plugins need and the index does not
    validate, such as opmarket's own wheel or numpy's.

    \b
    Examples:
      opmarket host dist/opmarket-0.2.0-py3-none-any.whl --data ./market
    """
    from opmarket.web.catalog._hosted import HostError, host_wheel

    state = state_from(data)
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


@dataclass(frozen=True, slots=True)
class _File:
    """One file of the package API's answer, as status prints it."""

    filename: str
    version: str
    status: str
    log: str


def _files(base: str, project: str) -> list[_File] | None:
    """The files of ``project`` the index's JSON API lists (None: no such project); a
    UsageError for an answer that is not that API's, too large or too slow."""
    from opmarket._fetch import Fetcher, FetchError

    url = f"{base}/api/packages/{urllib.parse.quote(project)}"
    try:
        body = Fetcher().get(url, accept="application/json").body
    except FetchError as exc:
        if exc.status == 404:
            return None
        raise UsageError(f"cannot ask the index: {exc}") from None
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:  # RecursionError: [[[[...]]]] nested deep
        raise UsageError(f"{url}: not the package API's JSON: {type(exc).__name__}") from None
    entries = data.get("files") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise UsageError(f"{url}: not the package API's JSON: no list of 'files'")
    files: list[_File] = []
    for i, f in enumerate(entries):
        if not isinstance(f, dict) or not all(isinstance(f.get(k), str) for k in _FIELDS):
            raise UsageError(
                f"{url}: not the package API's JSON: files[{i}] is not an object with "
                "'filename', 'version', 'status' and 'log' strings"
            )
        files.append(_File(f["filename"], f["version"], f["status"], f["log"]))
    return files


@click.command()
@click.argument("requirement", metavar="NAME==VERSION")
@click.option(
    "--index-url",
    required=True,
    callback=check_index_url,
    help="The index, e.g. http://host:8000/simple/; each ask must answer within "
    "$OPMARKET_INDEX_TIMEOUT seconds (default 60).",
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

    from opmarket._fetch import printable

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
    while True:  # each ask of the index has its own deadline ($OPMARKET_INDEX_TIMEOUT)
        files = [f for f in _files(base, project) or [] if _same(f.version, wanted)]
        if not files:
            raise UsageError(f"no release {wanted} of {project!r} on {base}")
        pending = [f for f in files if f.status == "pending"]
        if not pending or not wait or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    # What the index says is shown, never obeyed: escapes in names and logs stay text.
    for f in files:
        click.echo(f"{printable(f.filename)}: {printable(f.status)}")
        if f.status == "rejected":
            for line in f.log.splitlines()[1:]:
                click.echo(f"  {printable(line)}")
    if any(f.status == "rejected" for f in files):
        sys.exit(EXIT_PROBLEM)
    if pending:
        sys.exit(EXIT_PENDING)


def _same(version: str, wanted: Version) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return bool(Version(version) == wanted)
    except InvalidVersion:
        return False
