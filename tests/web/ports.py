"""A free TCP port on 127.0.0.1, for the one server in tests that cannot be started on port 0:
PostgreSQL (``postgres.py``), whose ``port`` setting must be 1 to 65535 (``postgres
--describe-config``), as its socket file is named after it: it cannot bind port 0. Between
this check and PostgreSQL's bind another process may take the port. Every other server in
tests (``opmarket serve``, moto's S3 server) binds port 0 and says which port it got."""

from __future__ import annotations

import socket

__all__ = ["free_port"]


def free_port() -> int:
    """A port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
