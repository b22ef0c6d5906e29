"""scripts/setup as a newcomer and every scripts/test run meet it: a second run on an
unchanged tree installs nothing, and it ends with the venv's path (scripts/test reads it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

VENV = REPO / ".venv"


@pytest.mark.skipif(
    Path(sys.prefix).resolve() != VENV.resolve(),
    reason="runs scripts/setup on the venv it made; these tests run in another environment",
)
def test_a_second_set_up_of_an_unchanged_tree_installs_nothing() -> None:
    runs = [
        subprocess.run(
            [str(REPO / "scripts" / "setup")],
            capture_output=True,
            text=True,
            check=False,
            timeout=1800,
        )
        for _ in range(2)
    ]
    for done in runs:
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[-1] == str(VENV)
        assert "Editable installation" not in done.stderr  # setuptools' expected warning box
    again = runs[1].stderr
    assert "==> .venv is up to date" in again, again
    assert "installing" not in again, again
