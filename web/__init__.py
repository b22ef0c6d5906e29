"""The marketplace: a pip-compatible index of validated plugin wheels, uploads, validation,
catalog pages and a JSON API (see docs/marketplace.md).

Names load on first use, so that ``opmarket``'s command line does not import the server's
dependencies (FastAPI, SQLAlchemy) until a web command runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from opmarket._lazy import lazy_exports

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
    from opmarket.web._settings import Settings
    from opmarket.web.sandbox._run import Limits
    from opmarket.web.storage._local import LocalFileStore, Storage, StorageError
    from opmarket.web.storage._open import storage_from_url
    from opmarket.web.validation._pipeline import Previous, Step, Verdict, validate_wheel
    from opmarket.web.wheels._inspect import WheelError, WheelInfo, WheelLimits, inspect_wheel

_LAZY = {
    "app_from_environment": "_app",
    "create_app": "_app",
    "Previous": "validation._pipeline",
    "Step": "validation._pipeline",
    "Verdict": "validation._pipeline",
    "validate_wheel": "validation._pipeline",
    "Limits": "sandbox._run",
    "Settings": "_settings",
    "LocalFileStore": "storage._local",
    "Storage": "storage._local",
    "StorageError": "storage._local",
    "storage_from_url": "storage._open",
    "WheelError": "wheels._inspect",
    "WheelInfo": "wheels._inspect",
    "WheelLimits": "wheels._inspect",
    "inspect_wheel": "wheels._inspect",
}
__getattr__, __dir__ = lazy_exports(
    __name__,
    {name: f"opmarket.web.{module}" for name, module in _LAZY.items()},
    # Old public names: still there, with a DeprecationWarning, until 1.0.
    deprecated={"WheelProblem": "WheelError"},
)
