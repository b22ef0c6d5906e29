"""The catalog's tables (SQLAlchemy 2, typed); the schema itself is made by migrations."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from packaging.utils import InvalidWheelFilename, canonicalize_version
from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from opmarket.web._status import FileStatus
from opmarket.web.wheels._filename import WheelName
from opmarket.web.wheels._variants import VariantError

__all__ = [
    "Base",
    "CatalogChange",
    "File",
    "FileStatus",
    "GpuTarget",
    "Job",
    "KernelEntry",
    "OpEntry",
    "Project",
    "ProjectKernel",
    "ProjectSummary",
    "Release",
    "Token",
    "User",
    "distribution_key",
    "utcnow",
]


def distribution_key(filename: str) -> str | None:
    """What makes a wheel one distribution of its project, as a string: normalized name,
    PEP 440 version without trailing zeros (1.0 is 1.0.0), build tag and compatibility tags.

    Two files with one key are one file under two names; the index keeps the first. None
    when ``filename`` is not a wheel's name. A PEP 825 variant wheel's label is part of its
    identity: its key ends in ``/{label}`` (a plain wheel's key has no such part).
    """
    try:
        wheel = WheelName.parse(filename)
    except (InvalidWheelFilename, VariantError):
        return None
    name, version, build, tags, label = (
        wheel.name,
        wheel.version,
        wheel.build,
        wheel.tags,
        wheel.variant,
    )
    build_tag = f"{build[0]}{build[1]}" if build else ""
    return "/".join(
        (
            name,
            canonicalize_version(version, strip_trailing_zero=True),
            build_tag,
            ".".join(sorted(str(t) for t in tags)),
            *((label,) if label is not None else ()),
        )
    )


def _key_of_row(context: Any) -> str | None:
    return distribution_key(str(context.get_current_parameters()["filename"]))


def utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


class Base(DeclarativeBase):
    pass


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    created: Mapped[datetime] = mapped_column(DateTime, default=utcnow)


class Token(Base):
    """An API token; only the SHA-256 of its secret is kept."""

    __tablename__ = "tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    digest: Mapped[str] = mapped_column(String(64), unique=True)
    project: Mapped[str | None] = mapped_column(String(200), default=None)  # normalized
    created: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    last_used: Mapped[datetime | None] = mapped_column(DateTime, default=None)

    user: Mapped[User] = relationship()


class Project(Base):
    __tablename__ = "projects"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))  # as first uploaded
    normalized: Mapped[str] = mapped_column(String(200), unique=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    created: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    summary: Mapped[str] = mapped_column(Text, default="")
    # Bumped on every change that the index shows (cache key of its pages).
    serial: Mapped[int] = mapped_column(Integer, default=0)
    # Hosted by the operator (``opmarket host``): no plugin validation, no uploads.
    hosted: Mapped[bool] = mapped_column(Boolean, default=False)

    owner: Mapped[User] = relationship()
    releases: Mapped[list[Release]] = relationship(back_populates="project")


class Release(Base):
    __tablename__ = "releases"
    __table_args__ = (UniqueConstraint("project_id", "version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id"))
    version: Mapped[str] = mapped_column(String(100))  # normalized (PEP 440)
    created: Mapped[datetime] = mapped_column(DateTime, default=utcnow)

    project: Mapped[Project] = relationship(back_populates="releases")
    files: Mapped[list[File]] = relationship(back_populates="release")


class File(Base):
    """One uploaded wheel. Filenames are unique forever: a file is never replaced."""

    __tablename__ = "files"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    release_id: Mapped[int] = mapped_column(ForeignKey("releases.id"), index=True)
    filename: Mapped[str] = mapped_column(String(300), unique=True)
    # distribution_key(filename): unique, so Foo-1.0 and foo-1.0.0 cannot both exist, even
    # when two uploads race.
    dist_key: Mapped[str | None] = mapped_column(
        String(600), unique=True, index=True, default=_key_of_row
    )
    sha256: Mapped[str] = mapped_column(String(64))
    size: Mapped[int] = mapped_column(BigInteger)
    requires_python: Mapped[str] = mapped_column(String(200), default="")
    metadata_sha256: Mapped[str] = mapped_column(String(64))
    summary: Mapped[str] = mapped_column(Text, default="")
    uploaded: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    uploader_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    status: Mapped[str] = mapped_column(String(20), default=FileStatus.PENDING)
    yanked: Mapped[bool] = mapped_column(Boolean, default=False)
    yanked_reason: Mapped[str] = mapped_column(Text, default="")
    validated: Mapped[datetime | None] = mapped_column(DateTime, default=None)
    log: Mapped[str] = mapped_column(Text, default="")
    # The validation's outcome as data: steps, op-set (canonical JSON), compat report.
    result: Mapped[dict[str, object] | None] = mapped_column(JSON, default=None)
    opset: Mapped[str] = mapped_column(Text, default="")
    # Migration 0004: what the static GPU checks found (null: no device code; see _gpu),
    # and a PEP 825 variant wheel's variant.json (null: not a variant wheel).
    gpu: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True), default=None)
    variant: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True), default=None)
    # Migration 0008: the "loads with" table (web/validation/_loads.py); [] for a file
    # without native code, null for one not checked (not validated, or before 0008).
    loads_with: Mapped[list[dict[str, Any]] | None] = mapped_column(
        JSON(none_as_null=True), default=None
    )

    release: Mapped[Release] = relationship(back_populates="files")
    uploader: Mapped[User] = relationship()
    ops: Mapped[list[OpEntry]] = relationship(back_populates="file")
    kernels: Mapped[list[KernelEntry]] = relationship(back_populates="file")
    gpu_targets: Mapped[list[GpuTarget]] = relationship(back_populates="file")


class OpEntry(Base):
    """An op a validated (or rejected) file provides, for search and the op pages."""

    __tablename__ = "op_entries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    file_id: Mapped[int] = mapped_column(ForeignKey("files.id"), index=True)
    op: Mapped[str] = mapped_column(String(200), index=True)
    signature: Mapped[str] = mapped_column(Text)
    summary: Mapped[str] = mapped_column(Text, default="")

    file: Mapped[File] = relationship(back_populates="ops")


class KernelEntry(Base):
    """One kernel on one dtype binding, and what conformance said about it."""

    __tablename__ = "kernel_entries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    file_id: Mapped[int] = mapped_column(ForeignKey("files.id"), index=True)
    op: Mapped[str] = mapped_column(String(200), index=True)
    device: Mapped[str] = mapped_column(String(20))
    dtypes: Mapped[str] = mapped_column(String(200))  # "T=float" or "" when fixed
    status: Mapped[str] = mapped_column(String(40))  # passed, failed, skipped, gpu: not run
    message: Mapped[str] = mapped_column(Text, default="")

    file: Mapped[File] = relationship(back_populates="kernels")


class GpuTarget(Base):
    """One GPU architecture a file's device code is built for (migration 0004), for the
    search by CUDA major and by compute capability."""

    __tablename__ = "gpu_targets"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    file_id: Mapped[int] = mapped_column(ForeignKey("files.id"), index=True)
    cuda_major: Mapped[int | None] = mapped_column(Integer, default=None)  # of its runtime
    kind: Mapped[str] = mapped_column(String(10))  # "sass" or "ptx"
    capability: Mapped[int] = mapped_column(Integer)  # 10 * major + minor: 75, 80, 100
    suffix: Mapped[str] = mapped_column(String(4), default="")  # "a", "f" or ""

    file: Mapped[File] = relationship(back_populates="gpu_targets")


class ProjectSummary(Base):
    """One row per project: what the catalog lists, searches and sorts by (kept by
    opmarket.web.catalog._queries.refresh_summary on every upload, verdict and yank)."""

    __tablename__ = "project_summaries"
    __table_args__ = (
        Index("ix_project_summaries_status", "status", "normalized"),
        Index("ix_project_summaries_listed", "listed", "normalized"),
        Index("ix_project_summaries_normalized", "normalized", unique=True),
    )

    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id"), primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    normalized: Mapped[str] = mapped_column(String(200))
    summary: Mapped[str] = mapped_column(Text, default="")
    # The newest validated file, else the newest file (version, then upload time).
    latest_file_id: Mapped[int | None] = mapped_column(Integer, default=None)
    latest_version: Mapped[str] = mapped_column(String(100), default="")
    status: Mapped[str] = mapped_column(String(20), default=FileStatus.PENDING)
    listed: Mapped[bool] = mapped_column(Boolean, default=False)  # has a validated file
    ops: Mapped[str] = mapped_column(Text, default="")  # the latest file's, one a line
    devices: Mapped[str] = mapped_column(String(200), default="")  # the same, space-separated


class ProjectKernel(Base):
    """A (device, dtype) the latest file of a project has a kernel for: the catalog's
    device and dtype filters. dtype is "" for kernels without type attributes."""

    __tablename__ = "project_kernels"
    __table_args__ = (Index("ix_project_kernels_device", "device", "dtype", "project_id"),)

    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id"), primary_key=True)
    device: Mapped[str] = mapped_column(String(20), primary_key=True)
    dtype: Mapped[str] = mapped_column(String(40), primary_key=True, index=True)


class Job(Base):
    """A unit of background work, claimed by one worker at a time (see _jobs)."""

    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(40))
    payload: Mapped[dict[str, object]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(20), default="queued", index=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    worker: Mapped[str] = mapped_column(String(100), default="")
    created: Mapped[datetime] = mapped_column(DateTime, default=utcnow)
    started: Mapped[datetime | None] = mapped_column(DateTime, default=None)
    heartbeat: Mapped[datetime | None] = mapped_column(DateTime, default=None)  # lease
    finished: Mapped[datetime | None] = mapped_column(DateTime, default=None)
    error: Mapped[str] = mapped_column(Text, default="")


class CatalogChange(Base):
    """A project that changed (inserted, or its serial bumped), written by a database
    trigger (migration 0007); the page caches of every process read these by id."""

    __tablename__ = "catalog_changes"
    __table_args__ = {"sqlite_autoincrement": True}  # noqa: RUF012  (SQLAlchemy's form)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    project: Mapped[str] = mapped_column(String(200))
