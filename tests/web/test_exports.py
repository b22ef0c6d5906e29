"""The public surface of opmarket.web, pinned."""

from __future__ import annotations

import pytest

import opmarket.web
from opmarket.sdk import OpmarketError
from opmarket.web._auth import UserError
from opmarket.web._errors import HTTPError
from opmarket.web._publish import ReleaseNotFoundError


def test_all_is_sorted_and_resolves() -> None:
    assert opmarket.web.__all__ == sorted(opmarket.web.__all__, key=lambda n: (n[0].islower(), n))
    for name in opmarket.web.__all__:
        assert getattr(opmarket.web, name) is not None


def test_public_names() -> None:
    assert set(opmarket.web.__all__) == {
        "Limits",
        "LocalFileStore",
        "Previous",
        "Settings",
        "Step",
        "Storage",
        "StorageError",
        "Verdict",
        "WheelError",
        "WheelInfo",
        "WheelLimits",
        "app_from_environment",
        "create_app",
        "inspect_wheel",
        "storage_from_url",
        "validate_wheel",
    }


def test_old_names_still_work_with_a_deprecation_warning() -> None:
    with pytest.warns(DeprecationWarning, match="use opmarket.web.WheelError"):
        old = opmarket.web.WheelProblem
    assert old is opmarket.web.WheelError


@pytest.mark.parametrize(
    ("error", "builtin"),
    [
        (opmarket.web.StorageError, RuntimeError),
        (opmarket.web.WheelError, ValueError),
        (UserError, ValueError),
        (ReleaseNotFoundError, LookupError),
        (HTTPError, Exception),
    ],
)
def test_errors_are_in_the_opmarket_tree(error: type[Exception], builtin: type[Exception]) -> None:
    assert issubclass(error, OpmarketError) and issubclass(error, builtin)
    assert error.__name__.endswith("Error")
