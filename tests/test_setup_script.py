"""scripts/setup as a newcomer and every scripts/test run meet it: a second run on an
unchanged tree installs nothing, a change to anything it installs from makes it install again,
and it ends with the venv's path (scripts/test reads it)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import REPO

VENV = REPO / ".venv"

pytestmark = pytest.mark.skipif(
    Path(sys.prefix).resolve() != VENV.resolve(),
    reason="runs scripts/setup on the venv it made; these tests run in another environment",
)

# What scripts/setup reads: its packages, the plugins, its build files and itself.
_READ = ["src", "sdk", "registry", "compat", "web", "bridges", "plugins", "scripts"]


def _setup(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(root / "scripts" / "setup"), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )


def test_a_second_set_up_of_an_unchanged_tree_installs_nothing() -> None:
    runs = [_setup(REPO) for _ in range(2)]
    for done in runs:
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[-1] == str(VENV)
        assert "Editable installation" not in done.stderr  # setuptools' expected warning box
    again = runs[1].stderr
    assert "==> .venv is up to date" in again, again
    assert "installing" not in again, again
    assert _setup(REPO, "--check").returncode == 0


@pytest.fixture
def twin(tmp_path: Path) -> Path:
    """A copy of what set-up reads, in a git checkout of its own, sharing this tree's venv,
    link tree, C-ABI host and bridges' shims: ``--check`` there compares it with the last
    set-up here."""
    assert _setup(REPO).returncode == 0  # the stamp is this tree's
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "--", *_READ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    root = tmp_path / "twin"
    for name in [*listed, "pyproject.toml", "setup.py", ".gitignore"]:
        if (REPO / name).is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, root / name)
    built = [
        p.relative_to(REPO) for p in [*REPO.glob("registry/*.so"), *REPO.glob("bridges/*/*.so")]
    ]
    for shared in [Path(".venv"), Path("build"), *built]:
        (root / shared).symlink_to(REPO / shared)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    return root


def _plugin_edited(root: Path) -> None:
    setup = root / "plugins" / "zero_out" / "setup.py"
    setup.write_text(setup.read_text() + "\n# edited\n")


def _module_added(root: Path) -> None:
    (root / "registry" / "_new_module.py").write_text('"""new"""\n')


def _deleted_without_git_rm(root: Path) -> None:
    (root / "registry" / "_capi_host.c").unlink()


def _link_tree_removed(root: Path) -> None:
    (root / "build").unlink()


@pytest.mark.parametrize(
    "change", [_plugin_edited, _module_added, _deleted_without_git_rm, _link_tree_removed]
)
def test_a_change_to_what_it_installs_from_means_a_set_up_again(
    twin: Path, change: Callable[[Path], None]
) -> None:
    unchanged = _setup(twin, "--check")
    assert unchanged.returncode == 0, unchanged.stderr
    change(twin)
    changed = _setup(twin, "--check")
    assert changed.returncode == 1, changed.stderr
    assert "a set-up would install" in changed.stderr


def test_check_takes_no_other_argument() -> None:
    done = _setup(REPO, "--force")
    assert done.returncode == 2
    assert done.stderr.strip() == "usage: scripts/setup [--check]"
