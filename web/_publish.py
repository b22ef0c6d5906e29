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
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from opmarket.web._auth import Uploader
from opmarket.web._errors import HTTPProblem
from opmarket.web._models import File, Project, Release
from opmarket.web._state import AppState
from opmarket.web._wheels import WheelInfo, WheelLimits, WheelProblem, inspect_wheel

__all__ = ["Accepted", "Form", "accept_upload", "set_yanked"]

_CHUNK = 1024 * 1024


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
    filename: str
    sha256: str
    project: str
    status: str
    new: bool  # False for an identical re-upload


def _spool(content: BinaryIO, tmp_dir: Path, limit: int) -> tuple[Path, dict[str, str], int]:
    tmp_dir.mkdir(parents=True, exist_ok=True)
    digests: dict[str, Any] = {"sha256": hashlib.sha256(),
                               "md5": hashlib.md5(usedforsecurity=False),
                               "blake2_256": hashlib.blake2b(digest_size=32)}
    fd, name = tempfile.mkstemp(dir=tmp_dir, suffix=".upload")
    path = Path(name)
    size = 0
    try:
        with os.fdopen(fd, "wb") as out:
            while chunk := content.read(_CHUNK):
                size += len(chunk)
                if size > limit:
                    raise HTTPProblem(413, "too-large", f"the file is larger than the limit of "
                                      f"{limit} bytes")
                for h in digests.values():
                    h.update(chunk)
                out.write(chunk)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return path, {k: h.hexdigest() for k, h in digests.items()}, size


def _check_form(form: Form) -> None:
    if form.action != "file_upload":
        raise HTTPProblem(400, "bad-action", f"unsupported :action {form.action!r}; only "
                          "file_upload is supported")
    if form.protocol_version not in ("", "1"):
        raise HTTPProblem(400, "bad-protocol", f"unknown protocol_version "
                          f"{form.protocol_version!r}")
    if form.filetype and form.filetype != "bdist_wheel":
        raise HTTPProblem(400, "wheels-only", f"only wheels are accepted, not {form.filetype}")
    if not (form.sha256 or form.md5 or form.blake2_256):
        raise HTTPProblem(400, "no-digest", "send the file's sha256_digest (twine and uv do)")


def accept_upload(state: AppState, who: Uploader, form: Form, content: BinaryIO) -> Accepted:
    """Check the upload and store it as ``pending`` with a validation job; HTTPProblem says
    why not. Nothing is left behind when it fails."""
    _check_form(form)
    settings = state.settings
    path, digests, size = _spool(content, settings.tmp_dir, settings.max_upload_bytes)
    try:
        return _accept_spooled(state, who, form, path, digests, size)
    finally:
        path.unlink(missing_ok=True)


def _accept_spooled(state: AppState, who: Uploader, form: Form, path: Path,  # noqa: PLR0917
                    digests: dict[str, str], size: int) -> Accepted:
    for key, sent in (("sha256", form.sha256), ("md5", form.md5),
                      ("blake2_256", form.blake2_256)):
        if sent and sent.strip().lower() != digests[key]:
            raise HTTPProblem(400, "digest-mismatch",
                              f"the {key} digest sent does not match the file received")
    settings = state.settings
    limits = WheelLimits(settings.max_unpacked_bytes, settings.max_zip_entries,
                         settings.max_compression_ratio)
    try:
        info = inspect_wheel(path, form.filename, limits)
    except WheelProblem as exc:
        raise HTTPProblem(400, "invalid-wheel", str(exc)) from None
    if form.name and canonicalize_name(form.name) != info.normalized:
        raise HTTPProblem(400, "name-mismatch", f"the form says project {form.name!r}, the "
                          f"wheel's METADATA says {info.name!r}")
    try:
        if form.version and Version(form.version) != Version(info.version):
            raise HTTPProblem(400, "version-mismatch", f"the form says version "
                              f"{form.version!r}, the wheel's METADATA says {info.version!r}")
    except InvalidVersion:
        raise HTTPProblem(400, "version-mismatch", f"invalid version {form.version!r}") from None
    if who.project is not None and who.project != info.normalized:
        raise HTTPProblem(403, "forbidden", f"this token may upload to {who.project!r} only, "
                          f"not {info.normalized!r}")
    try:
        return _store(state, who, info, path, digests, size)
    except IntegrityError:
        # Another upload created the same project, release or filename at the same time.
        raise HTTPProblem(409, "conflict", "a concurrent upload changed this project; "
                          "upload again") from None


def _store(state: AppState, who: Uploader, info: WheelInfo, path: Path,  # noqa: PLR0917
           digests: dict[str, str], size: int) -> Accepted:
    storage = state.storage
    normalized, name, version, filename = info.normalized, info.name, info.version, info.filename
    summary, metadata = info.summary, info.metadata
    with state.db.session() as session:
        existing = session.scalar(select(File).where(File.filename == filename))
        if existing is not None:
            if existing.release.project.owner_id != who.user.id:
                raise HTTPProblem(403, "forbidden", f"project {normalized!r} belongs to "
                                  f"another user; {who.user.name!r} may not upload to it")
            if existing.sha256 != digests["sha256"]:
                raise HTTPProblem(400, "file-exists", f"File already exists: {filename!r} was "
                                  "uploaded before with other contents; a file name is never "
                                  "reused, so publish a new version")
            if existing.status == "validated":
                return Accepted(filename, existing.sha256, normalized, existing.status, False)
            # Not validated (rejected, or stuck pending after a failure): the same bytes
            # again are a request to validate once more, with the blobs restored if lost.
            if _missing(state, existing.sha256):
                storage.put_file(path, existing.sha256)
            if _missing(state, existing.metadata_sha256):
                storage.put_bytes(metadata)
            existing.status, existing.log = "pending", "validation queued again\n"
            state.queue.enqueue(session, "validate", {"file_id": existing.id})
            session.commit()
            state.queue.notify()
            return Accepted(filename, existing.sha256, normalized, "pending", False)
        project = session.scalar(select(Project).where(Project.normalized == normalized))
        if project is None:
            project = Project(name=name, normalized=normalized, owner_id=who.user.id,
                              summary=summary, serial=0)
            session.add(project)
            session.flush()
        elif project.owner_id != who.user.id:
            raise HTTPProblem(403, "forbidden", f"project {normalized!r} belongs to another "
                              f"user; {who.user.name!r} may not upload to it")
        release = _find_release(session, project.id, version)
        if release is None:
            release = Release(project_id=project.id, version=version)
            session.add(release)
            session.flush()
        file = File(release_id=release.id, filename=filename, sha256=digests["sha256"],
                    size=size, requires_python=info.requires_python,
                    metadata_sha256=hashlib.sha256(metadata).hexdigest(), summary=summary,
                    uploader_id=who.user.id, status="pending", yanked=False, yanked_reason="",
                    log="validation queued\n", opset="")
        session.add(file)
        session.flush()
        state.queue.enqueue(session, "validate", {"file_id": file.id})
        project.summary = summary or project.summary
        new_blobs = [k for k in (digests["sha256"], file.metadata_sha256)
                     if _missing(state, k)]
        try:
            storage.put_file(path, digests["sha256"])
            storage.put_bytes(metadata)
            session.commit()
        except BaseException:
            session.rollback()
            for key in new_blobs:
                storage.delete(key)
            raise
    state.queue.notify()
    return Accepted(filename, digests["sha256"], normalized, "pending", True)


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
    except Exception:
        return True
    return False



def set_yanked(state: AppState, project: str, version: str, yanked: bool, reason: str) -> int:
    """Yank (or un-yank) every file of a release; how many. LookupError when there is none."""
    normalized = str(canonicalize_name(project))
    try:
        wanted = str(Version(version))
    except InvalidVersion:
        raise LookupError(f"{version!r} is not a valid version") from None
    with state.db.transaction() as session:
        project_id = session.scalar(select(Project.id).where(Project.normalized == normalized))
        release = None if project_id is None else _find_release(session, project_id, wanted)
        if release is None:
            raise LookupError(f"no release {wanted} of {normalized!r}")
        files = session.scalars(select(File).where(File.release_id == release.id)).all()
        for f in files:
            f.yanked, f.yanked_reason = yanked, reason if yanked else ""
        release.project.serial += 1
    state.pages.forget(normalized)
    return len(files)
