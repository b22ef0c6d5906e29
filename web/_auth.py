"""Users and API tokens: tokens are random secrets of which only the SHA-256 is stored
(a high-entropy secret needs no slow hash), sent as HTTP Basic with user ``__token__``."""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import secrets
from typing import Annotated

from fastapi import Depends, Request
from packaging.utils import canonicalize_name
from sqlalchemy import select
from sqlalchemy.orm import Session

from opmarket.web._errors import HTTPProblem
from opmarket.web._models import Token, User, utcnow
from opmarket.web._state import SessionDep

__all__ = ["Uploader", "UploaderDep", "add_user", "create_token", "token_digest"]

PREFIX = "opm-"
_USER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_CHALLENGE = {"WWW-Authenticate": 'Basic realm="opmarket"'}


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def add_user(session: Session, name: str) -> User:
    """A new user; ValueError when the name is taken or not a valid name."""
    if not _USER_NAME.match(name):
        raise ValueError(f"{name!r} is not a valid user name (letters, digits, . _ -)")
    if session.scalar(select(User).where(User.name == name)) is not None:
        raise ValueError(f"user {name!r} exists already")
    user = User(name=name)
    session.add(user)
    session.flush()
    return user


def create_token(session: Session, user_name: str, project: str | None = None) -> str:
    """A new token for ``user_name`` (only for ``project`` when given); the secret, which is
    not stored and cannot be shown again."""
    user = session.scalar(select(User).where(User.name == user_name))
    if user is None:
        raise ValueError(f"no user {user_name!r}; add one with: opmarket users add NAME")
    secret = PREFIX + secrets.token_urlsafe(32)
    session.add(Token(user_id=user.id, digest=token_digest(secret),
                      project=str(canonicalize_name(project)) if project else None))
    return secret


class Uploader:
    """Who is uploading, and which project the token is limited to (None: any)."""

    def __init__(self, user: User, project: str | None) -> None:
        self.user, self.project = user, project


def _credentials(request: Request) -> tuple[str, str]:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic" or not value:
        raise HTTPProblem(401, "unauthenticated",
                          "upload with an API token: user __token__, password the token",
                          _CHALLENGE)
    try:
        user, sep, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        raise HTTPProblem(401, "unauthenticated", "malformed Basic credentials",
                          _CHALLENGE) from None
    if not sep:
        raise HTTPProblem(401, "unauthenticated", "malformed Basic credentials", _CHALLENGE)
    return user, password


def uploader(request: Request, session: SessionDep) -> Uploader:
    user_name, password = _credentials(request)
    if user_name != "__token__":
        raise HTTPProblem(401, "unauthenticated",
                          "user names and passwords are not accepted: use user __token__ "
                          "and an API token (opmarket tokens create)", _CHALLENGE)
    token = session.scalar(select(Token).where(Token.digest == token_digest(password)))
    if token is None:
        raise HTTPProblem(403, "invalid-token", "invalid or unknown API token")
    token.last_used = utcnow()
    session.commit()
    return Uploader(token.user, token.project)


UploaderDep = Annotated[Uploader, Depends(uploader)]
