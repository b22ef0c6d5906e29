"""The marketplace: a pip-compatible index of validated plugin wheels, uploads, validation,
catalog pages and a JSON API (see docs/marketplace.md).

Names load on first use, so that ``opmarket``'s command line does not import the server's
dependencies (FastAPI, SQLAlchemy) until a web command runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from opmarket.sdk._lazy import Moved, lazy_exports

if TYPE_CHECKING:
    from opmarket.web._app import app_from_environment as app_from_environment
    from opmarket.web._app import create_app as create_app
    from opmarket.web._settings import Settings as Settings
    from opmarket.web.sandbox._run import Limits as Limits
    from opmarket.web.storage._local import LocalFileStore as LocalFileStore
    from opmarket.web.storage._local import Storage as Storage
    from opmarket.web.storage._local import StorageError as StorageError
    from opmarket.web.storage._open import storage_from_url as storage_from_url
    from opmarket.web.validation._pipeline import Previous as Previous
    from opmarket.web.validation._pipeline import Step as Step
    from opmarket.web.validation._pipeline import Verdict as Verdict
    from opmarket.web.validation._pipeline import validate_wheel as validate_wheel
    from opmarket.web.wheels._inspect import WheelError as WheelError
    from opmarket.web.wheels._inspect import WheelInfo as WheelInfo
    from opmarket.web.wheels._inspect import WheelLimits as WheelLimits
    from opmarket.web.wheels._inspect import inspect_wheel as inspect_wheel

# module -> its public names: __all__ and the names' loading on first use come from here
# (tests/test_exports.py checks the imports above against it).
EXPORTS = {
    "opmarket.web._app": ("app_from_environment", "create_app"),
    "opmarket.web.validation._pipeline": ("Previous", "Step", "Verdict", "validate_wheel"),
    "opmarket.web.sandbox._run": ("Limits",),
    "opmarket.web._settings": ("Settings",),
    "opmarket.web.storage._local": ("LocalFileStore", "Storage", "StorageError"),
    "opmarket.web.storage._open": ("storage_from_url",),
    "opmarket.web.wheels._inspect": ("WheelError", "WheelInfo", "WheelLimits", "inspect_wheel"),
}
# Old public names: still there, with a DeprecationWarning that says when they go.
DEPRECATED = {"WheelProblem": Moved("WheelError", "1.0")}
__all__, __getattr__, __dir__ = lazy_exports(__name__, EXPORTS, DEPRECATED)
