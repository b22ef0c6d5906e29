"""Shared test set-up: hypothesis profiles and the path of TensorFlow's test data."""

from __future__ import annotations

import os
import sqlite3  # noqa: F401  # before any framework: TensorFlow bundles an SQLite without FTS5
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

REPO = Path(__file__).resolve().parent.parent
# TensorFlow's op history files and compatibility cases, carried by the repository (their
# origin, version and license: tests/data/tensorflow/README.md).
TENSORFLOW_TESTDATA = REPO / "tests" / "data" / "tensorflow"

# Bounded examples in CI; more locally. HYPOTHESIS_PROFILE=dev for a longer run.
settings.register_profile(
    "ci", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=300, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def tensorflow_testdata() -> Path:
    """tests/data/tensorflow: TensorFlow's op history files and op_compatibility cases."""
    return TENSORFLOW_TESTDATA


@pytest.fixture(scope="session")
def opmarket_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """opmarket's own wheel, built once per session as pip would (isolated, from the sdist);
    the build's output is kept beside it in ``build.log``."""
    out = tmp_path_factory.mktemp("dist")
    # From the sdist, as pip builds a download: no stale build/ folder can leak in.
    done = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(REPO)],
        capture_output=True,
        text=True,
        check=False,
    )
    (out / "build.log").write_text(done.stdout + done.stderr, encoding="utf-8")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (found,) = out.glob("opmarket-*.whl")
    return found
