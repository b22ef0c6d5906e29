"""The schemas compat-check compares for a plugin release are the ones ``import
opmarket.torch`` registers: checked against torch itself for every installed first-party
plugin (in a fresh process, so the registration stays out of the other tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version

import pytest

pytest.importorskip("torch")

PLUGINS = [
    "opmarket-zero-out",
    "opmarket-zero-out-c",
    "opmarket-atan",
    "opmarket-bitcast",
    "opmarket-median-pool",
    "opmarket-time-two",
]

SCRIPT = """
import json, sys
import torch
import opmarket.torch
from opmarket.compat import opset_from_dist
from opmarket.compat._torch_check import opset_schema_lines

out = []
for dist in sys.argv[1:]:
    for line in opset_schema_lines(opset_from_dist(dist), dist):
        name, _, overload = line.full_name.partition(".")
        ns, _, op = name.partition("::")
        packet = getattr(getattr(torch.ops, ns), op)
        registered = str(getattr(packet, overload or "default")._schema)
        out.append([dist, line.text, registered])
print(json.dumps(out))
"""


def _installed() -> list[str]:
    found = []
    for dist in PLUGINS:
        try:
            version(dist)
        except PackageNotFoundError:
            continue
        found.append(dist)
    return found


@pytest.mark.slow
def test_plugin_schemas_are_what_the_torch_bridge_registers() -> None:
    plugins = _installed()
    if not plugins:
        pytest.skip("no first-party plugin is installed (scripts/setup installs them)")
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, *plugins],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert len({r[0] for r in rows}) >= 3  # most plugins have ops PyTorch can carry
    assert any(".c_abi(" in r[1] for r in rows)  # labelled kernels are overloads
    assert [r[1] for r in rows] == [r[2] for r in rows]
