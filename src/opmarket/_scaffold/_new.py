"""``opmarket new``: a plugin project outside this repository, ready to build, test and
validate as generated (docs/authoring.md). The files come from the ``*.tmpl`` templates
beside this module, with ``%{name}`` placeholders."""

from __future__ import annotations

import json
import keyword
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import click

from opmarket.cli._usage import UsageError

__all__ = ["BUILD_BACKEND", "KERNELS", "ProjectNames", "generate", "new", "project_for"]

#: The build backend generated projects use: setuptools, plus the manifest written into the
#: wheel from what the built plugin registers.
BUILD_BACKEND = "opmarket.build_meta"

#: The kernel kinds ``--kernel`` offers.
KERNELS = ("python", "cpp", "c", "cuda")

# The op every project starts with: Clip, written once here, rendered into Python, C++ and
# the manifest alike.
_INPUTS = ("x: T",)
_OUTPUTS = ("y: T",)
_ATTRS = ("T: {float, double} = DT_FLOAT", "clip_min: float = 0.0", "clip_max: float = 6.0")
_DOC = (
    "Clips x to [clip_min, clip_max], element-wise.\n\n"
    "x: the input, any shape.\ny: x clipped, the shape of x.\n"
    "clip_min: the lower bound.\nclip_max: the upper bound, at least clip_min."
)
# How CI builds the wheels: cibuildwheel for compiled code (manylinux, one job per Python),
# a plain build for a pure-Python wheel (cibuildwheel refuses those).
_CIBUILDWHEEL = """\
      - name: Build the wheels (manylinux, cibuildwheel)
        uses: pypa/cibuildwheel@v2.23
        env:
          CIBW_BUILD: "%{cibw_build}"
          CIBW_SKIP: "*-musllinux_*"
          CIBW_ARCHS_LINUX: x86_64
          # The build resolves opmarket (the header, the manifest) from our index too.
          CIBW_ENVIRONMENT: PIP_EXTRA_INDEX_URL=${{ vars.OPMARKET_INDEX }}/simple/
          CIBW_TEST_REQUIRES: pytest
          CIBW_TEST_COMMAND: pytest {project}/tests -q
        with:
          output-dir: wheelhouse
"""
_PURE_BUILD = """\
      - name: Build the wheel (pure Python, one for every platform)
        run: |
          pip install build opmarket pytest --extra-index-url "${{ vars.OPMARKET_INDEX }}/simple/"
          python -m build --wheel --outdir wheelhouse
          pip install wheelhouse/*.whl && pytest -q
        env:
          PIP_EXTRA_INDEX_URL: ${{ vars.OPMARKET_INDEX }}/simple/
"""
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]*(?:[-_.][A-Za-z0-9]+)*$")
# The project's folder, package and files are named after NAME, and so are its wheels
# (NAME-VERSION-TAGS.whl, the tags alone up to about 80 characters): with NAME at most this
# long, every one fits the 255 bytes a file name may have.
MAX_NAME = 100
_PLACEHOLDER = re.compile(r"%\{(\w+)\}")


@dataclass(frozen=True, slots=True)
class ProjectNames:
    """The names a project is generated with, all derived from NAME (``acme-clip``)."""

    dist: str  # acme-clip
    package: str  # acme_clip: the import package and the entry point's name
    op_short: str  # Clip
    op_name: str  # Acme>Clip (the parts before the last one are the namespace)
    snake: str  # clip: opmarket.ops.clip
    kernel: str


def _camel(part: str) -> str:
    return "".join(w[:1].upper() + w[1:] for w in re.split(r"[_.]", part) if w)


def project_for(name: str, kernel: str = "python") -> ProjectNames:
    """The project NAME makes; UsageError quoting NAME when it cannot be one."""
    from opmarket.sdk import is_valid_op_name, snake_case

    if not _NAME.match(name):
        raise UsageError(
            f"NAME: {name!r} is not a project name: letters, digits and single '-', '_' or "
            "'.' between them, starting with a letter (e.g. acme-clip)"
        )
    if len(name) > MAX_NAME:
        raise UsageError(
            f"NAME: {name[:20]!r}... is {len(name)} characters long; at most {MAX_NAME}: the "
            "project's folder, package and wheels are named after it"
        )
    if kernel not in KERNELS:
        raise UsageError(f"--kernel: {kernel!r}; choose one of {', '.join(KERNELS)}")
    dist = re.sub(r"[-_.]+", "-", name).lower()
    parts = dist.split("-")
    op_short = _camel(parts[-1])
    namespace = "".join(_camel(p) for p in parts[:-1])
    op_name = f"{namespace}>{op_short}" if namespace else op_short
    if not op_short[:1].isalpha() or not is_valid_op_name(op_name):
        raise UsageError(
            f"NAME: {name!r}: its last part names the op ({op_short!r}), and an op name "
            "starts with a letter"
        )
    package, snake = dist.replace("-", "_"), snake_case(op_short)
    if keyword.iskeyword(package):
        raise UsageError(
            f"NAME: {name!r}: the import package would be {package!r}, a Python keyword "
            f"(`import {package}` does not parse); add a part, e.g. acme-{dist}"
        )
    if keyword.iskeyword(snake):
        raise UsageError(
            f"NAME: {name!r}: the op would be called as opmarket.ops.{snake}(...), and "
            f"{snake!r} is a Python keyword; choose another last part"
        )
    return ProjectNames(dist, package, op_short, op_name, snake, kernel)


def _template(name: str) -> str:
    return resources.files("opmarket._scaffold").joinpath(name).read_text(encoding="utf-8")


def _render(name: str, values: dict[str, str]) -> str:
    def value(m: re.Match[str]) -> str:
        return values[m.group(1)]  # a KeyError here is a template bug, caught by the tests

    return _PLACEHOLDER.sub(value, _template(name))


def _sdk_imports(names: list[str]) -> str:
    classes = sorted(n for n in names if n[:1].isupper())
    functions = sorted(n for n in names if not n[:1].isupper())
    body = "".join(f"    {n},\n" for n in [*classes, *functions])
    return f"from opmarket.sdk import (\n{body})"


def _manifest(p: ProjectNames) -> str:
    """The project's opmarket.opset.json, computed from the spec it is generated with (the
    build rewrites it from the code once the opmarket.build_meta backend is used)."""
    from opmarket.sdk import DType, KernelDef, OpSet, op, opset_to_json

    builder = op(p.op_name)
    for spec in _INPUTS:
        builder = builder.input(spec)
    for spec in _OUTPUTS:
        builder = builder.output(spec)
    for spec in _ATTRS:
        builder = builder.attr(spec)
    op_def = builder.doc(_DOC).build()
    both = (("T", (DType.FLOAT, DType.DOUBLE)),)
    if p.kernel == "python":
        kernels = [KernelDef(p.op_name, "CPU", both)]
    else:
        kernels = [KernelDef(p.op_name, "CPU", (("T", (t,)),)) for t in (DType.FLOAT, DType.DOUBLE)]
    if p.kernel == "cuda":
        kernels.append(KernelDef(p.op_name, "GPU", both))
    return opset_to_json(OpSet((op_def,), tuple(kernels)))


def _files(p: ProjectNames) -> dict[str, str]:
    pkg = f"src/{p.package}"
    cstr = json.dumps  # a C string literal of ASCII text, as JSON writes it
    native = p.kernel != "python"
    v: dict[str, str] = {
        "dist": p.dist,
        "package": p.package,
        "entry": p.package,
        "op_short": p.op_short,
        "op_name": p.op_name,
        "snake": p.snake,
        "const": p.snake.upper(),
        "build_backend": BUILD_BACKEND,
        "env": f"{p.package.upper()}_CUDA",
        "std_imports": "",
        "gpu_block": "",
        "gpu_register": "",
        "cuda_doc": "",
        "extra_package_data": "",
        "exclude_sources": "",
        "dev_requires": "",
        "cibw_build": "cp311-*" if p.kernel == "c" else "cp311-* cp312-* cp313-*",
        "entry_value": f"{p.package}:lib{p.package}.so" if p.kernel == "c" else p.package,
    }
    v["builder_lines"] = "\n".join(
        [f"    .input({s!r})" for s in _INPUTS]
        + [f"    .output({s!r})" for s in _OUTPUTS]
        + [f"    .attr({s!r})" for s in _ATTRS]
    ).replace("'", '"')
    doc_lines = "".join(f"        {json.dumps(line)}\n" for line in _DOC.splitlines(keepends=True))
    v["builder_lines"] += f"\n    .doc(\n{doc_lines}    )"
    v["cpp_builder_lines"] = "\n".join(
        [f"      .attr({cstr(s)})" for s in _ATTRS]
        + [f"      .input({cstr(s)})" for s in _INPUTS]
        + [f"      .output({cstr(s)})" for s in _OUTPUTS]
        + [f"      .doc({cstr(_DOC)})"]
    )
    c_lines = v["cpp_builder_lines"]
    for lower in ("attr", "input", "output", "doc"):  # the C API's builder: Attr, Input, ...
        c_lines = c_lines.replace(f".{lower}(", f".{lower.capitalize()}(")
    v["c_builder_lines"] = c_lines
    requires = ['"setuptools>=77"', '"opmarket"']  # 77: the license string (PEP 639)
    if p.kernel in ("cpp", "cuda"):
        requires.insert(1, '"pybind11>=2.12"')
        v["dev_requires"] = " pybind11 setuptools"
    elif p.kernel == "c":
        v["dev_requires"] = " setuptools"
    v["build_requires"] = ", ".join(requires)
    parts_sdk = [
        "DType",
        "GradientOp",
        "input_generator",
        "reference",
        "register_gradient",
        "shape_fn",
        "unchanged",
        "hookimpl",
    ]
    words = {
        "python": "with a numpy kernel",
        "cpp": "with a C++ kernel (pybind11)",
        "c": "with a C-ABI kernel (one wheel for every Python version)",
        "cuda": "with C++ and CUDA kernels",
    }
    v["kernel_words"] = words[p.kernel]
    rows = [f"| `{pkg}/__init__.py` | the op's Python parts and the `register` hook |"]
    files: dict[str, str] = {}
    if p.kernel == "python":
        v["sdk_imports"] = _sdk_imports([*parts_sdk, "InvalidArgumentError", "kernel", "op"])
        init = "init_python.py.tmpl"
        rows[0] = f"| `{pkg}/__init__.py` | the op: spec, kernel, shape, gradient, reference |"
    elif p.kernel == "c":
        v["sdk_imports"] = _sdk_imports(parts_sdk)
        init = "init_c.py.tmpl"
        files[f"{pkg}/{p.snake}.cc"] = _render("kernel_c.cc.tmpl", v)
        files["setup.py"] = _render("setup_c.py.tmpl", v)
        rows.append(f"| `{pkg}/{p.snake}.cc`, `setup.py` | the op and its C-ABI kernels |")
    else:
        extra = ["library_declarations"]
        if p.kernel == "cuda":
            extra += ["InvalidArgumentError", "kernel"]
            v["std_imports"] = "import ctypes\n"
            v["gpu_block"] = _render("gpu_block.py.tmpl", v)
            v["gpu_register"] = f"\n        *([{p.snake}_gpu] if _GPU is not None else []),"
            v["cuda_doc"] = f", and CUDA: ``{p.snake}_gpu.cu``"
            files[f"{pkg}/{p.snake}_gpu.cu"] = _render("kernel_gpu.cu.tmpl", v)
            files["setup.py"] = _render("setup_cuda.py.tmpl", v)
            rows.append(f"| `{pkg}/{p.snake}_gpu.cu` | the CUDA kernel (built where nvcc is) |")
        else:
            files["setup.py"] = _render("setup_cpp.py.tmpl", v)
        v["sdk_imports"] = _sdk_imports([*parts_sdk, *extra])
        init = "init_cpp.py.tmpl"
        v["extra_package_data"] = ', "*.pyi"'
        files[f"{pkg}/{p.snake}.cc"] = _render("kernel_cpp.cc.tmpl", v)
        files[f"{pkg}/_{p.snake}.pyi"] = _render("stub.pyi.tmpl", v)
        rows.append(f"| `{pkg}/{p.snake}.cc`, `setup.py` | the op's spec and C++ kernels |")
    if native:
        v["exclude_sources"] = (
            "\n[tool.setuptools.exclude-package-data]\n"
            "# The sources build the libraries; the wheel carries what they built.\n"
            f'{p.package} = ["*.cc", "*.cu", "*.h"]\n'
        )
    v["parts"] = _render("parts.py.tmpl", v)
    v["build_steps"] = (
        _CIBUILDWHEEL.replace("%{cibw_build}", v["cibw_build"]) if native else (_PURE_BUILD)
    )
    rows.append(f"| `{pkg}/opmarket.opset.json` | the manifest: the ops and kernels it registers |")
    v["layout_rows"] = "".join(r + "\n" for r in rows)
    init_text = _render(init, v)
    if p.kernel == "cuda":
        init_text = init_text.replace(
            "from collections.abc import Callable, Mapping\n",
            "from collections.abc import Callable, Mapping\nfrom pathlib import Path\n",
        )
    files[f"{pkg}/__init__.py"] = init_text
    files[f"{pkg}/py.typed"] = ""
    files[f"{pkg}/opmarket.opset.json"] = _manifest(p)
    files["pyproject.toml"] = _render("pyproject.toml.tmpl", v)
    files["README.md"] = _render("README.md.tmpl", v)
    files[f"tests/test_{p.snake}.py"] = _render("test_op.py.tmpl", v)
    files[".github/workflows/ci.yml"] = _render("ci.yml.tmpl", v)
    files[".gitignore"] = _render("gitignore.tmpl", v)
    return files


def generate(
    name: str, kernel: str = "python", directory: str | os.PathLike[str] | None = None
) -> Path:
    """Write the project NAME with a ``kernel`` kernel into ``directory`` (default
    ``./NAME``), which must not exist or be empty; the project's folder.

    The files are written to a temporary folder beside it and renamed into place: an
    interrupted run leaves nothing half made.
    """
    project = project_for(name, kernel)
    target = Path(directory if directory is not None else project.dist).absolute()
    try:
        return _write(project, target)
    except OSError as exc:  # a name too long, no permission, a full disk
        where = "-o: " if directory is not None else ""
        raise UsageError(
            f"{where}{str(target)!r}: cannot write the project: {exc.strerror or exc}"
        ) from None


def _write(project: ProjectNames, target: Path) -> Path:
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise UsageError(f"-o: {str(target)!r} exists and is not empty")
    target.parent.mkdir(parents=True, exist_ok=True)
    # A short name: a target of up to 255 bytes, the most a file system takes, still fits.
    staging = Path(tempfile.mkdtemp(prefix=".new-", dir=target.parent))
    try:
        for rel, text in _files(project).items():
            path = staging / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        if target.exists():
            target.rmdir()  # empty, checked above
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target


@click.command("new")
@click.argument("name")
@click.option(
    "--kernel",
    type=click.Choice(KERNELS),
    default="python",
    show_default=True,
    help="The kernel's language: numpy, C++ (pybind11), the C ABI, or C++ with CUDA.",
)
@click.option(
    "-o",
    "--output",
    "output",
    type=click.Path(file_okay=False),
    default=None,
    help="The project's folder (default: ./NAME); must not exist or be empty.",
)
def new(name: str, kernel: str, output: str | None) -> None:
    """Create a plugin project NAME: one op with spec, kernel, tests, CI, ready to build.

    The op is named after NAME's last part (acme-clip: op Acme>Clip, opmarket.ops.clip).
    """
    project = project_for(name, kernel)
    target = generate(name, kernel, output)
    click.echo(f"created {target}: plugin {project.dist}, op {project.op_name} ({kernel})")
    click.echo("next: see its README (build, pytest, opmarket validate)")
