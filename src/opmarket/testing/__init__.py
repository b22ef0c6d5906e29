"""Testing tools for plugin authors: ``opcheck`` and a pytest plugin (see docs/testing.md).

The pytest plugin (entry point ``pytest11``: ``opmarket``) gives the fixture
``opmarket_registry``, an isolated registry holding the plugin under test. Names are
imported on first use: pytest loads this package in every run, so it stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from opmarket.sdk._lazy import lazy_exports

if TYPE_CHECKING:
    from opmarket.testing._fixtures import plugin_registry as plugin_registry
    from opmarket.testing._fixtures import plugins_under_test as plugins_under_test
    from opmarket.testing._opcheck import CHECKS as CHECKS
    from opmarket.testing._opcheck import OpCheckError as OpCheckError
    from opmarket.testing._opcheck import OpCheckReport as OpCheckReport
    from opmarket.testing._opcheck import OpCheckResult as OpCheckResult
    from opmarket.testing._opcheck import OpCheckStatus as OpCheckStatus
    from opmarket.testing._opcheck import opcheck as opcheck

# module -> its public names: __all__ and the names' loading on first use come from here.
EXPORTS = {
    "opmarket.testing._fixtures": ("plugin_registry", "plugins_under_test"),
    "opmarket.testing._opcheck": (
        "CHECKS",
        "OpCheckError",
        "OpCheckReport",
        "OpCheckResult",
        "OpCheckStatus",
        "opcheck",
    ),
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, EXPORTS)
