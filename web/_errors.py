"""One JSON error shape for every failure: ``{"error": {"status", "code", "message"}}``."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException

from opmarket.sdk import OpmarketError

__all__ = [
    "HTTPError",
    "HTTPProblem",
    "database_busy",
    "error_response",
    "install_error_handlers",
]

log = logging.getLogger("opmarket.web")


class HTTPError(OpmarketError):
    """An error answer: HTTP ``status``, a stable ``code`` and a message for people."""

    def __init__(
        self, status: int, code: str, message: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers = headers or {}


#: The name before 0.2, kept for branches that still raise it.
HTTPProblem = HTTPError


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        {"error": {"status": status, "code": code, "message": message}},
        status_code=status,
        headers=headers,
    )


def install_error_handlers(app: FastAPI) -> None:
    async def problem(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, HTTPError)
        return error_response(exc.status, exc.code, exc.message, exc.headers)

    async def http(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        code = {401: "unauthenticated", 404: "not-found", 405: "method-not-allowed"}.get(
            exc.status_code, "http-error"
        )
        return error_response(exc.status_code, code, str(exc.detail), dict(exc.headers or {}))

    async def invalid(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        where = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', '')}"
            for e in exc.errors()
        )
        return error_response(422, "invalid-request", where or "invalid request")

    async def busy(request: Request, exc: Exception) -> JSONResponse:
        if not database_busy(exc):
            return await crash(request, exc)
        log.warning("database busy on %s %s: %s", request.method, request.url.path, exc)
        return error_response(
            503,
            "database-busy",
            "the catalog's database is busy or away; try again shortly",
            {"Retry-After": "1"},
        )

    async def crash(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(
            500, "internal-error", f"internal error ({type(exc).__name__}); the server is still up"
        )

    app.add_exception_handler(HTTPError, problem)
    app.add_exception_handler(StarletteHTTPException, http)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(OperationalError, busy)
    app.add_exception_handler(PoolTimeoutError, busy)
    app.add_exception_handler(Exception, crash)


def database_busy(exc: BaseException) -> bool:
    """Whether ``exc`` says the database is busy or away, not that a statement is wrong:
    SQLite's lock outlasting its busy timeout, the connection pool empty for its timeout, a
    PostgreSQL connection lost or refused. Such a request is answered 503 with Retry-After
    (an installer or twine asks again), not 500."""
    if isinstance(exc, PoolTimeoutError):
        return True
    if not isinstance(exc, OperationalError):
        return False
    if exc.connection_invalidated:
        return True
    message = str(exc.orig).lower()
    busy_words = ("database is locked", "database table is locked", "connection", "server closed")
    return any(word in message for word in busy_words)
