"""``opmarket new``: names, refusals, and each kernel kind's project built, tested with its
own generated tests, and validated as the index would, as generated."""

from __future__ import annotations

import json
import os
import py_compile
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from opmarket._scaffold._new import KERNELS, generate, project_for
from opmarket.cli._usage import UsageError

BIN = Path(sys.executable).parent


def opmarket(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "opmarket"), *args], cwd=cwd, capture_output=True, text=True, check=False
    )


@pytest.mark.parametrize(
    ("name", "op_name", "snake", "package"),
    [
        ("acme-clip", "Acme>Clip", "clip", "acme_clip"),
        ("clip", "Clip", "clip", "clip"),
        ("acme-soft-clip", "AcmeSoft>Clip", "clip", "acme_soft_clip"),
        # Names are normalized as pip does: '-', '_' and '.' are one separator.
        ("Acme.Vision_Clip", "AcmeVision>Clip", "clip", "acme_vision_clip"),
    ],
)
def test_the_op_is_named_after_the_names_last_part(
    name: str, op_name: str, snake: str, package: str
) -> None:
    p = project_for(name)
    assert (p.op_name, p.snake, p.package) == (op_name, snake, package)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("acme clip", "'acme clip' is not a project name"),
        ("-clip", "'-clip' is not a project name"),
        ("acme-2d", "its last part names the op ('2d'), and an op name starts with a letter"),
        # Names whose generated code would not parse: opmarket.ops.for(...), import class.
        ("acme-for", "opmarket.ops.for(...), and 'for' is a Python keyword"),
        ("acme.Class", "opmarket.ops.class(...), and 'class' is a Python keyword"),
        ("class", "the import package would be 'class', a Python keyword"),
    ],
)
def test_a_name_that_cannot_be_a_project_is_refused(name: str, message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        project_for(name)


def test_the_command_writes_the_project_and_refuses_a_folder_in_use(tmp_path: Path) -> None:
    done = opmarket("new", "acme-clip", "--kernel", "cpp", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(
        f"created {tmp_path / 'acme-clip'}: plugin acme-clip, op Acme>Clip"
    )
    made = sorted(
        str(p.relative_to(tmp_path / "acme-clip"))
        for p in (tmp_path / "acme-clip").rglob("*")
        if p.is_file()
    )
    assert made == [
        ".github/workflows/ci.yml",
        ".gitignore",
        "README.md",
        "pyproject.toml",
        "setup.py",
        "src/acme_clip/__init__.py",
        "src/acme_clip/_clip.pyi",
        "src/acme_clip/clip.cc",
        "src/acme_clip/opmarket.opset.json",
        "src/acme_clip/py.typed",
        "tests/test_clip.py",
    ]
    again = opmarket("new", "acme-clip", "-o", str(tmp_path / "acme-clip"))
    assert again.returncode == 2
    assert (
        again.stderr == f"opmarket: error: -o: '{tmp_path / 'acme-clip'}' exists and is not empty\n"
    )
    # Nothing is left behind in the parent by the refused run or the finished one.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["acme-clip"]


def test_a_name_too_long_for_a_file_name_is_a_usage_error(tmp_path: Path) -> None:
    # A valid project name of 300 characters: its folder, package and wheel are named after
    # it, and no file system takes a name over 255 bytes.
    done = opmarket("new", "acme-" + "x" * 295, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("opmarket: error: NAME: 'acme-xxx")
    assert "is 300 characters long; at most 100" in done.stderr
    assert done.stderr.count("\n") == 1
    # A folder the file system cannot name (-o): a usage error too, and nothing is made.
    done = opmarket("new", "acme-clip", "-o", str(tmp_path / ("y" * 300)))
    assert done.returncode == 2
    assert done.stderr.startswith(f"opmarket: error: -o: '{tmp_path}/yyy")
    assert "cannot write the project: File name too long" in done.stderr
    assert done.stderr.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_a_folder_name_of_255_bytes_is_made(tmp_path: Path) -> None:
    # The longest name a file system takes: the temporary folder beside it must be no longer.
    target = tmp_path / ("y" * 255)
    done = opmarket("new", "acme-clip", "-o", str(target))
    assert done.returncode == 0, done.stderr
    assert (target / "pyproject.toml").is_file()
    assert [p.name for p in tmp_path.iterdir()] == [target.name]


@pytest.mark.parametrize("kernel", KERNELS)
def test_every_template_renders_to_valid_files(tmp_path: Path, kernel: str) -> None:
    root = generate("acme-clip", kernel, tmp_path / kernel)
    for path in root.rglob("*"):
        if path.is_file():
            assert "%{" not in path.read_text(), path
            if path.suffix == ".py":
                py_compile.compile(str(path), cfile=str(tmp_path / "check.pyc"), doraise=True)
    manifest = json.loads((root / "src/acme_clip/opmarket.opset.json").read_text())
    assert [o["name"] for o in manifest["ops"]] == ["Acme>Clip"]
    ci = (root / ".github/workflows/ci.yml").read_text()
    # Lint- and format-clean under the project's own ruff settings.
    for check in (["check", "--no-cache", "."], ["format", "--check", "--no-cache", "."]):
        done = subprocess.run(
            [str(BIN / "ruff"), *check], cwd=root, capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stdout + done.stderr
    build = "python -m build" if kernel == "python" else "pypa/cibuildwheel"
    for step in (build, "opmarket validate", "compat-check", "twine upload"):
        assert step in ci


# --- each kind built, tested and validated (one build per kind and session) --------------


@dataclass(frozen=True)
class Built:
    project: Path
    wheel: Path
    site: Path  # the wheel installed here (--target), to put on PYTHONPATH


def build(tmp: Path, kernel: str, env: dict[str, str] | None = None) -> Built:
    project = generate("acme-clip", kernel, tmp / "acme-clip")
    dist = tmp / "dist"
    # As the index wants it: `opmarket build` (manylinux for native code), without isolation
    # here (no index to fetch the build requirements from; tests/test_build.py builds isolated).
    done = subprocess.run(
        [str(BIN / "opmarket"), "build", "--no-isolation", "-o", str(dist), str(project)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = dist.glob("*.whl")
    site = tmp / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--disable-pip-version-check",
            "-q",
            "--target",
            str(site),
            str(wheel),
        ],
        capture_output=True,
        check=True,
    )
    return Built(project, wheel, site)


@pytest.fixture(scope="session", params=["python", "cpp", "c"])
def built(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Built:
    kernel = str(request.param)
    return build(tmp_path_factory.mktemp(f"new-{kernel}"), kernel)


@pytest.mark.slow
def test_the_generated_tests_pass(built: Built) -> None:
    env = {**os.environ, "PYTHONPATH": str(built.site)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=built.project,
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "3 passed" in done.stdout


@pytest.mark.slow
def test_the_wheel_validates_and_its_manifest_is_what_the_code_registers(built: Built) -> None:
    done = opmarket("validate", str(built.wheel))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[passed] manifest" in done.stdout and "[passed] conformance" in done.stdout
    # The manifest written at generation time is byte for byte what the code registers.
    entry = (
        "acme_clip:libacme_clip.so" if "-py3-none-manylinux" in built.wheel.name else "acme_clip"
    )
    out = built.project.parent / "from-code.json"
    subprocess.run(
        [sys.executable, "-m", "opmarket.registry._manifest", entry, str(out)],
        env={**os.environ, "PYTHONPATH": str(built.site)},
        capture_output=True,
        check=True,
    )
    assert out.read_text() == (built.project / "src/acme_clip/opmarket.opset.json").read_text()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
def test_the_cuda_project_compiles_its_gpu_library(tmp_path: Path) -> None:
    # Compile only (this machine may have no GPU); one architecture keeps it short.
    made = build(tmp_path, "cuda", {"ACME_CLIP_CUDA": "1", "ACME_CLIP_CUDA_ARCHS": "80"})
    names = zipfile.ZipFile(made.wheel).namelist()
    assert "acme_clip/libacme_clip_gpu.so" in names
    assert any(n.startswith("acme_clip/_clip.") and n.endswith(".so") for n in names)
