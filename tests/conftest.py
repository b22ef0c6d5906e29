"""Shared test set-up: hypothesis profiles and the paths of the shared test data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

REPO = Path(__file__).resolve().parent.parent
# TensorFlow's op history files and compatibility cases live beside the checkout.
SHARED_TESTDATA = REPO.parent / "shared" / "testdata"

# Bounded examples in CI; more locally. HYPOTHESIS_PROFILE=dev for a longer run.
settings.register_profile(
    "ci", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=300, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(scope="session")
def shared_testdata() -> Path:
    """../shared/testdata, or a skip saying why it is missing."""
    if not SHARED_TESTDATA.is_dir():
        pytest.skip(f"shared test data not found at {SHARED_TESTDATA}")
    return SHARED_TESTDATA
