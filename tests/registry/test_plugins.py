"""Discovery through real entry points: fake distributions on a path of their own."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from opmarket.registry import isolated_registry, load_plugins
from opmarket.sdk import ArgDef, DType, KernelDef, OpDef, OpSet, opset_to_json

GOOD = """
import numpy as np
from opmarket.sdk import hookimpl, kernel, op

DOUBLE = op("Plug>Double").input("x: T").output("y: T").attr("T: {float, int32}").build()


@kernel("Plug>Double")
def double(x):
    return x * 2


@hookimpl
def register(register):
    register(DOUBLE, double)
"""

BROKEN_IMPORT = "raise RuntimeError('cannot start')\n"

CONFLICT = """
from opmarket.sdk import hookimpl, op

@hookimpl
def register(register):
    register(op("Plug>Double").input("x: float").output("y: float").build())
"""


def install(site: Path, dist: str, entry: str, module: str, code: str) -> None:
    (site / f"{module}.py").write_text(textwrap.dedent(code))
    info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[opmarket]\n{entry} = {module}\n")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    install(tmp_path, "opm-good", "good", "opm_good_plugin", GOOD)
    install(tmp_path, "opm-broken", "broken", "opm_broken_plugin", BROKEN_IMPORT)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("OPMARKET_PLUGINS", "good,broken")
    monkeypatch.delenv("OPMARKET_DISABLE_PLUGINS", raising=False)
    return tmp_path


def test_a_broken_plugin_is_reported_and_harms_nothing(site: Path) -> None:
    with isolated_registry(plugins=True) as reg:
        infos = {p.name: p for p in load_plugins()}
        assert infos["good"].status == "loaded"
        assert infos["good"].ops == ("Plug>Double",)
        assert (infos["good"].distribution, infos["good"].version) == ("opm-good", "1.0")
        assert infos["broken"].status == "failed"
        assert infos["broken"].error == "RuntimeError: cannot start"
        assert reg.source("Plug>Double") == "plugin good (opm-good 1.0)"


def test_conflicting_distributions_name_both(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install(site, "opm-conflict", "zconflict", "opm_conflict_plugin", CONFLICT)
    monkeypatch.setenv("OPMARKET_PLUGINS", "good,zconflict")
    with isolated_registry(plugins=True) as reg:
        infos = {p.name: p for p in load_plugins()}
        assert infos["zconflict"].status == "failed"
        assert infos["zconflict"].error == (
            "opmarket.registry._errors.RegistrationError: op 'Plug>Double' from plugin "
            "zconflict (opm-conflict 1.0) differs from the one registered by plugin good "
            "(opm-good 1.0)"
        )
        assert reg.source("Plug>Double") == "plugin good (opm-good 1.0)"


def test_plugins_env_limits_and_disable_switches_off(
    site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPMARKET_PLUGINS", "broken")
    with isolated_registry(plugins=True):
        assert [p.name for p in load_plugins()] == ["broken"]
    monkeypatch.setenv("OPMARKET_DISABLE_PLUGINS", "1")
    with isolated_registry(plugins=True):
        assert load_plugins() == []


def test_ops_load_plugins_lazily_in_a_fresh_process(site: Path) -> None:
    code = textwrap.dedent("""
        import sys
        import numpy as np
        import opmarket
        assert "opm_good_plugin" not in sys.modules, "imported too early"
        assert "numpy" in sys.modules  # imported by this script, not by opmarket
        out = opmarket.ops.double(np.array([1, 2], np.int32))
        assert "opm_good_plugin" in sys.modules
        print(out.tolist())
    """)
    env = {"PYTHONPATH": str(site), "OPMARKET_PLUGINS": "good,broken", "PATH": "/usr/bin"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=site, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[2, 4]"


def test_import_opmarket_is_light(tmp_path: Path) -> None:
    code = (
        "import sys, opmarket; heavy = [m for m in ('numpy', 'pluggy', 'opmarket.sdk',"
        " 'opmarket.registry', 'importlib.metadata') if m in sys.modules]; print(heavy)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=True
    )
    assert done.stdout.strip() == "[]"


def install_package(
    site: Path, dist: str, entry: str, package: str, code: str, *, manifest: str | None
) -> None:
    (site / package).mkdir()
    (site / package / "__init__.py").write_text(textwrap.dedent(code))
    if manifest is not None:
        (site / package / "opmarket.opset.json").write_text(manifest)
    info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[opmarket]\n{entry} = {package}\n")


LAZY_OP = """
import numpy as np
from opmarket.sdk import hookimpl, kernel, op

OP = op("Lazy>{name}").input("x: float").output("y: float").build()


@kernel("Lazy>{name}")
def run(x):
    return x + {add}


@hookimpl
def register(register):
    register(OP, run)
"""

LAZY_KERNEL = """
from opmarket.sdk import hookimpl, kernel


@kernel("Lazy>Alpha", device="GPU")
def alpha_gpu(x):
    return x + 100


@hookimpl
def register(register):
    register(alpha_gpu)
"""


def lazy_manifest(op: str | None, kernel_op: str, device: str = "CPU") -> str:
    """A manifest listing ``op`` (None: no op) and one kernel for ``kernel_op``."""

    def define(name: str) -> OpDef:
        return OpDef(name, inputs=(ArgDef("x", DType.FLOAT),), outputs=(ArgDef("y", DType.FLOAT),))

    ops = () if op is None else (define(op),)
    return opset_to_json(OpSet(ops, (KernelDef(kernel_op, device),)))


def test_ops_import_only_the_plugins_a_name_needs(tmp_path: Path) -> None:
    # Alpha's op, a GPU kernel for it in another distribution, Gamma, and a plugin without a
    # manifest (which may declare anything, so it loads with the first op needed).
    alpha = LAZY_OP.format(name="Alpha", add=1)
    gamma = LAZY_OP.format(name="Gamma", add=3)
    install_package(
        tmp_path,
        "lazy-alpha",
        "alpha",
        "lazy_alpha",
        alpha,
        manifest=lazy_manifest("Lazy>Alpha", "Lazy>Alpha"),
    )
    install_package(
        tmp_path,
        "lazy-alpha-gpu",
        "alpha_gpu",
        "lazy_alpha_gpu",
        LAZY_KERNEL,
        manifest=lazy_manifest(None, "Lazy>Alpha", "GPU"),
    )
    install_package(
        tmp_path,
        "lazy-gamma",
        "gamma",
        "lazy_gamma",
        gamma,
        manifest=lazy_manifest("Lazy>Gamma", "Lazy>Gamma"),
    )
    install_package(tmp_path, "lazy-bare", "bare", "lazy_bare", "", manifest=None)
    code = textwrap.dedent("""
        import sys
        import numpy as np
        import opmarket
        from opmarket.registry import load_plugins, plugins

        def imported():
            return sorted(m for m in ("lazy_alpha", "lazy_alpha_gpu", "lazy_gamma",
                                      "lazy_bare") if m in sys.modules)

        x = np.array([1.0], np.float32)
        with opmarket.device("CPU"):
            print(opmarket.ops.alpha(x).tolist(), imported())
        print(opmarket.ops.lazy.alpha(x).tolist())  # the GPU kernel comes first
        print(opmarket.ops["Lazy>Gamma"](x).tolist(), imported())
        print(sorted(p.name for p in load_plugins()), len(plugins()))
    """)
    env = {
        "PYTHONPATH": str(tmp_path),
        "PATH": "/usr/bin",
        "OPMARKET_CACHE_DIR": str(tmp_path / "cache"),
        "OPMARKET_PLUGINS": "alpha,alpha_gpu,gamma,bare",
    }
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        # Alpha's op, the plugin with a kernel for it, and the one without a manifest.
        "[2.0] ['lazy_alpha', 'lazy_alpha_gpu', 'lazy_bare']",
        "[101.0]",
        "[4.0] ['lazy_alpha', 'lazy_alpha_gpu', 'lazy_bare', 'lazy_gamma']",
        "['alpha', 'alpha_gpu', 'bare', 'gamma'] 4",
    ]


def test_load_plugins_from_one_folder_and_one_distribution(
    beside_site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opmarket.registry import load_plugins_from, new_registry

    monkeypatch.syspath_prepend(str(beside_site))
    monkeypatch.setenv("OPMARKET_DISABLE_PLUGINS", "1")  # not consulted
    reg = new_registry()
    (info,) = load_plugins_from(
        [str(beside_site)], registry=reg, distribution="opmarket_other_atan"
    )
    assert (info.name, info.distribution, info.version, info.status) == (
        "other_atan",
        "opmarket-other-atan",
        "2.0.0",
        "loaded",
    )
    assert reg.source("Opm>Atan") == "plugin other_atan (opmarket-other-atan 2.0.0)"
    infos = load_plugins_from([str(beside_site)], registry=new_registry())
    assert [(i.name, i.status) for i in infos] == [("broken", "failed"), ("other_atan", "loaded")]
