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
    from opmarket.web._pipeline import Previous as Previous
    from opmarket.web._pipeline import Step as Step
    from opmarket.web._pipeline import Verdict as Verdict
    from opmarket.web._pipeline import validate_wheel as validate_wheel
    from opmarket.web._sandbox import Limits as Limits
    from opmarket.web._settings import Settings as Settings
    from opmarket.web._storage import LocalFileStore as LocalFileStore
    from opmarket.web._storage import Storage as Storage
    from opmarket.web._storage import StorageError as StorageError
    from opmarket.web._storage import storage_from_url as storage_from_url
    from opmarket.web._wheels import WheelError as WheelError
    from opmarket.web._wheels import WheelInfo as WheelInfo
    from opmarket.web._wheels import WheelLimits as WheelLimits
    from opmarket.web._wheels import inspect_wheel as inspect_wheel

# module -> its public names: __all__ and the names' loading on first use come from here
# (tests/test_exports.py checks the imports above against it).
EXPORTS = {
    "opmarket.web._app": ("app_from_environment", "create_app"),
    "opmarket.web._pipeline": ("Previous", "Step", "Verdict", "validate_wheel"),
    "opmarket.web._sandbox": ("Limits",),
    "opmarket.web._settings": ("Settings",),
    "opmarket.web._storage": ("LocalFileStore", "Storage", "StorageError", "storage_from_url"),
    "opmarket.web._wheels": ("WheelError", "WheelInfo", "WheelLimits", "inspect_wheel"),
}
# Old public names: still there, with a DeprecationWarning that says when they go.
DEPRECATED = {"WheelProblem": Moved("WheelError", "1.0")}
__all__, __getattr__, __dir__ = lazy_exports(__name__, EXPORTS, DEPRECATED)
