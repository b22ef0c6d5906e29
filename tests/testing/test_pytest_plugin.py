"""The pytest plugin as a plugin author's project meets it: a real pytest run in a folder of
its own, with the installed first-party Atan plugin as the plugin under test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.first_party import skip_unless_installed

PYPROJECT = """\
[project]
name = "acme-atan-tests"
version = "0.1.0"

[project.entry-points.opmarket]
atan = "opmarket_atan"
"""

TESTS = """\
import numpy as np
import pytest

import opmarket
from opmarket.testing import opcheck


def test_the_plugin_under_test_is_loaded(opmarket_registry):
    assert "Opm>Atan" in opmarket_registry
    assert "Opm>ZeroOut" not in opmarket_registry  # only the plugin under test
    assert opmarket.ops.atan(np.float64(1.0)) == pytest.approx(np.pi / 4)


def test_opcheck_passes(opmarket_registry):
    report = opcheck("Opm>Atan")
    assert report.ok, str(report)


@pytest.mark.opmarket_plugins("zero_out")
def test_the_marker_chooses_other_plugins(opmarket_registry):
    assert "Opm>ZeroOut" in opmarket_registry
    assert "Opm>Atan" not in opmarket_registry
"""


def run_pytest(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
    )


def test_fixtures_and_opcheck_in_an_authors_project(tmp_path: Path) -> None:
    skip_unless_installed("atan", "zero_out")
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    (tmp_path / "test_atan.py").write_text(TESTS)
    done = run_pytest(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout


def test_a_plugin_that_is_not_installed_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        PYPROJECT + '\n[tool.pytest.ini_options]\nopmarket_plugins = ["acme_nothing"]\n'
    )
    (tmp_path / "test_x.py").write_text("def test_x(opmarket_registry):\n    pass\n")
    done = run_pytest(tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert (
        "the plugin under test 'acme_nothing' is not installed: no entry point 'acme_nothing' "
        "in the group 'opmarket'" in done.stdout
    )


def test_the_plugin_module_imports_nothing_heavy() -> None:
    # opmarket.sdk itself is loaded (its lazy loading serves opmarket.testing), none of its
    # modules but that one.
    code = (
        "import sys, opmarket.testing._pytest_plugin\n"
        "print(sorted(m for m in sys.modules if m in ('numpy', 'opmarket.registry') or "
        "m.startswith('opmarket.sdk.') and m != 'opmarket.sdk._lazy'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
