"""The first-party plugins (``plugins/*``) as the tests see them: which there are, which are
installed, and a skip that names the missing ones and why. scripts/setup installs them all,
the GPU companions (``*_cuda<major>``) only where nvcc is; without them a test that needs
one skips with that reason instead of failing on an empty list."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pytest

__all__ = [
    "FIRST_PARTY",
    "is_gpu_companion",
    "is_installed",
    "needs_first_party",
    "skip_unless_installed",
]

REPO = Path(__file__).resolve().parents[1]

#: The folders of plugins/ that are plugins, by name (``zero_out``; its distribution is
#: ``opmarket-zero-out``).
FIRST_PARTY = sorted(
    p.name for p in (REPO / "plugins").iterdir() if (p / "pyproject.toml").is_file()
)


def is_gpu_companion(name: str) -> bool:
    """Whether ``name`` is a GPU companion (``time_two_cuda13``), built only with nvcc."""
    return re.search(r"_cuda\d+$", name) is not None


def is_installed(name: str) -> bool:
    """Whether the first-party plugin ``name``'s distribution is installed here."""
    try:
        importlib.metadata.distribution("opmarket-" + name.replace("_", "-"))
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def _missing(names: tuple[str, ...]) -> list[str]:
    wanted = names or tuple(n for n in FIRST_PARTY if not is_gpu_companion(n))
    return [n for n in wanted if not is_installed(n)]


def _reason(missing: list[str]) -> str:
    how = (
        "scripts/setup installs them, the GPU companions only where nvcc is"
        if any(map(is_gpu_companion, missing))
        else "scripts/setup installs them"
    )
    return f"first-party plugins not installed: {', '.join(missing)} ({how})"


def skip_unless_installed(*names: str) -> None:
    """Skip the calling test, naming what is missing, unless each plugin of ``names``
    (default: every first-party plugin but the GPU companions) is installed."""
    missing = _missing(names)
    if missing:
        pytest.skip(_reason(missing))


_MISSING = _missing(())
#: A mark for tests that need every first-party plugin but the GPU companions.
needs_first_party = pytest.mark.skipif(bool(_MISSING), reason=_reason(_MISSING))
