"""The HTTP routers: the simple index, file downloads, uploads, the variants files, the JSON API
and the catalog pages, with what they share (page cache, content negotiation, upstream)."""
