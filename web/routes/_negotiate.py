"""Content negotiation for the simple API (PEP 691): Accept with q-values, or ``?format=``."""

from __future__ import annotations

__all__ = ["HTML", "HTML_V1", "JSON_V1", "negotiate"]

JSON_V1 = "application/vnd.pypi.simple.v1+json"
HTML_V1 = "application/vnd.pypi.simple.v1+html"
HTML = "text/html"
#: What we serve, in the order that breaks ties (a browser's */* gets HTML).
OFFERED = (HTML, HTML_V1, JSON_V1)
LATEST = {
    "application/vnd.pypi.simple.latest+json": JSON_V1,
    "application/vnd.pypi.simple.latest+html": HTML_V1,
}


def _ranges(accept: str) -> list[tuple[str, float]]:
    out: list[tuple[str, float]] = []
    for part in accept.split(","):
        media, *params = (p.strip() for p in part.split(";"))
        if not media:
            continue
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = max(0.0, min(1.0, float(value)))
                except ValueError:
                    q = 0.0
        media = media.lower()
        out.append((LATEST.get(media, media), q))
    return out


def _quality(offer: str, ranges: list[tuple[str, float]]) -> float:
    """q of the most specific range that matches ``offer`` (0 when none)."""
    best, best_rank = 0.0, -1
    kind = offer.split("/", maxsplit=1)[0]
    for media, q in ranges:
        rank = 2 if media == offer else 1 if media == f"{kind}/*" else 0 if media == "*/*" else -1
        if rank > best_rank:
            best, best_rank = q, rank
    return best if best_rank >= 0 else 0.0


def negotiate(accept: str | None, fmt: str | None = None) -> str | None:
    """The content type to answer with, or None when nothing offered is acceptable (406)."""
    if fmt:
        fmt = LATEST.get(fmt.lower(), fmt.lower())
        return fmt if fmt in OFFERED else None
    if not accept or not accept.strip():
        return HTML
    ranges = _ranges(accept)
    scored = [(_quality(o, ranges), -i, o) for i, o in enumerate(OFFERED)]
    q, _, offer = max(scored)
    return offer if q > 0 else None
