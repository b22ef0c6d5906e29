"""Small real plugin packages for the web tests: a pyproject, a module with an ``opmarket``
entry point and its ``opmarket.opset.json``, built into a wheel with ``opmarket build``
(setuptools' own backend: the tests choose what the manifest says, stale ones included)."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

from opmarket.registry import new_registry
from opmarket.sdk import opset_to_json

OPMARKET = str(Path(sys.executable).with_name("opmarket"))

_MODULE = '''\
"""A test plugin: {op} scales its input by {factor}."""

import numpy as np
from opmarket.sdk import hookimpl, input_generator, kernel, op, reference

OP = (op("{op}").input("x: T").output("y: T").attr("T: {{{types}}}")
      .doc("Multiplies x by {factor}.").build())


@kernel("{op}", constraints={{"T": {type_list}}})
def scale(x):
    return x * {kernel_factor}


@reference("{op}")
def scale_reference(x):
    return x * {factor}


@input_generator("{op}")
def scale_inputs(rng, types):
    dtype = types["T"].numpy
    return [rng.integers(-10, 10, size=(3, 4)).astype(dtype)], {{}}


@hookimpl
def register(register):
    register(OP, scale, scale_reference, scale_inputs)
'''

_PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "{version}"
description = "A test plugin for opmarket's marketplace"
requires-python = ">=3.11"
dependencies = {dependencies}

[project.entry-points.opmarket]
{package} = "{package}"

[tool.setuptools]
packages = ["{package}"]

[tool.setuptools.package-data]
{package} = ["opmarket.opset.json"]
"""


def plugin_source(
    op_name: str,
    factor: int,
    kernel_factor: int | None = None,
    types: tuple[str, ...] = ("float", "int32"),
) -> str:
    return _MODULE.format(
        op=op_name,
        factor=factor,
        types=", ".join(types),
        type_list=list(types),
        kernel_factor=factor if kernel_factor is None else kernel_factor,
    )


def manifest_for(module_file: Path, dist: str, version: str) -> str:
    """The canonical op-set the module registers: what its manifest must say."""
    spec = importlib.util.spec_from_file_location(f"_manifest_{dist}", module_file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    items: list[Any] = []
    module.register(register=lambda *a: items.extend(a))
    reg = new_registry()
    reg.register(*items, source="manifest")
    return opset_to_json(reg.snapshot(name=dist, version=version, source="manifest"))


def build_plugin(
    workdir: Path,
    dist: str,
    version: str,
    *,
    op_name: str,
    factor: int = 2,
    kernel_factor: int | None = None,
    source: str | None = None,
    types: tuple[str, ...] = ("float", "int32"),
    manifest_source: str | None = None,
    dependencies: tuple[str, ...] = ("opmarket",),
) -> Path:
    """Write the package under ``workdir`` and build its wheel; the wheel's path. The
    manifest is what ``manifest_source`` (default: the module itself) registers."""
    package = dist.replace("-", "_")
    root = workdir / f"{dist}-{version}"
    (root / package).mkdir(parents=True)
    (root / "pyproject.toml").write_text(
        _PYPROJECT.format(
            dist=dist, version=version, package=package, dependencies=json.dumps(dependencies)
        )
    )
    module = root / package / "__init__.py"
    plain = plugin_source(op_name, factor, kernel_factor, types)
    module.write_text(manifest_source or source or plain)
    (root / package / "opmarket.opset.json").write_text(manifest_for(module, dist, version))
    module.write_text(source or plain)
    out = workdir / "dist"
    # As an author builds for the index (offline: this environment's setuptools).
    done = subprocess.run(
        [OPMARKET, "build", "--no-isolation", "-o", str(out), str(root)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = out.glob(f"{package}-{version}-*.whl")
    assert done.stdout.split() == [str(wheel)]
    return wheel


def record_line(name: str, data: bytes) -> str:
    """The RECORD row of an archive member: path, sha256 (urlsafe base64), size."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}\n"


def _member(name: str) -> zipfile.ZipInfo:
    """A member with a fixed time stamp, so that the same arguments make the same bytes
    whichever second it is (re-uploading "the same wheel" must send the same file)."""
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.external_attr = 0o644 << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def handmade_wheel(
    path: Path,
    dist: str,
    version: str,
    extra: dict[str, bytes],
    *,
    symlink: str = "",
    metadata: str = "",
    record: str | None = None,
    filename: str = "",
) -> Path:
    """A wheel written with zipfile, for archives no build tool would make (bombs,
    traversal, links): valid dist-info plus ``extra`` members, with a RECORD that lists
    them all (or ``record`` as given) and the file name ``filename`` when given."""
    package = dist.replace("-", "_")
    wheel = path / (filename or f"{package}-{version}-py3-none-any.whl")
    info = f"{package}-{version}.dist-info"
    members: dict[str, bytes] = {f"{package}/__init__.py": b"", **extra}
    members[f"{info}/METADATA"] = (
        metadata or f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
    ).encode()
    members[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    lines = "".join(record_line(name, data) for name, data in members.items())
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(_member(name), data)
        if symlink:
            link = _member(f"{package}/link")
            link.external_attr = 0o120777 << 16
            zf.writestr(link, symlink)
            lines += record_line(link.filename, symlink.encode())
        zf.writestr(
            _member(f"{info}/RECORD"), lines + f"{info}/RECORD,,\n" if record is None else record
        )
    return wheel
