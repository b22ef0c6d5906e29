"""Device scopes: where the ops called inside a ``with device("GPU"):`` block run."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["DEVICE_PREFERENCE", "current_device", "device", "device_scope"]

#: Where a call runs when no ``device()`` scope says: the first device with a kernel.
DEVICE_PREFERENCE: tuple[str, ...] = ("GPU", "CPU")

#: The innermost scope's device (its ``get`` is on the generated wrappers' per-call path).
device_scope: ContextVar[str | None] = ContextVar("opmarket_device", default=None)


@contextmanager
def device(name: str) -> Iterator[None]:
    """Run the ops called inside on ``name`` (``"CPU"``, ``"GPU"``): ``with device("GPU"):``."""
    token = device_scope.set(name.upper())
    try:
        yield
    finally:
        device_scope.reset(token)


def current_device() -> str | None:
    """The device of the innermost ``device()`` scope, or None."""
    return device_scope.get()
