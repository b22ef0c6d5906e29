"""What ``opmarket install NAME`` installs: a plugin's newest release that loads here
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
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

from packaging.tags import sys_tags
from packaging.utils import parse_wheel_filename
from packaging.version import Version

from opmarket._fetch import Fetcher, FetchError, printable
from opmarket._index import IndexFile, IndexPageError
from opmarket._index import project_files as index_files
from opmarket.registry._machine import Machine
from opmarket.registry._wheelzip import BadWheel, describe, open_wheel, read_member
from opmarket.sdk import OpmarketError

__all__ = [
    "DEFAULT_INDEX",
    "Choice",
    "IndexFile",
    "InstallError",
    "choose_extra",
    "newest_wheel",
    "project_files",
    "wheel_extras",
]

DEFAULT_INDEX = "https://pypi.org/simple/"
_EXTRA = re.compile(r"^cuda(\d+)$")
_NAME = re.compile(r"[A-Z0-9]([A-Z0-9._-]*[A-Z0-9])?", re.IGNORECASE)  # PEP 508's name
_METADATA_LIMIT = 16 * 1024 * 1024  # a METADATA read from a wheel; real ones are kilobytes


class InstallError(OpmarketError, ValueError):
    """What the index answers cannot be used to install a plugin (no such name, an
    unreadable page or METADATA); the message is one line."""


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


def project_files(index_url: str, name: str, fetcher: Fetcher | None = None) -> list[IndexFile]:
    """The files the index lists for project ``name`` (:mod:`opmarket._index`); InstallError
    when ``name`` is not a project name or the page cannot be read or used (too large, too
    slow, a link refused: opmarket._fetch's rules)."""
    if not _NAME.fullmatch(name):
        raise InstallError(
            f"{name!r} is not a project name (letters, digits and . _ -, starting and ending "
            "with a letter or digit)"
        )
    try:
        return index_files(index_url, name, fetcher or Fetcher())
    except FetchError as exc:
        raise InstallError(f"cannot read the project page: {exc}") from None
    except IndexPageError as exc:
        raise InstallError(str(exc)) from None


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
        raise InstallError(f"cannot read the wheel's METADATA: {exc}") from None
    except BadWheel as exc:
        raise InstallError(
            f"{printable(wheel.url)}: cannot read its METADATA: {printable(str(exc))}"
        ) from None
    except OSError as exc:  # the temporary file: a full disk
        raise InstallError(f"cannot download {printable(wheel.url)}: {describe(exc)}") from None
    metadata = email.parser.Parser().parsestr(text, headersonly=True)
    return [e.strip() for e in metadata.get_all("Provides-Extra") or []]
