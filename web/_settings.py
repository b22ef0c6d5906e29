"""The server's settings: one typed object, from flags and ``OPMARKET_*`` variables, read once."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["Settings"]

MiB = 1024 * 1024


class Settings(BaseSettings):
    """Everything the marketplace reads from its environment.

    Flags of ``opmarket serve`` win over ``OPMARKET_*`` environment variables, which win
    over these defaults. The defaults are embedded: SQLite and a content-addressed file
    store under ``data_dir``; ``database_url`` and ``storage_url`` point elsewhere (a
    PostgreSQL URL; an S3-compatible store once it has a driver) without code changes.
    """

    model_config = SettingsConfigDict(env_prefix="OPMARKET_", frozen=True, extra="forbid")

    data_dir: Path = Path("opmarket-data")
    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = Field(default=1, ge=1, description="uvicorn worker processes")
    database_url: str = Field(default="", description="default: SQLite in data_dir")
    storage_url: str = Field(default="", description="default: file store in data_dir/files")
    # Connections per process: no request holds one while a body arrives or it waits.
    database_pool_size: int = Field(default=20, ge=1, description="connections kept open")
    database_pool_overflow: int = Field(default=30, ge=0, description="more, when busy")

    # How stale /simple/ may be after another process changed the catalog (this process's
    # own changes show at once).
    index_cache_ttl_s: float = Field(default=1.0, ge=0.0)

    # HTTP limits (see docs/marketplace.md, "HTTP limits"): one client must not stall the
    # others. The head is the request line and headers.
    max_header_bytes: int = Field(
        default=64 * 1024, ge=1024, description="largest request head; over it: 431"
    )
    max_headers: int = Field(default=100, ge=1, description="most headers; over it: 431")
    header_timeout_s: float = Field(
        default=10.0, gt=0, description="time for a request head to arrive; then 408"
    )
    max_body_bytes: int = Field(
        default=64 * 1024, ge=0, description="largest body, except uploads; over it: 413"
    )
    body_timeout_s: float = Field(
        default=30.0, gt=0, description="longest wait for the next part of a body; 408"
    )
    body_deadline_s: float = Field(
        default=600.0, gt=0, description="longest time a whole request body may take; 408"
    )
    # Uploads being received and checked at once, per server process (waiting for a
    # verdict does not count); over them: 503 / 429 with Retry-After.
    max_uploads: int = Field(default=64, ge=1, description="uploads at once, in all")
    max_uploads_per_token: int = Field(default=8, ge=1, description="uploads at once, per token")

    # Uploads, checked as Warehouse checks them.
    max_upload_bytes: int = 100 * MiB
    max_unpacked_bytes: int = 1024 * MiB
    max_zip_entries: int = 20_000
    max_compression_ratio: int = 200

    # Validation: jobs in the database, run by worker threads of each server process.
    validation_workers: int = Field(
        default=1, ge=0, description="0: this process validates nothing"
    )
    validation_timeout_s: float = 300.0
    validation_memory_mb: int = 4096
    validation_max_pids: int = 256
    validation_max_output_bytes: int = 4 * MiB
    sandbox_user: str = Field(default="nobody", description="who validation runs as, when root")
    # The sandbox (docs/marketplace.md): each job's private tmpfs size, CPU share, and
    # whether a server without bubblewrap may run uploaded code unsandboxed (never by default).
    validation_disk_mb: int = Field(default=1024, ge=1)
    validation_cpus: float = Field(default=1.0, gt=0)
    validation_allow_unsandboxed: bool = False
    gpu_available: bool = False
    # How long an upload waits for its verdict before answering "pending" (0: at once).
    upload_wait_s: float = Field(default=60.0, ge=0.0)
    # Project names uploads may claim although this environment installs them or they are
    # well known (web/validation/_owned.py): names separated by commas or spaces ("": none).
    allowed_names: str = Field(default="", description="e.g. 'six, attrs'")
    # The simple index that answers for projects not hosted here ("": none).
    upstream: str = Field(default="", description="e.g. https://pypi.org/simple/")

    @field_validator("upstream")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if value and not value.startswith(("http://", "https://")):
            raise ValueError(f"{value!r} is not an http:// or https:// URL")
        return value

    @property
    def database(self) -> str:
        """The SQLAlchemy URL of the catalog."""
        return self.database_url or f"sqlite:///{self.data_dir.resolve() / 'opmarket.sqlite3'}"

    @property
    def storage(self) -> str:
        """The URL of the file store."""
        return self.storage_url or (self.data_dir.resolve() / "files").as_uri()

    @property
    def tmp_dir(self) -> Path:
        """Scratch space for uploads in flight (same file system as the local store)."""
        return self.data_dir.resolve() / "tmp"
