"""What a catalog search may ask, and the error for what it may not: the filters
(:class:`SearchQuery`, which the JSON API and the home page take as their query parameters),
the bounds, and :class:`SearchError`, which the listing and the GPU filters raise."""

from __future__ import annotations

from pydantic import BaseModel, Field

from opmarket.sdk import OpmarketError

__all__ = ["MAX_OFFSET", "MAX_QUERY", "SearchError", "SearchQuery"]


#: The longest search text, in characters: longer is refused (SQLite's LIKE refuses
#: patterns over 50,000 bytes, and no name is this long).
MAX_QUERY = 200


#: The furthest a listing pages, in packages: further is refused (SQL integers are 64-bit,
#: and a hub of a billion plugins is not in sight).
MAX_OFFSET = 10**9


class SearchError(OpmarketError, ValueError):
    """A search the catalog refuses (a query over :data:`MAX_QUERY` characters, an offset
    over :data:`MAX_OFFSET`)."""


class SearchQuery(BaseModel):
    """A search's filters, each optional (empty: any): the one declaration of the catalog's
    query parameters, which the API's and the home page's models extend with paging."""

    q: str = Field(default="", description="part of a package or op name")
    device: str = Field(default="", description="CPU or GPU: has kernels for it")
    dtype: str = Field(default="", description="e.g. float, int32: has kernels for it")
    status: str = Field(default="", description="pending, validated or rejected")
    cuda: str = Field(default="", description="a CUDA major, e.g. 13: has device code for it")
    compute_capability: str = Field(
        default="", description="e.g. 8.6: has device code that runs on such a GPU"
    )
