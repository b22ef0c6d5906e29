"""The upstream index (``opmarket serve --upstream URL``): projects this index does not know
are answered by a redirect to an upstream simple index.

Why a redirect and not a proxy: pip and uv follow it for project pages and read the file
links relative to where they landed, so upstream's files, hashes and PEP 691 content
negotiation (the client sends its own ``Accept`` again) reach the installer untouched; no
bytes pass through this server and no copy of upstream can go stale here. The cost: clients
must be able to reach the upstream themselves.

The dependency-confusion rule, enforced both ways:

- a name known here (hosted by the operator, or uploaded, even while every file of it is
  pending, rejected or yanked) is answered from here only, never looked up upstream;
- while an upstream is set, an upload may not create a project whose name the upstream
  serves: it would shadow the upstream project for every installer of this index. The
  operator can still host such a name (``opmarket host``).
"""

from __future__ import annotations

import re
import urllib.error
import urllib.request

from sqlalchemy import select

from opmarket.web._errors import HTTPError
from opmarket.web._settings import Settings
from opmarket.web._state import AppState
from opmarket.web.catalog._models import Project

__all__ = ["check_new_name", "not_here", "upstream_base"]

_TIMEOUT_S = 10.0
_NORMALIZED = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?", re.ASCII)  # a normalized project name


def upstream_base(settings: Settings) -> str:
    """The upstream simple index's URL with one trailing slash; "" when there is none."""
    url = settings.upstream.strip()
    return url.rstrip("/") + "/" if url else ""


def not_here(settings: Settings, normalized: str) -> HTTPError:
    """The answer for a project this index does not know: 307 to the upstream's page of it,
    or 404 without an upstream."""
    base = upstream_base(settings)
    if not base or not _NORMALIZED.fullmatch(normalized):  # a Location header must be safe
        return HTTPError(404, "not-found", f"no project {normalized!r}")
    target = f"{base}{normalized}/"
    return HTTPError(
        307,
        "upstream",
        f"{normalized!r} is not hosted here; the upstream index answers: {target}",
        {"Location": target, "Cache-Control": "no-store"},
    )


def check_new_name(state: AppState, normalized: str) -> None:
    """Refuse an upload that would create ``normalized`` here while the upstream serves that
    name (403); 503 when the upstream cannot be asked. A no-op without an upstream or for a
    project that exists here."""
    base = upstream_base(state.settings)
    if not base:
        return
    with state.db.session() as session:
        if session.scalar(select(Project.id).where(Project.normalized == normalized)):
            return
    url = f"{base}{normalized}/"
    request = urllib.request.Request(url, headers={"Accept": "text/html"})
    try:
        with urllib.request.urlopen(request, timeout=_TIMEOUT_S):
            pass
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return
        raise HTTPError(
            503, "upstream-unavailable", f"cannot check {url} (HTTP {exc.code}); upload again"
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        raise HTTPError(
            503, "upstream-unavailable", f"cannot check {url} ({exc}); upload again"
        ) from None
    raise HTTPError(
        403,
        "upstream-name",
        f"project {normalized!r} exists on the upstream index {base}: an upload here would "
        "shadow it for every installer of this index (dependency confusion); choose another "
        "name, or ask the operator to host it",
    )
