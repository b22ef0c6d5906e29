"""Plugin releases for the compat tests: wheels built by hand, installed dists, an index."""

from __future__ import annotations

import functools
import hashlib
import http.server
import threading
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from opmarket.sdk import DType, KernelDef, OpSet, op, opset_to_json

MakeOpSet = Callable[..., OpSet]


def zero_out(
    version: str = "1.0.0",
    *,
    extra_attr: str | None = None,
    kernel_types: tuple[DType, ...] = (DType.INT32, DType.FLOAT),
) -> OpSet:
    """The tutorial's ZeroOut as one release of plugin ``opm-zero``."""
    b = op("Opm>ZeroOut").input("to_zero: T").output("zeroed: T").attr("T: {float, int32}")
    if extra_attr:
        b.attr(extra_attr)
    kernels = [KernelDef("Opm>ZeroOut", "CPU", (("T", kernel_types),))]
    return OpSet.of([b.build()], kernels, name="opm-zero", version=version)


def _files(opset: OpSet) -> dict[str, str]:
    dist = f"opm_zero-{opset.version}.dist-info"
    files = {
        "opm_zero/__init__.py": "",
        "opm_zero/plugin.py": "raise RuntimeError('plugins are never imported by compat')\n",
        "opm_zero/opmarket.opset.json": opset_to_json(opset),
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: opm-zero\nVersion: {opset.version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
        f"{dist}/entry_points.txt": "[opmarket]\nzero_out = opm_zero.plugin\n",
    }
    files[f"{dist}/RECORD"] = "".join(f"{name},,\n" for name in files) + f"{dist}/RECORD,,\n"
    return files


def write_wheel(folder: Path, opset: OpSet) -> Path:
    path = folder / f"opm_zero-{opset.version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in _files(opset).items():
            zf.writestr(name, text)
    return path


def install_tree(folder: Path, opset: OpSet) -> Path:
    """Lay out the wheel's files as an installed distribution in ``folder``."""
    for name, text in _files(opset).items():
        target = folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return folder


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[OpSet], Path]:
    """Install a release of opm-zero on sys.path for the test."""

    def install(opset: OpSet) -> Path:
        site = install_tree(tmp_path / "site", opset)
        monkeypatch.syspath_prepend(str(site))
        return site

    return install


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def index(tmp_path: Path) -> Iterator[Callable[[OpSet, bool], str]]:
    """A PEP 503 simple index serving opm-zero wheels; returns its URL."""
    root = tmp_path / "index"
    (root / "files").mkdir(parents=True)
    links: list[str] = []
    handler = functools.partial(_Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()

    def publish(opset: OpSet, good_hash: bool = True) -> str:
        wheel = write_wheel(root / "files", opset)
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest() if good_hash else "0" * 64
        links.append(f'<a href="../../files/{wheel.name}#sha256={digest}">{wheel.name}</a>')
        page = root / "simple" / "opm-zero" / "index.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text("<html><body>" + "\n".join(links) + "</body></html>", encoding="utf-8")
        return f"http://127.0.0.1:{server.server_address[1]}/simple/"

    yield publish
    server.shutdown()
    server.server_close()


@pytest.fixture
def release() -> Callable[..., OpSet]:
    """Make a release of opm-zero: ``release("1.1.0", extra_attr=..., kernel_types=...)``."""
    return zero_out


@pytest.fixture
def wheel(tmp_path: Path) -> Callable[[OpSet], Path]:
    """Write a release as a wheel file in a temporary folder."""
    folder = tmp_path / "dist"
    folder.mkdir(exist_ok=True)
    return functools.partial(write_wheel, folder)
