"""Users and API tokens: tokens are random secrets of which only the SHA-256 is stored
(a high-entropy secret needs no slow hash), sent as HTTP Basic with user ``__token__``."""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import timedelta
from typing import Annotated

from fastapi import Depends
from fastapi.security import HTTPBasic, HTTPBasicCredentials
from packaging.utils import canonicalize_name
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from opmarket.sdk import OpmarketError
from opmarket.web._errors import HTTPError
from opmarket.web._state import StateDep
from opmarket.web.catalog._models import Token, User, utcnow

__all__ = ["Uploader", "UploaderDep", "UserError", "add_user", "create_token", "token_digest"]

PREFIX = "opm-"
_USER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_CHALLENGE = {"WWW-Authenticate": 'Basic realm="opmarket"'}

#: A token's ``last_used`` moves at most this often: writing it on every upload took the
#: database's write lock (SQLite's one writer) for each upload, to move a time by seconds.
LAST_USED_EVERY = timedelta(minutes=1)


class UserError(OpmarketError, ValueError):
    """A user name that is invalid or taken, or a token for a user who does not exist."""


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def add_user(session: Session, name: str) -> User:
    """A new user; UserError when the name is taken or not a valid name."""
    if not _USER_NAME.match(name):
        raise UserError(f"{name!r} is not a valid user name (letters, digits, . _ -)")
    if session.scalar(select(User).where(User.name == name)) is not None:
        raise UserError(f"user {name!r} exists already")
    user = User(name=name)
    session.add(user)
    session.flush()
    return user


def create_token(session: Session, user_name: str, project: str | None = None) -> str:
    """A new token for ``user_name`` (only for ``project`` when given); the secret, which is
    not stored and cannot be shown again."""
    user = session.scalar(select(User).where(User.name == user_name))
    if user is None:
        raise UserError(f"no user {user_name!r}; add one with: opmarket users add NAME")
    secret = PREFIX + secrets.token_urlsafe(32)
    session.add(
        Token(
            user_id=user.id,
            digest=token_digest(secret),
            project=str(canonicalize_name(project)) if project else None,
        )
    )
    return secret


class Uploader:
    """Who is uploading (the user, loaded and detached from any session), which project the
    token is limited to (None: any), and the token's id (uploads are counted per token)."""

    def __init__(self, user: User, project: str | None, token_id: int = 0) -> None:
        self.user, self.project, self.token_id = user, project, token_id


# Parses the Authorization header; a missing or malformed one is a 401 with the challenge.
_basic = HTTPBasic(
    realm="opmarket", description="user __token__, password an API token", auto_error=False
)


def uploader(
    credentials: Annotated[HTTPBasicCredentials | None, Depends(_basic)], state: StateDep
) -> Uploader:
    """Who sends the upload, from HTTP Basic credentials: user ``__token__``, an API token.

    The check opens and closes its own short session: a session held by a dependency lives
    until the response is sent, and an upload's body may take minutes to arrive and its
    verdict a minute more, which would hold a pooled connection all that time.
    """
    if credentials is None:  # none, or not Basic (malformed Basic is 401 from HTTPBasic)
        raise HTTPError(
            401,
            "unauthenticated",
            "upload with an API token: user __token__, password the token",
            _CHALLENGE,
        )
    user_name, password = credentials.username, credentials.password
    if user_name != "__token__":
        raise HTTPError(
            401,
            "unauthenticated",
            "user names and passwords are not accepted: use user __token__ "
            "and an API token (opmarket tokens create)",
            _CHALLENGE,
        )
    with state.db.session() as session:  # a read: no write lock for the check itself
        found = session.execute(
            select(Token.id, Token.project, Token.last_used, User)
            .join(User, Token.user_id == User.id)
            .where(Token.digest == token_digest(password))
        ).first()
    if found is None:
        raise HTTPError(403, "invalid-token", "invalid or unknown API token")
    token_id, project, last_used, user = found
    now = utcnow()
    if last_used is None or now - last_used >= LAST_USED_EVERY:
        with state.db.transaction() as session:
            session.execute(update(Token).where(Token.id == token_id).values(last_used=now))
    return Uploader(user, project, token_id)


UploaderDep = Annotated[Uploader, Depends(uploader)]
