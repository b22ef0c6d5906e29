"""Accepting an upload: checks first, then the blobs and rows in one go, or nothing at all."""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version
from sqlalchemy import or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from opmarket.sdk import OpmarketError
from opmarket.web._auth import Uploader
from opmarket.web._errors import HTTPError
from opmarket.web._state import AppState
from opmarket.web.catalog._hosted import hosted_refusal
from opmarket.web.catalog._models import File, FileStatus, Project, Release, distribution_key
from opmarket.web.catalog._queries import refresh_summary
from opmarket.web.routes._upstream import check_new_name
from opmarket.web.routes._variant_files import check_release_variants
from opmarket.web.storage._local import StorageError
from opmarket.web.validation._owned import reserved_problem
from opmarket.web.wheels._inspect import WheelError, WheelInfo, inspect_wheel

__all__ = ["Accepted", "Form", "ReleaseNotFoundError", "accept_upload", "set_yanked"]

_CHUNK = 1024 * 1024


class ReleaseNotFoundError(OpmarketError, LookupError):
    """No such release to yank: the project, or the version, does not exist."""


@dataclass(frozen=True, slots=True)
class Form:
    """The fields of twine's and uv's upload form that matter here."""

    action: str
    protocol_version: str
    name: str
    version: str
    filetype: str
    filename: str
    sha256: str
    md5: str
    blake2_256: str


@dataclass(frozen=True, slots=True)
class Accepted:
    """What became of an upload: the file, its project and status, and whether it is new."""

    filename: str
    sha256: str
    project: str
    status: str
    new: bool  # False for an identical re-upload


def _spool(content: BinaryIO, tmp_dir: Path, limit: int) -> tuple[Path, dict[str, str], int]:
    tmp_dir.mkdir(parents=True, exist_ok=True)
    digests: dict[str, Any] = {
        "sha256": hashlib.sha256(),
        "md5": hashlib.md5(usedforsecurity=False),
        "blake2_256": hashlib.blake2b(digest_size=32),
    }
    fd, name = tempfile.mkstemp(dir=tmp_dir, suffix=".upload")
    path = Path(name)
    size = 0
    try:
        with os.fdopen(fd, "wb") as out:
            while chunk := content.read(_CHUNK):
                size += len(chunk)
                if size > limit:
                    raise HTTPError(
                        413, "too-large", f"the file is larger than the limit of {limit} bytes"
                    )
                for h in digests.values():
                    h.update(chunk)
                out.write(chunk)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path, {k: h.hexdigest() for k, h in digests.items()}, size


def _check_form(form: Form) -> None:
    if form.action != "file_upload":
        raise HTTPError(
            400, "bad-action", f"unsupported :action {form.action!r}; only file_upload is supported"
        )
    if form.protocol_version not in ("", "1"):
        raise HTTPError(400, "bad-protocol", f"unknown protocol_version {form.protocol_version!r}")
    if form.filetype and form.filetype != "bdist_wheel":
        raise HTTPError(400, "wheels-only", f"only wheels are accepted, not {form.filetype}")
    if not (form.sha256 or form.md5 or form.blake2_256):
        raise HTTPError(400, "no-digest", "send the file's sha256_digest (twine and uv do)")


def accept_upload(state: AppState, who: Uploader, form: Form, content: BinaryIO) -> Accepted:
    """Check the upload and store it as ``pending`` with a validation job; HTTPError says
    why not. Nothing is left behind when it fails."""
    _check_form(form)
    settings = state.settings
    path, digests, size = _spool(content, settings.tmp_dir, settings.max_upload_bytes)
    try:
        return _accept_spooled(state, who, form, path, digests, size)
    finally:
        path.unlink(missing_ok=True)


def _accept_spooled(  # noqa: PLR0917  (one call site passes what the upload carried)
    state: AppState,
    who: Uploader,
    form: Form,
    path: Path,
    digests: dict[str, str],
    size: int,
) -> Accepted:
    for key, sent in (("sha256", form.sha256), ("md5", form.md5), ("blake2_256", form.blake2_256)):
        if sent and sent.strip().lower() != digests[key]:
            raise HTTPError(
                400, "digest-mismatch", f"the {key} digest sent does not match the file received"
            )
    # A file name already taken is answered first, whatever the new bytes are (as
    # Warehouse does, and what twine --skip-existing relies on).
    with state.db.session() as session:
        taken = session.scalar(select(File).where(File.filename == form.filename))
        if taken is not None:
            _check_owner(taken.release.project, who)
            if taken.sha256 != digests["sha256"]:
                raise _name_reused(form.filename)
    try:
        info = inspect_wheel(path, form.filename, state.settings.wheel_limits())
    except WheelError as exc:
        raise HTTPError(400, "invalid-wheel", str(exc)) from None
    if form.name and canonicalize_name(form.name) != info.normalized:
        raise HTTPError(
            400,
            "name-mismatch",
            f"the form says project {form.name!r}, the wheel's METADATA says {info.name!r}",
        )
    try:
        if form.version and Version(form.version) != Version(info.version):
            raise HTTPError(
                400,
                "version-mismatch",
                f"the form says version "
                f"{form.version!r}, the wheel's METADATA says {info.version!r}",
            )
    except InvalidVersion:
        raise HTTPError(400, "version-mismatch", f"invalid version {form.version!r}") from None
    if who.project is not None and who.project != info.normalized:
        raise HTTPError(
            403,
            "forbidden",
            f"this token may upload to {who.project!r} only, not {info.normalized!r}",
        )
    reserved = reserved_problem(info.normalized, state.settings.allowed_names)
    if reserved:  # not a name this index's own software depends on
        raise HTTPError(403, "reserved-name", reserved)
    check_new_name(state, info.normalized)  # not a name the upstream index serves
    upload = _Upload(info, digests["sha256"], size)
    stored: list[str] = []
    for _attempt in range(_ATTEMPTS):
        # Refusals first, from a read: a refused upload stores nothing.
        with state.db.session() as session:
            done = _settled(session, who, upload)
        if done is not None:
            return done
        # The blobs next, outside any transaction (the copy and its fsync take a while);
        # content-addressed, so storing them twice is harmless.
        try:
            stored += _put_blobs(state, path, upload)
            return _record(state, who, upload)
        except IntegrityError:
            # A concurrent upload created this file, project or release first: look again,
            # which answers as for a re-upload (identical: 200; different: 400).
            continue
        except BaseException:
            _drop_unreferenced(state, stored)
            raise
    _drop_unreferenced(state, stored)
    raise HTTPError(409, "conflict", "concurrent uploads kept changing this project; upload again")


_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class _Upload:
    info: WheelInfo
    sha256: str
    size: int

    @property
    def key(self) -> str | None:
        return distribution_key(self.info.filename)


def _settled(session: Session, who: Uploader, upload: _Upload) -> Accepted | None:
    """The answer when the catalog decides it already: HTTPError for a refusal, Accepted
    for an identical validated file; None when the upload is to be recorded."""
    info = upload.info
    normalized, filename = info.normalized, info.filename
    project = session.scalar(select(Project).where(Project.normalized == normalized))
    if project is not None:
        _check_owner(project, who)
    existing = session.scalar(select(File).where(File.filename == filename))
    if existing is not None:
        if existing.sha256 != upload.sha256:
            raise _name_reused(filename)
        if existing.status != FileStatus.REJECTED:  # validated, or its validation queued
            return Accepted(filename, existing.sha256, normalized, existing.status, False)
        # Rejected: the same bytes again ask for another validation, and meet the release's
        # variant wheels of now (others may have been published since it was rejected).
        check_release_variants(session, info)
        return None
    # Not this file name: a racing identical upload may have committed since the read above.
    # One query for both questions (the same bytes, the same distribution), each indexed.
    others = session.execute(
        select(File.filename, File.sha256).where(
            or_(File.sha256 == upload.sha256, File.dist_key == upload.key),
            File.filename != filename,
        )
    ).all()
    same_bytes = next((r.filename for r in others if r.sha256 == upload.sha256), None)
    if same_bytes is not None:
        raise HTTPError(
            400,
            "file-exists",
            f"File already exists: these bytes were "
            f"uploaded before as {same_bytes!r}; one file has one name",
        )
    same_key = next((r.filename for r in others), None)
    if same_key is not None:
        raise HTTPError(
            400,
            "file-exists",
            f"File already exists: {filename!r} is the same "
            f"project, version, build tag and tags as {same_key!r}, which "
            "was uploaded before; a published version never changes, so "
            "publish a new version",
        )
    check_release_variants(session, info)  # PEP 825: one label, one set of properties
    return None


def _check_owner(project: Project, who: Uploader) -> None:
    if project.hosted:
        raise hosted_refusal(project.normalized)
    if project.owner_id != who.user.id:
        raise HTTPError(
            403,
            "forbidden",
            f"project {project.normalized!r} belongs to another "
            f"user; {who.user.name!r} may not upload to it",
        )


def _name_reused(filename: str) -> HTTPError:
    return HTTPError(
        400,
        "file-exists",
        f"File already exists: {filename!r} was uploaded "
        "before with other contents; a file name is never reused, so publish "
        "a new version",
    )


def _put_blobs(state: AppState, path: Path, upload: _Upload) -> list[str]:
    """Store the wheel and its METADATA; the keys of the blobs that were not there."""
    metadata_key = upload.info.metadata_sha256
    new = [k for k in (upload.sha256, metadata_key) if _missing(state, k)]
    state.storage.put_file(path, upload.sha256)
    state.storage.put_bytes(upload.info.metadata)
    return new


def _drop_unreferenced(state: AppState, keys: list[str]) -> None:
    """Delete the blobs this upload stored that no row names (after a failure)."""
    if not keys:
        return
    with state.db.session() as session:
        named = set(session.scalars(select(File.sha256).where(File.sha256.in_(keys))))
        named |= set(
            session.scalars(select(File.metadata_sha256).where(File.metadata_sha256.in_(keys)))
        )
    for key in keys:
        if key not in named:
            state.storage.delete(key)


def _record(state: AppState, who: Uploader, upload: _Upload) -> Accepted:
    """The rows of the upload and its validation job, in one transaction whose checks are
    those of :func:`_settled` again (another upload may have come in between)."""
    info = upload.info
    normalized, filename = info.normalized, info.filename
    with state.db.transaction() as session:
        done = _settled(session, who, upload)
        if done is not None:
            return done
        # Read again, locked: on PostgreSQL each statement sees what committed before it,
        # so an identical upload that committed since _settled's read (pending, not
        # rejected) must not be queued a second time.
        existing = session.scalar(select(File).where(File.filename == filename).with_for_update())
        if existing is not None and existing.sha256 != upload.sha256:
            raise _name_reused(filename)
        if existing is not None and existing.status != FileStatus.REJECTED:
            return Accepted(filename, existing.sha256, normalized, existing.status, False)
        if existing is not None:
            # Rejected: the same bytes again are a request to validate once more (its
            # blobs, if they were lost, are back in the store).
            existing.status, existing.log = FileStatus.PENDING, "validation queued again\n"
            state.queue.enqueue(session, "validate", {"file_id": existing.id})
            accepted = Accepted(filename, existing.sha256, normalized, FileStatus.PENDING, False)
            project_id = _project_id(session, normalized)
        else:
            file, project_id = _add_file(session, who, upload)
            state.queue.enqueue(session, "validate", {"file_id": file.id})
            accepted = Accepted(filename, upload.sha256, normalized, FileStatus.PENDING, True)
        # A change the catalog shows (a new latest version, a file on the project's page):
        # the serial bump logs it for every process's caches (opmarket.web.routes._cache).
        session.execute(
            update(Project).where(Project.id == project_id).values(serial=Project.serial + 1)
        )
        refresh_summary(session, project_id)
    state.pages.forget(normalized)
    state.queue.notify()
    return accepted


def _add_file(session: Session, who: Uploader, upload: _Upload) -> tuple[File, int]:
    """The new file's row (and its project's and release's when they are new), and its
    project's id."""
    info = upload.info
    project = session.scalar(select(Project).where(Project.normalized == info.normalized))
    release = None
    if project is None:
        project = Project(
            name=info.name,
            normalized=info.normalized,
            owner_id=who.user.id,
            summary=info.summary,
            serial=0,
        )
        session.add(project)
        session.flush()
    else:  # a new project has no releases to look through
        release = _find_release(session, project.id, info.version)
    if release is None:
        release = Release(project_id=project.id, version=info.version)
        session.add(release)
        session.flush()
    file = File(
        release_id=release.id,
        filename=info.filename,
        dist_key=upload.key,
        sha256=upload.sha256,
        size=upload.size,
        requires_python=info.requires_python,
        metadata_sha256=info.metadata_sha256,
        summary=info.summary,
        uploader_id=who.user.id,
        status=FileStatus.PENDING,
        yanked=False,
        yanked_reason="",
        log="validation queued\n",
        opset="",
        variant=info.variant,
    )
    session.add(file)
    session.flush()
    project.summary = info.summary or project.summary
    return file, project.id


def _project_id(session: Session, normalized: str) -> int:
    project_id = session.scalar(select(Project.id).where(Project.normalized == normalized))
    assert project_id is not None
    return project_id


def _find_release(session: Session, project_id: int, version: str) -> Release | None:
    """The project's release of ``version`` by PEP 440 equality: 1.0 and 1.0.0 are one."""
    wanted = Version(version)
    for release in session.scalars(select(Release).where(Release.project_id == project_id)):
        try:
            if Version(release.version) == wanted:
                return release
        except InvalidVersion:
            continue
    return None


def _missing(state: AppState, key: str) -> bool:
    try:
        state.storage.size(key)
    except StorageError:
        return True
    return False


def set_yanked(state: AppState, project: str, version: str, yanked: bool, reason: str) -> int:
    """Yank (or un-yank) every file of a release; how many. ReleaseNotFoundError when there
    is none."""
    normalized = str(canonicalize_name(project))
    try:
        wanted = str(Version(version))
    except InvalidVersion:
        raise ReleaseNotFoundError(f"{version!r} is not a valid version") from None
    with state.db.transaction() as session:
        project_id = session.scalar(select(Project.id).where(Project.normalized == normalized))
        release = None if project_id is None else _find_release(session, project_id, wanted)
        if release is None:
            raise ReleaseNotFoundError(f"no release {wanted} of {normalized!r}")
        files = session.scalars(select(File).where(File.release_id == release.id)).all()
        for f in files:
            f.yanked, f.yanked_reason = yanked, reason if yanked else ""
        release.project.serial += 1
        refresh_summary(session, release.project_id)
    state.pages.forget(normalized)
    return len(files)
