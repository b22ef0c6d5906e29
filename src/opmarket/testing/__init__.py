"""Testing tools for plugin authors: ``opcheck`` and a pytest plugin (see docs/testing.md).

The pytest plugin (entry point ``pytest11``: ``opmarket``) gives the fixture
``opmarket_registry``, an isolated registry holding the plugin under test. Names are
imported on first use: pytest loads this package in every run, so it stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from opmarket._lazy import lazy_exports

if TYPE_CHECKING:
    from opmarket.testing._fixtures import plugin_registry, plugins_under_test
    from opmarket.testing._opcheck import (
        CHECKS,
        OpCheckError,
        OpCheckReport,
        OpCheckResult,
        OpCheckStatus,
        opcheck,
    )

__all__ = [
    "CHECKS",
    "OpCheckError",
    "OpCheckReport",
    "OpCheckResult",
    "OpCheckStatus",
    "opcheck",
    "plugin_registry",
    "plugins_under_test",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "CHECKS": "opmarket.testing._opcheck",
        "OpCheckError": "opmarket.testing._opcheck",
        "OpCheckReport": "opmarket.testing._opcheck",
        "OpCheckResult": "opmarket.testing._opcheck",
        "OpCheckStatus": "opmarket.testing._opcheck",
        "opcheck": "opmarket.testing._opcheck",
        "plugin_registry": "opmarket.testing._fixtures",
        "plugins_under_test": "opmarket.testing._fixtures",
    },
)
