"""What the catalog shows beyond the database's rows: the project's README rendered as PyPI
renders it (``readme_renderer``, sanitized), each op's Python call with its defaults (the
signature the registry's generated wrapper has), and each file's wheel tags."""

from __future__ import annotations

import email.parser
import email.policy
import functools
import logging
from typing import TYPE_CHECKING

from opmarket.sdk import OpmarketError

if TYPE_CHECKING:
    from opmarket.web.storage._local import Storage

__all__ = ["python_calls", "readme_html", "render_readme"]

log = logging.getLogger("opmarket.web")


@functools.lru_cache(maxsize=256)
def python_calls(opset_json: str) -> dict[str, str]:
    """Op name -> its Python call with defaults, from a validated file's op-set; {} when the
    op-set is missing or unreadable (cached: op-sets never change)."""
    if not opset_json:
        return {}
    from opmarket.registry._wrapper import python_call
    from opmarket.sdk import opset_from_json

    try:
        opset = opset_from_json(opset_json)
        return {op.name: python_call(op) for op in opset.ops}
    except (OpmarketError, ValueError, KeyError):
        log.warning("an op-set in the catalog cannot be read back", exc_info=True)
        return {}


def render_readme(metadata: bytes) -> str:
    """The README in a wheel's METADATA (its body, or the Description field) as safe HTML,
    by its Description-Content-Type (Markdown, reStructuredText, else plain text); "" when
    there is none."""
    message = email.parser.BytesParser(policy=email.policy.compat32).parsebytes(metadata)
    body = message.get_payload()
    text = body if isinstance(body, str) and body.strip() else message.get("Description", "")
    text = str(text or "")
    if not text.strip():
        return ""
    kind = str(message.get("Description-Content-Type", "text/plain")).split(";")[0].strip()
    from readme_renderer import markdown, rst, txt

    rendered: str | None = None
    if kind == "text/markdown":
        rendered = markdown.render(text)
    elif kind == "text/x-rst":
        rendered = rst.render(text)
    return rendered if rendered is not None else txt.render(text) or ""


@functools.lru_cache(maxsize=256)
def _cached(metadata: bytes) -> str:
    return render_readme(metadata)


def readme_html(storage: Storage, metadata_sha256: str) -> str:
    """The rendered README of the METADATA blob ``metadata_sha256`` in ``storage``; "" when
    the blob is missing."""
    from opmarket.web.storage._local import StorageError

    try:
        metadata = b"".join(storage.read(metadata_sha256))
    except StorageError:
        return ""
    return _cached(metadata)
