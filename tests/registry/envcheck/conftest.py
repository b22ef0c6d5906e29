"""What the env-check tests share: the wheels they check (tiny libraries compiled with the C
compiler, each made to break one way; first-party plugins; an op library downloaded once
from PyPI), env-check's prediction for them, and the dynamic linker's answer: each library
loaded with ctypes in a fresh Python that first imported the frameworks its wheel declares.
The prediction must equal the loader library by library, with no false alarm, and name
every failure's symbol, version or library.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent
CACHE = Path(
    os.environ.get("OPMARKET_TEST_WHEELS", Path.home() / ".cache" / "opmarket-test-wheels")
)


def _site(name: str) -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec(name)
    return Path(spec.origin).parent if spec and spec.origin else None


TORCH = _site("torch")
TENSORFLOW = _site("tensorflow")

# name -> (C source, what to link (after the object), the frameworks it declares, the
# problem kinds predicted: empty when it loads). Names are linked by asm labels, so the
# sources are C whatever the symbol's language.
CASES: dict[str, tuple[str, list[str], list[str], set[str]]] = {
    # A pybind11-like module: Py* symbols come from the interpreter, not from DT_NEEDED.
    "python_global": (
        "extern void *PyLong_FromLong(long);\n"
        "void *opm_case(long v) { return PyLong_FromLong(v); }\n",
        [],
        [],
        set(),
    ),
    # Built against a newer libstdc++ than this system's (the stub defines the version).
    "glibcxx_future": (
        "extern int opm_future(void);\nint opm_case(void) { return opm_future(); }\n",
        ["{stub}/libstdc++.so.6"],
        [],
        {"version"},
    ),
    "needed_missing": (
        "extern int opm_nowhere(void);\nint opm_case(void) { return opm_nowhere(); }\n",
        ["{stub}/libopm_nowhere.so"],
        [],
        {"needed"},
    ),
    # libc10.so needed by name and matched to the one torch's import loaded: no run path.
    "torch_needed": (
        'extern char opm_s __asm__("_ZN3c1019UndefinedTensorImpl10_singletonE");\n'
        "void *opm_case(void) { return &opm_s; }\n",
        ["-L{torch}", "-Wl,--no-as-needed", "-lc10"],
        ["torch"],
        set(),
    ),
    # The same symbol without DT_NEEDED: torch loads libc10 locally, so it is not there.
    "torch_global_only": (
        'extern char opm_s __asm__("_ZN3c1019UndefinedTensorImpl10_singletonE");\n'
        "void *opm_case(void) { return &opm_s; }\n",
        [],
        ["torch"],
        {"symbol"},
    ),
    # Two symbols this torch does not have: the loader names one, the prediction both.
    "torch_missing": (
        'extern void opm_a(void) __asm__("_ZN3c1013opm_not_thereEv");\n'
        'extern void opm_b(void) __asm__("_ZN2at9opm_neverEi");\n'
        "void opm_case(void) { opm_a(); opm_b(); }\n",
        ["-L{torch}", "-Wl,--no-as-needed", "-lc10"],
        ["torch"],
        {"symbol"},
    ),
    # TF_Version is libtensorflow_cc's, which TensorFlow's import loads globally.
    "tensorflow_global": (
        "extern const char *TF_Version(void);\n"
        "const char *opm_case(void) { return TF_Version(); }\n",
        ["-L{tensorflow}", "-Wl,--no-as-needed", "-l:libtensorflow_framework.so.2"],
        ["tensorflow"],
        set(),
    ),
    # The example: built for a TensorFlow whose logging constructor had this form.
    "tensorflow_missing": (
        "extern void opm_f(const char *, int)"
        ' __asm__("_ZN3tsl8internal15LogMessageFatalC1EPKci");\n'
        'void opm_case(void) { opm_f("x", 1); }\n',
        ["-L{tensorflow}", "-Wl,--no-as-needed", "-l:libtensorflow_framework.so.2"],
        ["tensorflow"],
        {"symbol"},
    ),
}


def needs(frameworks: list[str]) -> str | None:
    """Why a case cannot run here (a framework missing), or None."""
    missing = [f for f in frameworks if {"torch": TORCH, "tensorflow": TENSORFLOW}[f] is None]
    return f"{', '.join(missing)} not installed" if missing else None


def _run(cmd: list[str], cwd: Path | None = None) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=cwd)
    assert done.returncode == 0, " ".join(cmd) + "\n" + done.stdout[-2000:] + done.stderr[-2000:]


def _stubs(folder: Path) -> None:
    """A libstdc++.so.6 defining GLIBCXX_3.4.99 and a libopm_nowhere.so, to link against."""
    folder.mkdir()
    (folder / "v.map").write_text("GLIBCXX_3.4.99 { global: opm_future; local: *; };\n")
    (folder / "future.c").write_text("int opm_future(void) { return 1; }\n")
    (folder / "nowhere.c").write_text("int opm_nowhere(void) { return 1; }\n")
    _run(
        [
            "cc",
            "-shared",
            "-fPIC",
            "-o",
            str(folder / "libstdc++.so.6"),
            str(folder / "future.c"),
            "-Wl,-soname,libstdc++.so.6",
            f"-Wl,--version-script={folder / 'v.map'}",
        ]
    )
    _run(
        [
            "cc",
            "-shared",
            "-fPIC",
            "-o",
            str(folder / "libopm_nowhere.so"),
            str(folder / "nowhere.c"),
            "-Wl,-soname,libopm_nowhere.so",
        ]
    )


def _project(root: Path, name: str, library: Path, requires: list[str]) -> Path:
    """A project whose package ships ``library`` as data, declaring ``requires``."""
    package = f"opm_case_{name}"
    src = root / name
    (src / package).mkdir(parents=True)
    (src / package / "__init__.py").write_text("")
    shutil.copy(library, src / package / f"_{name}.so")
    deps = ", ".join(f'"{r}"' for r in requires)
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=69"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "opm-case-{name.replace("_", "-")}"\nversion = "1.0"\n'
        f"dependencies = [{deps}]\n\n"
        f'[tool.setuptools.package-data]\n{package} = ["*.so"]\n'
    )
    return src


@pytest.fixture(scope="session")
def case_wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A wheel per runnable CASE, built by pip in one call."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc)")
    root = tmp_path_factory.mktemp("env-cases")
    _stubs(root / "stub")
    folders = {
        "stub": str(root / "stub"),
        "torch": str(TORCH and TORCH / "lib"),
        "tensorflow": str(TENSORFLOW),
    }
    sources = []
    for name, (code, link, requires, _) in CASES.items():
        if needs(requires):
            continue
        (root / f"{name}.c").write_text(code)
        library = root / f"lib{name}.so"
        _run(
            ["cc", "-shared", "-fPIC", "-o", str(library), str(root / f"{name}.c")]
            + [arg.format(**folders) for arg in link]
        )
        sources.append(str(_project(root / "src", name, library, requires)))
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "-w",
            str(root / "wheels"),
            *sources,
        ]
    )
    return {
        w.name.removeprefix("opm_case_").split("-")[0]: w for w in (root / "wheels").glob("*.whl")
    }


def predict(wheels: list[Path], *extra: str) -> tuple[int, dict[str, Any]]:
    """``opmarket env-check --format json`` on ``wheels``: its exit code and document."""
    done = subprocess.run(
        [str(BIN / "opmarket"), "env-check", "--format", "json", *extra, *map(str, wheels)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


_LOAD = """
import ctypes, importlib, json, sys
frameworks, libraries = json.loads(sys.argv[1])
for name in frameworks:
    importlib.import_module(name)
out = {}
for library in libraries:
    try:
        ctypes.CDLL(library)
        out[library] = None
    except OSError as exc:
        out[library] = str(exc)
print(json.dumps(out))
"""


# A library that needs one of these by name runs after its framework's import (torchaudio
# declares no torch, yet `import torchaudio` imports it first).
_FRAMEWORK_LIBRARIES = {
    "libc10.so": "torch",
    "libtorch.so": "torch",
    "libtorch_cpu.so": "torch",
    "libtorch_python.so": "torch",
    "libtensorflow_framework.so.2": "tensorflow",
    "libtensorflow_cc.so.2": "tensorflow",
}


def _needed_frameworks(target: Path, members: list[str]) -> set[str]:
    """The frameworks whose libraries the installed ``members`` need, as ``readelf -d`` says."""
    found: set[str] = set()
    for member in members:
        dynamic = subprocess.run(
            ["readelf", "-d", str(target / member)], capture_output=True, text=True, check=False
        ).stdout
        for name, framework in _FRAMEWORK_LIBRARIES.items():
            if f"Shared library: [{name}]" in dynamic:
                found.add(framework)
    return found


def load_for_real(wheels: list[Path], target: Path) -> dict[str, dict[str, str | None]]:
    """Install each wheel with pip (no dependencies) into ``target`` and load each of its
    libraries with ctypes in a fresh Python that first imported the frameworks the wheel
    declares or its libraries need (one process per set of frameworks): wheel name ->
    library in the wheel -> None when it loaded, else the loader's message."""
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--disable-pip-version-check",
            "--target",
            str(target),
            *map(str, wheels),
        ]
    )
    groups: dict[tuple[str, ...], list[tuple[str, str]]] = {}
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as z:
            names = z.namelist()
            metadata = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        declared = {
            canonicalize_name(Requirement(line.split(":", 1)[1]).name)
            for line in metadata.splitlines()
            if line.startswith("Requires-Dist:") and "extra ==" not in line
        }
        frameworks = {"torch", "tensorflow"} & {d.split("-")[0] for d in declared}
        frameworks |= _needed_frameworks(target, [n for n in names if ".so" in n])
        for name in names:
            if name.endswith(".so") or ".so." in name:
                groups.setdefault(tuple(sorted(frameworks)), []).append((wheel.name, name))
    results: dict[str, dict[str, str | None]] = {w.name: {} for w in wheels}
    for frameworks, members in groups.items():
        libraries = [str(target / member) for _, member in members]
        done = subprocess.run(
            [sys.executable, "-c", _LOAD, json.dumps([list(frameworks), libraries])],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        loaded = json.loads(done.stdout.strip().splitlines()[-1])
        for (wheel_name, member), library in zip(members, libraries, strict=True):
            results[wheel_name][member] = loaded[library]
    return results


def compare(prediction: dict[str, Any], real: dict[str, str | None]) -> None:
    """Every library predicted to fail fails for real and the reverse; the symbol, version
    or library the loader names is named in the prediction."""
    problems: dict[str, list[dict[str, str]]] = {}
    for problem in prediction["problems"]:
        problems.setdefault(problem["library"], []).append(problem)
    assert sorted(m for m, error in real.items() if error) == sorted(m for m in problems if m), (
        prediction,
        real,
    )
    for member, error in real.items():
        if error is None:
            continue
        details = " ".join(p["detail"] for p in problems[member])
        if "undefined symbol: " in error:
            assert error.rsplit("undefined symbol: ", 1)[1].split(",")[0].strip() in details
        elif "version `" in error:
            assert error.split("version `", 1)[1].split("'")[0] in details
        elif "cannot open shared object file" in error:
            assert error.split(":", 1)[0] in details


@pytest.fixture(scope="session")
def case_outcomes(
    case_wheels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, Any], dict[str, dict[str, str | None]]]:
    """The prediction (one env-check of every case wheel) and the real loads."""
    wheels = list(case_wheels.values())
    _, document = predict(wheels)
    real = load_for_real(wheels, tmp_path_factory.mktemp("env-cases-installed"))
    return {Path(f["file"]).name: f for f in document["files"]}, real


# --- first-party plugins, built in this session ------------------------------------------

FIRST_PARTY = ["zero_out_c", "atan"]


@pytest.fixture(scope="session")
def first_party_wheels(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The wheels of FIRST_PARTY, each built by pip from a clean copy of its source."""
    work = tmp_path_factory.mktemp("first-party")
    for name in FIRST_PARTY:
        shutil.copytree(
            REPO / "plugins" / name,
            work / name,
            ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"),
        )
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "-w",
            str(work / "dist"),
            *(str(work / n) for n in FIRST_PARTY),
        ]
    )
    return sorted((work / "dist").glob("*.whl"))


# --- third-party op libraries from PyPI, downloaded once ---------------------------------

#: requirement -> (the framework it runs with, the file name's start in the cache). Built for
#: other framework releases than the ones the tests install: tensorflow-text 2.18.1 for
#: TensorFlow 2.18 (with another, most of its op libraries miss symbols, a few load);
#: torchvision 0.28.0 and torchaudio 2.11.0 are CUDA builds (libc10_cuda.so is nowhere
#: with a CPU torch).
PYPI = {
    "tensorflow-text==2.18.1": ("tensorflow", "tensorflow_text-2.18.1-cp311-"),
    "torchvision==0.28.0": ("torch", "torchvision-0.28.0-cp311-"),
    "torchaudio==2.11.0": ("torch", "torchaudio-2.11.0-cp311-"),
}


@pytest.fixture(scope="session", params=sorted(PYPI))
def pypi_wheel(request: pytest.FixtureRequest) -> Path:
    """A PYPI wheel for this Python, from the cache or downloaded into it by pip; a skip
    when its framework is not installed or it cannot be had (offline)."""
    requirement = request.param
    framework, start = PYPI[requirement]
    if {"torch": TORCH, "tensorflow": TENSORFLOW}[framework] is None:
        pytest.skip(f"{framework} not installed")
    found = sorted(CACHE.glob(f"{start}*.whl"))
    if not found:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary",
                ":all:",
                "--disable-pip-version-check",
                "-d",
                str(CACHE),
                requirement,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        found = sorted(CACHE.glob(f"{start}*.whl"))
        if done.returncode != 0 or not found:
            reason = done.stderr.strip()[-300:]
            pytest.skip(f"cannot download {requirement} (offline?): {reason}")
    return found[0]
