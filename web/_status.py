"""Where a file's validation stands: the one status type, light enough for ``opmarket
validate`` (no web extra) and used by the database, the pipeline and the pages alike."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["HOSTED", "FileStatus"]


class FileStatus(StrEnum):
    """Where a file's validation stands; only ``validated`` files are listed and served.

    The values are what the database and the JSON API hold.
    """

    PENDING = "pending"
    VALIDATED = "validated"
    REJECTED = "rejected"


#: What the catalog shows instead of a status for a project the operator hosts (``opmarket
#: host``: dependencies, not plugins); its files are ``validated`` in the database.
HOSTED = "hosted"
