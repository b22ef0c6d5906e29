"""A free TCP port on 127.0.0.1, for the servers in tests that cannot bind port 0 and report
the port they got: ``opmarket serve`` (it prints the port it was given) and PostgreSQL (port 0
is not a port to it). Between this check and the server's bind another process may take the
port; servers that report theirs (moto's, ``test_s3.py``) are started on port 0 instead."""

from __future__ import annotations

import socket

__all__ = ["free_port"]


def free_port() -> int:
    """A port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
