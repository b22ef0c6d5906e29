"""The marketplace: a pip-compatible index of validated plugin wheels, uploads, validation,
catalog pages and a JSON API (see docs/marketplace.md).

Names load on first use, so that ``opmarket``'s command line does not import the server's
dependencies (FastAPI, SQLAlchemy) until a web command runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = [
    "Limits",
    "LocalFileStore",
    "Previous",
    "Settings",
    "Step",
    "Storage",
    "StorageError",
    "Verdict",
    "WheelError",
    "WheelInfo",
    "WheelLimits",
    "app_from_environment",
    "create_app",
    "inspect_wheel",
    "storage_from_url",
    "validate_wheel",
]

if TYPE_CHECKING:
    from opmarket.web._app import app_from_environment, create_app
    from opmarket.web._pipeline import Previous, Step, Verdict, validate_wheel
    from opmarket.web._sandbox import Limits
    from opmarket.web._settings import Settings
    from opmarket.web._storage import LocalFileStore, Storage, StorageError, storage_from_url
    from opmarket.web._wheels import WheelError, WheelInfo, WheelLimits, inspect_wheel

_LAZY = {
    "app_from_environment": "_app",
    "create_app": "_app",
    "Previous": "_pipeline",
    "Step": "_pipeline",
    "Verdict": "_pipeline",
    "validate_wheel": "_pipeline",
    "Limits": "_sandbox",
    "Settings": "_settings",
    "LocalFileStore": "_storage",
    "Storage": "_storage",
    "StorageError": "_storage",
    "storage_from_url": "_storage",
    "WheelError": "_wheels",
    "WheelInfo": "_wheels",
    "WheelLimits": "_wheels",
    "inspect_wheel": "_wheels",
}
#: Old public names: still there, with a DeprecationWarning, until 1.0.
_DEPRECATED = {"WheelProblem": "WheelError"}


def __getattr__(name: str) -> Any:
    import importlib

    if name in _LAZY:
        value = getattr(importlib.import_module(f"opmarket.web.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    if name in _DEPRECATED:
        import warnings

        new = _DEPRECATED[name]
        warnings.warn(
            f"opmarket.web.{name} is deprecated: use opmarket.web.{new}",
            DeprecationWarning,
            stacklevel=2,
        )
        return __getattr__(new)
    raise AttributeError(f"module 'opmarket.web' has no attribute {name!r}")
