"""A PEP 517 build backend for opmarket plugins: setuptools' own, plus the manifest.

A plugin's ``pyproject.toml`` names it instead of ``setuptools.build_meta``::

    [build-system]
    requires = ["setuptools>=70.1", "opmarket"]
    build-backend = "opmarket.build_meta"

Every hook is setuptools.build_meta's. After setuptools has built the wheel, the backend
imports the plugin *from that wheel* (unpacked in a temporary folder, first on ``sys.path``,
in a fresh Python process, so what is imported is what a user installs: the compiled
extension, the C-ABI library) and writes ``opmarket.opset.json``, the op-set its
``register`` hook registers, into the wheel beside the entry point module, rewriting RECORD.
A manifest the project already ships (package data) is replaced; the kernels it lists for
devices the build machine registered none for (a CUDA kernel built without a GPU) are kept.
A wheel without an ``opmarket`` entry point is left as setuptools built it.

An editable install (``pip install -e``) gets its manifest written where the editable
wheel's import hook finds the package: the source folder.

Importing this module imports nothing but the standard library; setuptools is imported
when a hook runs.
"""

from __future__ import annotations

import base64
import configparser
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path, PurePosixPath
from typing import Any

__all__ = [
    "ManifestBuildError",
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
    "write_manifest",
]

_MANIFEST = "opmarket.opset.json"  # opmarket.registry._manifest.MANIFEST, not imported here

# Run in a fresh interpreter: put the unpacked wheel first on sys.path (through site, so an
# editable wheel's .pth import hooks run), then write to a file (the plugin may print) the
# manifest and where the package it belongs in lies. argv: folder, entry point value,
# previous manifest's path or "", output file.
_CHILD = """\
import importlib.util, json, sys, site
folder, value, previous, output = sys.argv[1:5]
before = list(sys.path)
site.addsitedir(folder)
sys.path[:] = [p for p in sys.path if p not in before] + before
from opmarket.registry._manifest import manifest_locations, manifest_text
text = manifest_text(value, open(previous, encoding="utf-8").read() if previous else None)
spec = importlib.util.find_spec(manifest_locations(value)[-1].parts[0])
where = list(spec.submodule_search_locations or []) if spec else []
with open(output, "w", encoding="utf-8") as f:
    json.dump({"text": text, "where": where[0] if where else ""}, f)
"""


class ManifestBuildError(RuntimeError):
    """Making the manifest of a built wheel failed; the message says where and why.

    Not an OpmarketError: opmarket.sdk imports numpy, which the backend's process, run for
    every hook (even get_requires_for_build_wheel), should not pay for."""


def _setuptools() -> Any:
    import importlib  # lazy: importing the backend stays light

    return importlib.import_module("setuptools.build_meta")


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    """setuptools' answer: what building a wheel needs beyond ``build-system.requires``."""
    return list(_setuptools().get_requires_for_build_wheel(config_settings))


def get_requires_for_build_sdist(config_settings: dict[str, Any] | None = None) -> list[str]:
    """setuptools' answer: what building an sdist needs beyond ``build-system.requires``."""
    return list(_setuptools().get_requires_for_build_sdist(config_settings))


def get_requires_for_build_editable(config_settings: dict[str, Any] | None = None) -> list[str]:
    """setuptools' answer: what an editable build needs beyond ``build-system.requires``."""
    return list(_setuptools().get_requires_for_build_editable(config_settings))


def prepare_metadata_for_build_wheel(
    metadata_directory: str, config_settings: dict[str, Any] | None = None
) -> str:
    """setuptools' ``.dist-info`` folder (the manifest is package data, not metadata)."""
    return str(_setuptools().prepare_metadata_for_build_wheel(metadata_directory, config_settings))


def prepare_metadata_for_build_editable(
    metadata_directory: str, config_settings: dict[str, Any] | None = None
) -> str:
    """setuptools' ``.dist-info`` folder for an editable build."""
    return str(
        _setuptools().prepare_metadata_for_build_editable(metadata_directory, config_settings)
    )


def build_sdist(sdist_directory: str, config_settings: dict[str, Any] | None = None) -> str:
    """setuptools' sdist: sources only; the manifest is made when a wheel is built."""
    return str(_setuptools().build_sdist(sdist_directory, config_settings))


def build_wheel(
    wheel_directory: str,
    config_settings: dict[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    """setuptools' wheel, with the plugin's manifest written into it."""
    name = str(_setuptools().build_wheel(wheel_directory, config_settings, metadata_directory))
    write_manifest(Path(wheel_directory, name))
    return name


def build_editable(
    wheel_directory: str,
    config_settings: dict[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    """setuptools' editable wheel; the manifest goes where its import hook finds the
    package (the source folder), since the wheel itself holds no package."""
    name = str(_setuptools().build_editable(wheel_directory, config_settings, metadata_directory))
    write_manifest(Path(wheel_directory, name), editable=True)
    return name


# --- the manifest -------------------------------------------------------------------------


def _say(message: str) -> None:
    print(f"opmarket.build_meta: {message}", file=sys.stderr, flush=True)


def _entry_points(zf: zipfile.ZipFile) -> list[str]:
    """The values of the wheel's ``opmarket`` entry points."""
    names = [n for n in zf.namelist() if n.endswith(".dist-info/entry_points.txt")]
    if len(names) != 1:
        return []
    parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(zf.read(names[0]).decode("utf-8"))
    if not parser.has_section("opmarket"):
        return []
    return [value.strip() for _, value in parser.items("opmarket")]


def _target(zf: zipfile.ZipFile, value: str) -> str:
    """The archive path of the entry point's manifest: in the entry point module's folder
    when that module is a package, else in its package's folder."""
    parts = value.partition(":")[0].strip().split(".")
    names = set(zf.namelist())
    if f"{'/'.join(parts)}/__init__.py" in names or len(parts) == 1:
        return str(PurePosixPath(*parts, _MANIFEST))
    return str(PurePosixPath(*parts[:-1], _MANIFEST))


def _record_row(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _rewrite(wheel: Path, member: str, data: bytes) -> None:
    """Put ``data`` into the wheel as ``member`` (replacing one there) and write RECORD anew:
    every other entry keeps its bytes, date and permissions; the new one takes the date of
    the dist-info's METADATA, so rebuilding stays reproducible."""
    tmp = wheel.with_name(wheel.name + ".part")
    with zipfile.ZipFile(wheel) as src:
        infos = src.infolist()
        (record,) = [i for i in infos if i.filename.endswith(".dist-info/RECORD")]
        info_dir = record.filename.rsplit("/", 1)[0]
        metadata = src.getinfo(f"{info_dir}/METADATA")
        made = zipfile.ZipInfo(member, date_time=metadata.date_time)
        made.external_attr = 0o644 << 16
        made.compress_type = zipfile.ZIP_DEFLATED
        new: zipfile.ZipInfo | None = made
        entries: list[tuple[zipfile.ZipInfo, bytes]] = []
        for info in infos:
            if info.filename in (member, record.filename):
                continue
            if new is not None and info.filename.startswith(info_dir + "/"):
                entries.append((new, data))  # before the dist-info, as wheels order it
                new = None
            entries.append((info, src.read(info)))
        if new is not None:
            entries.append((new, data))
    rows = [_record_row(i.filename, d) for i, d in entries if not i.is_dir()]
    rows.append(f"{record.filename},,")
    try:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as out:
            for info, content in entries:
                out.writestr(info, content)
            out.writestr(record, ("\n".join(rows) + "\n").encode())
        os.replace(tmp, wheel)
    finally:
        tmp.unlink(missing_ok=True)


def _run_child(folder: Path, value: str, previous: Path | None) -> tuple[str, str]:
    output = folder.parent / "manifest.json"
    # Only the plugin being built; PYTHONPATH stays: pip's build environment lives in it.
    env = dict(os.environ, OPMARKET_DISABLE_PLUGINS="1")
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(folder), value, str(previous or ""), str(output)],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-25:])
        raise ManifestBuildError(
            f"opmarket.build_meta: importing the plugin {value!r} from the built wheel to "
            f"make its {_MANIFEST} failed (exit {done.returncode}):\n{tail}"
        )
    found = json.loads(output.read_text(encoding="utf-8"))
    return str(found["text"]), str(found["where"])


def write_manifest(wheel: str | os.PathLike[str], *, editable: bool = False) -> list[str]:
    """Write the manifest of each ``opmarket`` entry point of ``wheel`` into it (or, for an
    ``editable`` wheel, into the package folder it points at), importing the plugin from
    the wheel in a fresh Python process; the paths written. A wheel without such an entry
    point is left alone."""
    path = Path(wheel)
    with zipfile.ZipFile(path) as zf:
        values = _entry_points(zf)
        if not values:
            _say(f"{path.name} has no opmarket entry point: no manifest written")
            return []
        targets = {value: _target(zf, value) for value in values}
        with tempfile.TemporaryDirectory(prefix="opmarket-manifest-") as tmp:
            folder = Path(tmp, "wheel")
            zf.extractall(folder)
            for member in zf.infolist():  # zipfile drops the modes: keep .so files loadable
                mode = (member.external_attr >> 16) & 0o777
                if mode and not member.is_dir():
                    os.chmod(folder / member.filename, mode)
            written: list[str] = []
            for value in values:
                previous = folder / targets[value]
                text, where = _run_child(folder, value, previous if previous.is_file() else None)
                if editable:
                    if not where:
                        raise ManifestBuildError(
                            f"opmarket.build_meta: the editable wheel {path.name} does not "
                            f"make the package of {value!r} importable"
                        )
                    dest = Path(where, *PurePosixPath(targets[value]).parts[1:])
                    dest.write_text(text, encoding="utf-8")
                    written.append(str(dest))
                    _say(f"wrote {dest} ({value}) for the editable install")
                else:
                    _rewrite(path, targets[value], text.encode("utf-8"))
                    written.append(targets[value])
                    _say(f"wrote {targets[value]} ({value}) into {path.name}")
    return written
