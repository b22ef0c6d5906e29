"""``opmarket plugins`` and ``opmarket ops`` as a user runs them: the first-party plugins
installed by scripts/setup, and beside them a broken plugin and one whose Opm>Atan differs
(both installed by pip into a directory on PYTHONPATH)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from opmarket.cli._registry import ops, plugins
from opmarket.registry._manifest import MANIFEST_FIX
from tests.first_party import needs_first_party

OPMARKET = shutil.which("opmarket", path=str(Path(sys.executable).parent))


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("OPMARKET_PLUGINS", raising=False)
    monkeypatch.delenv("OPMARKET_DISABLE_PLUGINS", raising=False)
    monkeypatch.setenv("OPMARKET_CACHE_DIR", str(tmp_path / "cache"))


def run(*args: str, beside: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    assert OPMARKET, "the opmarket console script is not installed in this environment"
    full = {**os.environ, **env}
    if beside is not None:
        full["PYTHONPATH"] = str(beside)
    return subprocess.run(
        [OPMARKET, *args], capture_output=True, text=True, check=False, env=full, cwd=beside
    )


@needs_first_party
def test_a_broken_plugin_beside_the_first_party_ones_is_reported_and_harms_nothing(
    beside_site: Path,
) -> None:
    done = run("plugins", "--format", "json", beside=beside_site)
    assert done.returncode == 1, done.stderr  # a plugin failed to load
    got = {p["name"]: p for p in json.loads(done.stdout)["plugins"]}
    assert {"atan", "custom_call", "broken", "other_atan"} <= set(got)
    broken = got["broken"]
    assert (broken["distribution"], broken["version"], broken["status"]) == (
        "opmarket-broken-plugin",
        "0.3.0",
        "failed",
    )
    assert broken["errors"][0] == (
        "ImportError: the broken plugin cannot start: libbroken.so is missing"
    )
    # Two distributions define Opm>Atan differently: the error names both.
    other = got["other_atan"]
    assert other["status"] == "failed"
    assert other["errors"][0] == (
        "opmarket.registry._errors.RegistrationError: op 'Opm>Atan' from plugin other_atan "
        "(opmarket-other-atan 2.0.0) differs from the one registered by plugin atan "
        "(opmarket-atan 0.1.0)"
    )
    # The others still load, with their ops and kernels.
    atan = got["atan"]
    assert (atan["status"], atan["errors"]) == ("loaded", [])
    assert (atan["distribution"], atan["version"]) == ("opmarket-atan", "0.1.0")
    assert (atan["ops"], atan["kernels"]) == (["Opm>Atan"], {"CPU": 1})
    assert atan["unavailable_kernels"] == {}
    assert got["custom_call"]["status"] == "loaded"


@needs_first_party
def test_the_plugins_table_reads_as_a_table_with_the_errors_under_it(beside_site: Path) -> None:
    done = run("plugins", beside=beside_site, OPMARKET_PLUGINS="atan,broken")
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["PLUGIN", "DISTRIBUTION", "VERSION", "STATUS", "KERNELS", "OPS"]
    assert lines[1].split() == ["atan", "opmarket-atan", "0.1.0", "loaded", "CPU", "1", "Opm>Atan"]
    assert lines[2].split()[:4] == ["broken", "opmarket-broken-plugin", "0.3.0", "failed"]
    assert lines[3] == (
        "broken (opmarket-broken-plugin 0.3.0): ImportError: the broken "
        "plugin cannot start: libbroken.so is missing"
    )
    # Without loading, nothing is imported and nothing fails; the missing manifest shows.
    static = run("plugins", "--no-load", beside=beside_site, OPMARKET_PLUGINS="atan,broken")
    assert static.returncode == 0
    assert "not loaded" in static.stdout.splitlines()[2]
    assert "ships no opmarket.opset.json" in static.stdout
    # The plugin's label once per line, not once more inside the message.
    (missing,) = [line for line in static.stdout.splitlines() if "ships no" in line]
    assert missing.startswith("broken (opmarket-broken-plugin 0.3.0): entry point module ")
    assert missing.count("opmarket-broken-plugin") == 1


@needs_first_party
def test_ops_lists_from_manifests_without_importing_plugins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPMARKET_PLUGINS", "atan,custom_call")
    for module in ("opmarket_atan", "opmarket_custom_call"):
        sys.modules.pop(module, None)
    done = CliRunner().invoke(ops, ["--format", "json"])
    assert done.exit_code == 0, done.output
    listed = json.loads(done.output)
    assert [(o["op"], o["plugin"]) for o in listed["ops"]] == [
        ("Opm>Atan", "atan"),
        ("Opm>DoCustomCall", "custom_call"),
    ]
    atan = listed["ops"][0]
    assert atan["signature"] == "(x: T) -> (y: T); T: {half, float, double} = DT_FLOAT"
    assert atan["kernels"] == [
        {
            "device": "CPU",
            "constraints": {"T": ["float", "double", "half"]},
            "label": "",
            "priority": 0,
        }
    ]
    assert "opmarket_atan" not in sys.modules and "opmarket_custom_call" not in sys.modules
    table = CliRunner().invoke(ops, [])
    assert table.output.splitlines()[0].split() == ["OP", "PLUGIN", "SIGNATURE", "KERNELS"]
    assert table.output.splitlines()[2].split() == [
        "Opm>DoCustomCall",
        "custom_call",
        "(b:",
        "float,",
        "c:",
        "float)",
        "->",
        "(a:",
        "float)",
        "CPU",
    ]


@needs_first_party
@pytest.mark.parametrize(
    ("args", "want"),
    [
        (["--dtype", "float16"], ["Opm>Atan"]),
        (["--dtype", "DT_HALF", "--device", "cpu"], ["Opm>Atan"]),
        (["--dtype", "float"], ["Opm>Atan", "Opm>DoCustomCall"]),
        (["--dtype", "int32"], []),
        (["--device", "GPU"], []),
        (["--device", "CPU"], ["Opm>Atan", "Opm>DoCustomCall"]),
    ],
)
def test_ops_filters_by_device_and_dtype(
    args: list[str], want: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPMARKET_PLUGINS", "atan,custom_call")
    done = CliRunner().invoke(ops, [*args, "--format", "json"])
    assert done.exit_code == 0, done.output
    assert [o["op"] for o in json.loads(done.output)["ops"]] == want
    if not want:
        assert CliRunner().invoke(ops, args).output == "no ops match\n"


def test_ops_refuses_an_unknown_dtype_in_one_line() -> None:
    done = run("ops", "--dtype", "float17")
    assert done.returncode == 2
    assert done.stderr == "opmarket: error: --dtype: unknown dtype 'float17'\n"


def test_disabled_discovery_lists_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPMARKET_DISABLE_PLUGINS", "1")
    off = "plugin discovery is off (OPMARKET_DISABLE_PLUGINS)\n"
    assert CliRunner().invoke(plugins, []).output == off
    assert CliRunner().invoke(ops, []).output == off


@needs_first_party
def test_a_plugin_selection_that_matches_nothing_says_what_is_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPMARKET_PLUGINS", "nope")
    for command in (plugins, ops):
        output = CliRunner().invoke(command, []).output
        assert output.startswith("no installed plugin matches OPMARKET_PLUGINS='nope'; installed: ")
        installed = output.rstrip("\n").split("installed: ")[1].split(", ")
        assert {"atan", "custom_call", "median_pool", "time_two", "zero_out"} <= set(installed)


def test_a_manifest_that_disagrees_with_the_code_is_reported(tmp_path: Path) -> None:
    from opmarket.sdk import KernelDef, OpSet, op, opset_to_json

    (tmp_path / "drift_plugin").mkdir()
    (tmp_path / "drift_plugin" / "__init__.py").write_text(
        "from opmarket.sdk import hookimpl, op\n\n\n@hookimpl\ndef register(register):\n"
        "    register(op('Drift>New').input('x: float').output('y: float').build())\n"
    )
    old = op("Drift>Old").input("x: float").output("y: float").build()
    manifest = OpSet((old,), (KernelDef("Drift>Old", "GPU"),))
    (tmp_path / "drift_plugin" / "opmarket.opset.json").write_text(opset_to_json(manifest))
    info = tmp_path / "drift_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: drift-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[opmarket]\ndrift = drift_plugin\n")
    done = run("plugins", "--format", "json", beside=tmp_path, OPMARKET_PLUGINS="drift")
    assert done.returncode == 0, done.stderr
    (drift,) = json.loads(done.stdout)["plugins"]
    assert (drift["status"], drift["ops"]) == ("loaded", ["Drift>New"])
    # The manifest's GPU kernel did not register here.
    assert (drift["kernels"], drift["unavailable_kernels"]) == ({}, {"GPU": 1})
    assert drift["errors"] == [
        "opmarket.opset.json lists ['Drift>Old'], the plugin registers "
        "['Drift>New']; regenerate the manifest: " + MANIFEST_FIX
    ]


def test_kernels_on_one_device_are_shown_merged() -> None:
    from opmarket.registry._listing import describe_kernels
    from opmarket.sdk import DType, KernelDef

    kernels = [
        KernelDef("Op", "CPU", (("T", (DType.FLOAT,)),)),
        KernelDef("Op", "CPU", (("T", (DType.INT32,)),)),
        KernelDef("Op", "GPU", (("T", (DType.FLOAT,)),), priority=1),
        KernelDef("Op", "CPU", label="fast"),
    ]
    assert describe_kernels(kernels) == (
        "CPU(T: float, int32), GPU(T: float; priority 1), CPU(label fast)"
    )
    assert describe_kernels([]) == "-"
