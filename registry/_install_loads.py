"""Which release ``opmarket install`` installs: the newest whose wheel loads here, as
``opmarket env-check`` reads it (:mod:`._envcheck`), newer ones skipped with the reason.

Releases are tried newest first in pip's order (final releases only, when there is one), each
as the wheel this interpreter would install (the first of its tags a file of the release
has); a wheel is downloaded only when every newer one was found not to load.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

from packaging.utils import parse_wheel_filename
from packaging.version import Version

from opmarket._fetch import Fetcher, FetchError, printable
from opmarket.registry._envcheck import check_wheel
from opmarket.registry._environment import Environment
from opmarket.registry._install import IndexFile, InstallError
from opmarket.registry._wheelzip import BadWheel

__all__ = ["newest_that_loads", "releases"]


def releases(files: Sequence[IndexFile], tags: Sequence[str]) -> list[tuple[Version, IndexFile]]:
    """Each release's wheel for an interpreter with ``tags`` (best first), newest release
    first; pre- and dev releases only when there is no final one, yanked files left out."""
    rank = {tag: i for i, tag in enumerate(tags)}
    best: dict[Version, tuple[int, IndexFile]] = {}
    for f in files:
        if not f.filename.endswith(".whl") or f.yanked:
            continue
        try:
            _, version, _, file_tags = parse_wheel_filename(f.filename)
        except ValueError:
            continue
        fit = min((rank[str(t)] for t in file_tags if str(t) in rank), default=None)
        if fit is not None and (version not in best or fit < best[version][0]):
            best[version] = (fit, f)
    final = [v for v in best if not v.is_prerelease]
    return [(v, best[v][1]) for v in sorted(final or best, reverse=True)]


def newest_that_loads(
    files: Sequence[IndexFile], env: Environment, fetcher: Fetcher
) -> tuple[IndexFile | None, list[str]]:
    """The newest release's wheel that loads in ``env``, and a line for each newer one
    skipped (``2.0.0: skipped: ...``); None when none loads. InstallError when a wheel cannot
    be downloaded or read."""
    skipped: list[str] = []
    with tempfile.TemporaryDirectory(prefix="opmarket-install-") as tmp:
        for version, wheel in releases(files, env.interpreter.tags):
            path = Path(tmp) / Path(wheel.filename).name
            try:
                with open(path, "wb") as f:
                    fetcher.download(wheel.url, f)
                report = check_wheel(path, env)
            except FetchError as exc:
                raise InstallError(f"cannot download {printable(wheel.url)}: {exc}") from None
            except (BadWheel, OSError) as exc:
                raise InstallError(f"{printable(wheel.filename)}: {exc}") from None
            if report.works:
                return wheel, skipped
            first = report.problems[0]
            where = f"{first.library}: " if first.library else ""
            more = len(report.problems) - 1
            skipped.append(
                f"{version}: skipped: does not load here: {first.kind}: {where}{first.detail}"
                + (
                    f" (and {more} more: opmarket env-check {printable(wheel.filename)})"
                    if more
                    else ""
                )
            )
    return None, skipped
