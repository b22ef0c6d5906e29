"""``OPMARKET_REQUIRE_SANDBOX=1`` turns the web tests' "no sandbox here" skips into
failures: a real pytest run of a hostile test where bwrap cannot be found (an empty PATH)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEST = (
    "tests/web/test_hostile_names.py::test_a_dependency_cannot_stand_in_for_the_harnesss_packaging"
)


def _run(tmp_path: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPMARKET_", "PYTEST_"))}
    env["PATH"] = str(tmp_path)  # no bwrap, no setpriv: no sandbox here
    env.update(extra)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", TEST],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.slow
def test_a_missing_sandbox_skips_unless_it_is_required(tmp_path: Path) -> None:
    skipped = _run(tmp_path)
    assert skipped.returncode == 0 and "1 skipped" in skipped.stdout, skipped.stdout
    failed = _run(tmp_path, OPMARKET_REQUIRE_SANDBOX="1")
    assert failed.returncode == 1 and "1 skipped" not in failed.stdout, failed.stdout
    assert "OPMARKET_REQUIRE_SANDBOX=1, but no sandbox here" in failed.stdout, failed.stdout
