"""The public surface of opmarket.web, pinned."""

from __future__ import annotations

import opmarket.web


def test_all_is_sorted_and_resolves() -> None:
    assert opmarket.web.__all__ == sorted(opmarket.web.__all__, key=lambda n: (n[0].islower(), n))
    for name in opmarket.web.__all__:
        assert getattr(opmarket.web, name) is not None


def test_public_names() -> None:
    assert set(opmarket.web.__all__) == {
        "Limits", "LocalFileStore", "Previous", "Settings", "Step", "Storage", "StorageError",
        "Verdict", "WheelInfo", "WheelLimits", "WheelProblem", "app_from_environment",
        "create_app", "inspect_wheel", "storage_from_url", "validate_wheel",
    }
