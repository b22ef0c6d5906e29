"""The server's settings: one typed object, from flags and ``OPMARKET_*`` variables, read once."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Final

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    from opmarket.web._limits import HeadLimits
    from opmarket.web.sandbox._run import Limits
    from opmarket.web.wheels._inspect import WheelLimits

__all__ = ["FLAG", "Settings"]

MiB = 1024 * 1024


class _Flag:
    """The mark of a setting that ``opmarket serve`` takes as a flag as well: its option is
    made from the field (name, type, description, default), not written again."""

    def __repr__(self) -> str:
        return "FLAG"


#: In a field's ``Annotated`` metadata: ``opmarket serve --NAME`` sets it.
FLAG: Final = _Flag()


class Settings(BaseSettings):
    """Everything the marketplace reads from its environment.

    Flags of ``opmarket serve`` win over ``OPMARKET_*`` environment variables, which win
    over these defaults. The defaults are embedded: SQLite and a content-addressed file
    store under ``data_dir``; ``database_url`` and ``storage_url`` point elsewhere (a
    PostgreSQL URL; an S3-compatible store once it has a driver) without code changes.
    """

    model_config = SettingsConfigDict(env_prefix="OPMARKET_", frozen=True, extra="forbid")

    data_dir: Path = Path("opmarket-data")
    host: Annotated[str, FLAG] = Field(default="127.0.0.1", description="Address to listen on")
    port: Annotated[int, FLAG] = Field(default=8000, description="Port")
    workers: Annotated[int, FLAG] = Field(default=1, ge=1, description="uvicorn worker processes")
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
    max_header_bytes: Annotated[int, FLAG] = Field(
        default=64 * 1024,
        ge=1024,
        description="Largest request line and headers, in bytes; larger: 431",
    )
    max_headers: Annotated[int, FLAG] = Field(
        default=100, ge=1, description="Most headers in a request; more: 431"
    )
    header_timeout_s: Annotated[float, FLAG] = Field(
        default=10.0, gt=0, description="Seconds a request's head may take to arrive; slower: 408"
    )
    max_body_bytes: Annotated[int, FLAG] = Field(
        default=64 * 1024,
        ge=0,
        description="Largest request body except uploads, in bytes; larger: 413",
    )
    body_timeout_s: Annotated[float, FLAG] = Field(
        default=30.0,
        gt=0,
        description="Seconds to wait for the next part of a request body; then 408",
    )
    body_deadline_s: Annotated[float, FLAG] = Field(
        default=600.0,
        gt=0,
        description="Seconds a whole request body (an upload's included) may take; then 408",
    )
    # Uploads being received and checked at once, per server process (waiting for a
    # verdict does not count); over them: 503 / 429 with Retry-After.
    max_uploads: Annotated[int, FLAG] = Field(
        default=64,
        ge=1,
        description="Uploads received at once per process; more: 503 with Retry-After",
    )
    max_uploads_per_token: Annotated[int, FLAG] = Field(
        default=8,
        ge=1,
        description="Uploads received at once per API token; more: 429 with Retry-After",
    )

    # Uploads, checked as Warehouse checks them.
    max_upload_bytes: Annotated[int, FLAG] = Field(
        default=100 * MiB, description="Largest wheel accepted, in bytes"
    )
    max_unpacked_bytes: int = 1024 * MiB
    max_zip_entries: int = 20_000
    max_compression_ratio: int = 200

    # Validation: jobs in the database, run by worker threads of each server process.
    validation_workers: Annotated[int, FLAG] = Field(
        default=1, ge=0, description="Validation threads per process (0: validate nothing here)"
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
    upload_wait_s: Annotated[float, FLAG] = Field(
        default=60.0,
        ge=0.0,
        description="Seconds an upload waits for its verdict; 0: answer 'pending' at once",
    )
    # Project names uploads may claim although this environment installs them or they are
    # well known (web/validation/_owned.py): names separated by commas or spaces ("": none).
    allowed_names: str = Field(default="", description="e.g. 'six, attrs'")
    # The simple index that answers for projects not hosted here ("": none).
    upstream: Annotated[str, FLAG] = Field(
        default="",
        description="Simple index for projects not hosted here, e.g. https://pypi.org/simple/ "
        "(a name hosted here is never looked up there)",
    )

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

    # The limits each part of the server takes, made from these settings here only.
    def sandbox_limits(self) -> Limits:
        """What the validation sandbox allows a job."""
        from opmarket.web.sandbox._run import Limits

        return Limits(
            timeout_s=self.validation_timeout_s,
            memory_mb=self.validation_memory_mb,
            max_pids=self.validation_max_pids,
            max_output_bytes=self.validation_max_output_bytes,
            disk_mb=self.validation_disk_mb,
            cpus=self.validation_cpus,
            user=self.sandbox_user,
            allow_unsandboxed=self.validation_allow_unsandboxed,
        )

    def wheel_limits(self) -> WheelLimits:
        """The zip-bomb limits on an upload."""
        from opmarket.web.wheels._inspect import WheelLimits

        return WheelLimits(
            self.max_unpacked_bytes, self.max_zip_entries, self.max_compression_ratio
        )

    def head_limits(self) -> HeadLimits:
        """The limits on a request's head."""
        from opmarket.web._limits import HeadLimits

        return HeadLimits(self.max_header_bytes, self.max_headers, self.header_timeout_s)
