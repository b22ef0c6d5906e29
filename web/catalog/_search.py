"""What a catalog search may ask, and the error for what it may not: the bounds, and
:class:`SearchError`, which the listing and the GPU filters (``gpu._index``) both raise."""

from __future__ import annotations

from opmarket.sdk import OpmarketError

__all__ = ["MAX_OFFSET", "MAX_QUERY", "SearchError"]


#: The longest search text, in characters: longer is refused (SQLite's LIKE refuses
#: patterns over 50,000 bytes, and no name is this long).
MAX_QUERY = 200


#: The furthest a listing pages, in packages: further is refused (SQL integers are 64-bit,
#: and a hub of a billion plugins is not in sight).
MAX_OFFSET = 10**9


class SearchError(OpmarketError, ValueError):
    """A search the catalog refuses (a query over :data:`MAX_QUERY` characters, an offset
    over :data:`MAX_OFFSET`)."""
