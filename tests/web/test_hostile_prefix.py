"""Hostile uploads, third campaign: files a plugin wheel installs outside its own packages.
pip installs ``X.data/data/*`` under the environment's prefix (a ``lib/python3.11/
site-packages/`` path there reaches site-packages: a ``.pth`` file or ``numpy/``) and
``X.data/scripts/*`` into ``bin/`` (``pip``, ``python3``); and ``Numpy/`` is ``numpy`` on a
case-insensitive file system. Each is refused before any of the wheel's code runs."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pytest

from opmarket.web import Limits, validate_wheel

from .plugins import handmade_wheel

_SITE = "lib/python3.11/site-packages"
_ENTRY_POINTS = b"[console_scripts]\npip3 = opm_prefix:main\nopm-prefix-tool = opm_prefix:main\n"


def _inspect_failure(wheel: Path) -> list[str]:
    verdict = validate_wheel(wheel, limits=Limits(timeout_s=60))
    (failed,) = verdict.failures
    assert failed.name == "inspect", verdict.log_text()
    return failed.log


@pytest.mark.slow
@pytest.mark.parametrize(
    "member",
    [
        f"opm_prefix-1.0.0.data/data/{_SITE}/evil.pth",
        f"opm_prefix-1.0.0.data/data/{_SITE}/numpy/__init__.py",
        "opm_prefix-1.0.0.data/headers/Python.h",
    ],
)
def test_a_plugin_may_not_install_under_the_prefix(tmp_path: Path, member: str) -> None:
    wheel = handmade_wheel(tmp_path, "opm-prefix", "1.0.0", {member: b"import os\n"})
    (line,) = _inspect_failure(wheel)
    assert line.startswith(f"{member}: installed under the environment's prefix"), line


@pytest.mark.slow
def test_a_plugin_may_not_replace_the_environments_scripts(tmp_path: Path) -> None:
    wheel = handmade_wheel(
        tmp_path,
        "opm-prefix",
        "1.0.0",
        {
            "opm_prefix-1.0.0.data/scripts/pip": b"#!python\n",
            "opm_prefix-1.0.0.data/scripts/python3": b"#!python\n",
            "opm_prefix-1.0.0.data/scripts/ruff": b"#!python\n",  # the dev venv's
            "opm_prefix-1.0.0.data/scripts/opm-prefix-ok": b"#!python\n",
            "opm_prefix-1.0.0.dist-info/entry_points.txt": _ENTRY_POINTS,
        },
    )
    log = _inspect_failure(wheel)
    assert len(log) == 4, log
    for name in ("'pip'", "'python3'", "'ruff'", "'pip3'"):
        assert any(f"script {name} would replace" in line for line in log), (name, log)


@pytest.mark.slow
def test_import_names_are_compared_without_case(tmp_path: Path) -> None:
    wheel = handmade_wheel(tmp_path, "opm-prefix", "1.0.0", {"Numpy/__init__.py": b""})
    (line,) = _inspect_failure(wheel)
    assert line.startswith("Numpy: an import name that numpy installs"), line


@pytest.mark.slow
def test_an_oversized_manifest_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    # Valid JSON of ~5 MiB: parsed in full before the fix (a 6.6 MiB one took 81 MiB).
    pad = base64.b64encode(os.urandom(3 * 2**20)).decode()  # incompressible: no zip bomb
    big = json.dumps({"ops": [], "pad": pad + "x" * (5 * 2**20 - len(pad) - 22)}).encode()
    assert len(big) == 5 * 2**20
    wheel = handmade_wheel(tmp_path, "opm-prefix", "1.0.0", {"opm_prefix/opmarket.opset.json": big})
    (line,) = _inspect_failure(wheel)
    assert line.startswith("opm_prefix/opmarket.opset.json: 5242880 bytes; a manifest may"), line
