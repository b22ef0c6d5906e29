"""``opmarket install NAME``: a plugin's newest release that loads here
(:mod:`._install_loads`), and the GPU companion that fits this machine.

The companions a plugin offers are its extras named ``cuda<major>`` (``opmarket-time-two``'s
``cuda13`` requires ``opmarket-time-two-cuda13``), read from the newest wheel's METADATA on
the index: the project page as PEP 691 JSON (or PEP 503 HTML), then the METADATA file PEP 658
serves beside the wheel, else the wheel itself (only its METADATA is read). Which extra fits
is :func:`choose_extra`'s decision, on the facts doctor reads (a GPU visible, the CUDA
version its driver supports); then pip, run as ``python -m pip``, does the installing.
"""

from __future__ import annotations

import email.parser
import html.parser
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass

import click
from packaging.tags import sys_tags
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from opmarket._fetch import Fetcher, FetchError, join_link, printable
from opmarket._usage import EXIT_PROBLEM, UsageError, check_index_url
from opmarket.registry._machine import Machine
from opmarket.registry._wheelzip import BadWheel, describe, open_wheel, read_member

__all__ = ["Choice", "IndexFile", "choose_extra", "install", "newest_wheel", "project_files"]

DEFAULT_INDEX = "https://pypi.org/simple/"
_JSON = "application/vnd.pypi.simple.v1+json"
_EXTRA = re.compile(r"^cuda(\d+)$")
_NAME = re.compile(r"[A-Z0-9]([A-Z0-9._-]*[A-Z0-9])?", re.IGNORECASE)  # PEP 508's name
_NEEDED = ("filename", "url")  # what a PEP 691 file entry must have, as strings
_METADATA_LIMIT = 16 * 1024 * 1024  # a METADATA read from a wheel; real ones are kilobytes


@dataclass(frozen=True, slots=True)
class IndexFile:
    """One file of a project page: name, absolute URL, and whether PEP 658 metadata is
    served beside it (at URL + ``.metadata``)."""

    filename: str
    url: str
    metadata: bool = False
    yanked: bool = False


@dataclass(frozen=True, slots=True)
class Choice:
    """The extra to install (None: the plugin alone) and a line per extra saying why."""

    extra: str | None
    reasons: tuple[str, ...]


def choose_extra(machine: Machine, extras: Sequence[str]) -> Choice:
    """The ``cuda<major>`` extra that fits ``machine``: a GPU is visible and its driver
    supports CUDA ``major`` (the newest such major wins); None when none fits."""
    cuda = sorted(((int(m.group(1)), e) for e in extras if (m := _EXTRA.match(e))), reverse=True)
    if not cuda:
        return Choice(None, ("the plugin offers no GPU companion (no cuda<major> extra)",))
    reasons: list[str] = []
    chosen: str | None = None
    for major, extra in cuda:
        if not machine.gpus:
            why = "no GPU visible" + (f" ({machine.gpu_note})" if machine.gpu_note else "")
            reasons.append(f"{extra}: not installed: {why}")
        elif machine.driver_cuda is not None and machine.driver_cuda[0] < major:
            reasons.append(
                f"{extra}: not installed: the NVIDIA driver supports CUDA "
                f"{machine.driver_cuda[0]}.{machine.driver_cuda[1]}, older than {major}"
            )
        elif chosen is None:
            chosen = extra
            gpu = machine.gpus[0]
            reasons.append(
                f"{extra}: chosen: {gpu.sm} GPU ({gpu.name}), driver "
                f"{machine.driver or 'version unknown'}"
            )
        else:
            reasons.append(f"{extra}: not installed: {chosen} is newer and fits")
    return Choice(chosen, tuple(reasons))


# --- the index ----------------------------------------------------------------------------


class _Links(html.parser.HTMLParser):
    """The anchors of a PEP 503 page: href and the PEP 658/714/592 attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.links.append(dict(attrs))


def project_files(index_url: str, name: str, fetcher: Fetcher | None = None) -> list[IndexFile]:
    """The files the index lists for project ``name`` (PEP 691 JSON when it answers with
    it, else the PEP 503 page); UsageError when ``name`` is not a project name or the page
    cannot be read or used (too large, too slow, a link refused: opmarket._fetch's rules)."""
    if not _NAME.fullmatch(name):
        raise UsageError(
            f"{name!r} is not a project name (letters, digits and . _ -, starting and ending "
            "with a letter or digit)"
        )
    page = urllib.parse.urljoin(index_url.rstrip("/") + "/", canonicalize_name(name) + "/")
    try:
        fetched = (fetcher or Fetcher()).get(page, accept=f"{_JSON}, text/html;q=0.1")
        if fetched.content_type == _JSON:
            return _json_files(fetched.url, fetched.body)
        return _html_files(fetched.url, fetched.body)
    except FetchError as exc:
        raise UsageError(f"cannot read the project page: {exc}") from None


def _json_files(page: str, body: bytes | bytearray) -> list[IndexFile]:
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:  # RecursionError: [[[[...]]]] nested deep
        raise UsageError(
            f"{printable(page)}: not a PEP 691 project page: {type(exc).__name__}"
        ) from None
    entries = data.get("files") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise UsageError(f"{printable(page)}: not a PEP 691 project page: no list of 'files'")
    files: list[IndexFile] = []
    for i, f in enumerate(entries):
        if not isinstance(f, dict) or not all(isinstance(f.get(k), str) for k in _NEEDED):
            raise UsageError(
                f"{printable(page)}: not a PEP 691 project page: files[{i}] is not an object with "
                "'filename' and 'url' strings"
            )
        meta = f.get("core-metadata", f.get("dist-info-metadata", False))
        files.append(
            IndexFile(f["filename"], join_link(page, f["url"]), bool(meta), bool(f.get("yanked")))
        )
    return files


def _html_files(page: str, body: bytes | bytearray) -> list[IndexFile]:
    parser = _Links()
    parser.feed(body.decode("utf-8", "replace"))
    files: list[IndexFile] = []
    for link in parser.links:
        url = urllib.parse.urldefrag(join_link(page, link.get("href") or ""))[0]
        filename = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
        meta = link.get("data-core-metadata") or link.get("data-dist-info-metadata")
        files.append(IndexFile(filename, url, meta not in (None, "false"), "data-yanked" in link))
    return files


def newest_wheel(files: Sequence[IndexFile]) -> IndexFile | None:
    """The newest release's wheel this interpreter can install (not yanked), or None. Final
    releases come first: a pre- or dev release only when there is no final one, as pip
    chooses without ``--pre``."""
    supported = {str(t) for t in sys_tags()}
    best: tuple[bool, Version, IndexFile] | None = None
    for f in files:
        if not f.filename.endswith(".whl") or f.yanked:
            continue
        try:
            _, version, _, tags = parse_wheel_filename(f.filename)
        except ValueError:  # a PEP 825 variant wheel, or a broken name: not ours to pick
            continue
        if not any(str(t) in supported for t in tags):
            continue
        rank = (not version.is_prerelease, version)
        if best is None or rank > best[:2]:
            best = (*rank, f)
    return best[2] if best else None


def wheel_extras(wheel: IndexFile, fetcher: Fetcher | None = None) -> list[str]:
    """The extras the wheel's METADATA provides (PEP 658 file, else the wheel, downloaded to
    a temporary file up to opmarket._fetch's cap on files)."""
    fetcher = fetcher or Fetcher()
    try:
        if wheel.metadata:
            text = fetcher.get(wheel.url + ".metadata").body.decode("utf-8", "replace")
        else:
            with tempfile.TemporaryFile() as f:
                fetcher.download(wheel.url, f)
                with open_wheel(f) as archive:
                    names = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
                    if not names:
                        raise BadWheel("no .dist-info/METADATA in the wheel")
                    data = read_member(archive, names[0], _METADATA_LIMIT)
                    text = data.decode("utf-8", "replace")
    except FetchError as exc:
        raise UsageError(f"cannot read the wheel's METADATA: {exc}") from None
    except BadWheel as exc:
        raise UsageError(
            f"{printable(wheel.url)}: cannot read its METADATA: {printable(str(exc))}"
        ) from None
    except OSError as exc:  # the temporary file: a full disk
        raise UsageError(f"cannot download {printable(wheel.url)}: {describe(exc)}") from None
    metadata = email.parser.Parser().parsestr(text, headersonly=True)
    return [e.strip() for e in metadata.get_all("Provides-Extra") or []]


# --- the command --------------------------------------------------------------------------


@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
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
    driver supports that CUDA version. What was chosen and why is
    printed first. Exit code 1 when pip fails, 2 when NAME is not on the index.

    \b
    Examples:
      opmarket install opmarket-time-two --index-url http://127.0.0.1:8000/simple/
      opmarket install opmarket-time-two --dry-run
    """
    from opmarket.registry._environment import read_environment
    from opmarket.registry._install_loads import newest_that_loads
    from opmarket.registry._machine import machine_facts

    index = index_url or os.environ.get("PIP_INDEX_URL") or DEFAULT_INDEX
    if index_url is None:
        check_index_url(None, "$PIP_INDEX_URL", index)
    try:
        fetcher = Fetcher()  # one deadline for every request to the index below
    except FetchError as exc:
        raise UsageError(str(exc)) from None
    files = project_files(index, name, fetcher)
    if newest_wheel(files) is None:
        raise UsageError(f"{name!r}: no wheel for this Python and platform on {index}")
    machine = machine_facts()
    # The newest release whose wheel loads here, as opmarket env-check reads it.
    wheel, skipped = newest_that_loads(files, read_environment(machine=machine), fetcher)
    if wheel is None:
        for line in skipped:
            click.echo(f"  {line}")
        click.echo(f"{name}: no release on {index} loads here", err=True)
        sys.exit(EXIT_PROBLEM)
    version = parse_wheel_filename(wheel.filename)[1]
    choice = choose_extra(machine, wheel_extras(wheel, fetcher))
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
