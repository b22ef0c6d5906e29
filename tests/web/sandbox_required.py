"""``OPMARKET_REQUIRE_SANDBOX=1`` (set by CI, ``.ci/run``): a web test skipped because no
sandbox can be built here (bubblewrap, libseccomp or pyseccomp missing: the skip reason
starts with "no sandbox here") fails instead, so a CI machine that lost one of them cannot
skip the whole hostile-upload suite and still pass."""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

__all__ = ["REASON", "pytest_runtest_makereport"]

#: How the web tests' sandbox skips begin their reason.
REASON = "no sandbox here"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if os.environ.get("OPMARKET_REQUIRE_SANDBOX") == "1" and report.skipped:
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        if REASON in reason:
            report.outcome = "failed"
            report.longrepr = f"OPMARKET_REQUIRE_SANDBOX=1, but {reason.removeprefix('Skipped: ')}"
    return report
