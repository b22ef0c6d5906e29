"""Dependencies the operator hosts (``opmarket host``): wheels that are not plugins, such as
opmarket's own or numpy's, served by the index after the archive checks alone.

A hosted project belongs to the operator: it is listed and installable like a validated
plugin, the catalog marks it ``hosted`` (no plugin validation ran), and uploads to its name
are refused, so that no uploader can claim a name the index's plugins depend on.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from opmarket.sdk import OpmarketError
from opmarket.web._errors import HTTPError
from opmarket.web._state import AppState
from opmarket.web._status import HOSTED, FileStatus
from opmarket.web.catalog._models import File, Project, Release, User, distribution_key, utcnow
from opmarket.web.catalog._queries import refresh_summary
from opmarket.web.wheels._inspect import WheelError, inspect_wheel

__all__ = ["HOSTED", "OPERATOR", "HostError", "Hosted", "host_wheel", "hosted_refusal"]

#: The owner of hosted projects: not a valid user name, so no one can add that user.
OPERATOR = "(operator)"
_LOG = "hosted by the operator (opmarket host): archive checks passed; no plugin validation\n"


class HostError(OpmarketError, ValueError):
    """A wheel ``opmarket host`` refuses: unreadable, or a name or file taken by an upload."""


@dataclass(frozen=True, slots=True)
class Hosted:
    """A wheel hosted: its file name, project, and whether it was new."""

    filename: str
    project: str
    new: bool


def hosted_refusal(normalized: str) -> HTTPError:
    """The answer to an upload to a hosted project's name."""
    return HTTPError(
        403,
        "hosted-name",
        f"project {normalized!r} is hosted by this index's operator (a dependency, not a "
        "plugin); uploads to that name are refused",
    )


def _operator(session: Session) -> User:
    user = session.scalar(select(User).where(User.name == OPERATOR))
    if user is None:
        user = User(name=OPERATOR)
        session.add(user)
        session.flush()
    return user


def host_wheel(state: AppState, path: Path) -> Hosted:
    """Check the wheel at ``path`` as uploads are checked (the archive only) and list it as
    hosted; HostError says why not. Hosting the same file again changes nothing."""
    try:
        info = inspect_wheel(path, path.name, state.settings.wheel_limits())
    except WheelError as exc:
        raise HostError(str(exc)) from None
    except OSError as exc:
        raise HostError(f"{path}: {exc.strerror or exc}") from None
    data = path.read_bytes()
    sha256 = hashlib.sha256(data).hexdigest()
    with state.db.session() as session:
        project = session.scalar(select(Project).where(Project.normalized == info.normalized))
        if project is not None and not project.hosted:
            raise HostError(
                f"{path.name}: project {info.normalized!r} was uploaded by user "
                f"{project.owner.name!r}; opmarket host does not take over uploaded projects"
            )
        existing = session.scalar(select(File).where(File.filename == info.filename))
        if existing is not None:
            if existing.sha256 != sha256:
                raise HostError(
                    f"{path.name}: a file of that name is hosted already, with other contents"
                )
            return Hosted(info.filename, info.normalized, False)
    state.storage.put_file(path, sha256)
    state.storage.put_bytes(info.metadata)
    try:
        with state.db.transaction() as session:
            _add(session, info.name, info.normalized, info.version, info.summary)
            release = session.scalar(
                select(Release)
                .join(Project)
                .where(Project.normalized == info.normalized, Release.version == info.version)
            )
            assert release is not None
            session.add(
                File(
                    release_id=release.id,
                    filename=info.filename,
                    dist_key=distribution_key(info.filename),
                    sha256=sha256,
                    size=len(data),
                    requires_python=info.requires_python,
                    metadata_sha256=info.metadata_sha256,
                    summary=info.summary,
                    uploader_id=release.project.owner_id,
                    status=FileStatus.VALIDATED,  # listed and served as validated files are
                    yanked=False,
                    yanked_reason="",
                    log=_LOG,
                    opset="",
                    validated=utcnow(),
                )
            )
            release.project.serial += 1
            session.flush()
            refresh_summary(session, release.project_id)
    except IntegrityError:
        raise HostError(
            f"{path.name}: the index has this version of {info.normalized!r} with the same "
            "tags under another file name"
        ) from None
    state.pages.forget(info.normalized)
    return Hosted(info.filename, info.normalized, True)


def _add(session: Session, name: str, normalized: str, version: str, summary: str) -> None:
    project = session.scalar(select(Project).where(Project.normalized == normalized))
    if project is None:
        project = Project(
            name=name,
            normalized=normalized,
            owner_id=_operator(session).id,
            summary=summary,
            serial=0,
            hosted=True,
        )
        session.add(project)
        session.flush()
    elif not project.hosted:  # an upload created it since the check above
        raise HostError(f"project {normalized!r} was uploaded meanwhile; not hosted")
    project.summary = summary or project.summary
    release = session.scalar(
        select(Release).where(Release.project_id == project.id, Release.version == version)
    )
    if release is None:
        session.add(Release(project_id=project.id, version=version))
        session.flush()
