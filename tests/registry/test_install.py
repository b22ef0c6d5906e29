"""opmarket install against a real index on 127.0.0.1 (a static PEP 503 folder, and the
same files as PEP 691 JSON when asked for it) with real pip: the plugin is installed, its
cuda13 companion is not (no GPU here), and what was chosen and why is printed."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import os
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from opmarket.registry._install import (
    IndexFile,
    InstallError,
    newest_wheel,
    project_files,
    wheel_extras,
)
from opmarket.registry._machine import machine_facts

OPMARKET = str(Path(sys.executable).parent / "opmarket")
METADATA = (
    "Metadata-Version: 2.1\nName: opm-gpu-demo\nVersion: {version}\nProvides-Extra: cuda13\n"
    'Requires-Dist: opm-gpu-demo-cuda13=={version}; extra == "cuda13"\n'
)


def write_wheel(folder: Path, version: str) -> Path:
    """A pure wheel of opm-gpu-demo whose cuda13 extra names its companion."""
    wheel = folder / f"opm_gpu_demo-{version}-py3-none-any.whl"
    info = f"opm_gpu_demo-{version}.dist-info"
    files = {
        "opm_gpu_demo/__init__.py": b"VERSION = %r\n" % version,
        f"{info}/METADATA": METADATA.format(version=version).encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = ""
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{name},sha256={digest},{len(data)}\n"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr(f"{info}/RECORD", record + f"{info}/RECORD,,\n")
    return wheel


class Handler(http.server.SimpleHTTPRequestHandler):
    """Static files; the project page as PEP 691 JSON when the client asks for it."""

    def do_GET(self) -> None:
        accept = self.headers.get("Accept", "")
        page = Path(self.translate_path(self.path), "index.json")
        if "application/vnd.pypi.simple.v1+json" in accept and page.is_file():
            body = page.read_bytes()
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        super().do_GET()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("index")
    files = root / "files"
    files.mkdir()
    wheels = [write_wheel(files, v) for v in ("1.0.0", "1.1.0")]
    newest = wheels[-1]
    with zipfile.ZipFile(newest) as z:  # PEP 658: the METADATA beside the newest wheel
        (files / f"{newest.name}.metadata").write_bytes(
            z.read("opm_gpu_demo-1.1.0.dist-info/METADATA")
        )
    page = root / "simple" / "opm-gpu-demo"
    page.mkdir(parents=True)
    (page / "index.html").write_text(
        "<html><body>"
        + "".join(
            f'<a href="../../files/{w.name}"'
            + (' data-core-metadata="true"' if w == newest else "")
            + f">{w.name}</a>"
            for w in wheels
        )
        + "</body></html>"
    )
    (page / "index.json").write_text(
        json.dumps(
            {
                "meta": {"api-version": "1.1"},
                "name": "opm-gpu-demo",
                "files": [
                    {
                        "filename": w.name,
                        "url": f"../../files/{w.name}",
                        "hashes": {},
                        "core-metadata": w == newest,
                        # Only the JSON page says so: which page was read shows.
                        "yanked": w != newest,
                    }
                    for w in wheels
                ],
            }
        )
    )
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), partial(Handler, directory=str(root))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_the_index_pages_and_metadata(index: str) -> None:
    files = project_files(index, "OPM_gpu.demo")  # found by its normalized name
    assert [f.filename for f in files] == [
        "opm_gpu_demo-1.0.0-py3-none-any.whl",
        "opm_gpu_demo-1.1.0-py3-none-any.whl",
    ]
    assert [(f.metadata, f.yanked) for f in files] == [(False, True), (True, False)]  # JSON
    wheel = newest_wheel(files)
    assert wheel is not None and wheel.filename.startswith("opm_gpu_demo-1.1.0")
    assert wheel_extras(wheel) == ["cuda13"]  # from the PEP 658 file
    assert wheel_extras(files[0]) == ["cuda13"]  # from the wheel itself


def run_install(index: str, target: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "OPMARKET_"))}
    # Real pip into a folder of its own; the index has no opmarket, so no dependencies.
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_TARGET=str(target), PIP_NO_DEPS="1")
    return subprocess.run(
        [OPMARKET, "install", "opm-gpu-demo", "--index-url", index, *extra],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )


@pytest.mark.slow
def test_install_installs_the_plugin_and_no_companion_without_a_gpu(
    index: str, tmp_path: Path
) -> None:
    if machine_facts().gpus:
        pytest.skip("a GPU is visible: the cuda13 companion would be chosen")
    done = run_install(index, tmp_path / "dry", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "cuda13: not installed: no GPU visible" in done.stdout
    assert "--dry-run" in done.stdout and "opm-gpu-demo==1.1.0" in done.stdout
    assert not (tmp_path / "dry").exists()

    done = run_install(index, tmp_path / "site")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(
        "opm-gpu-demo 1.1.0: opm_gpu_demo-1.1.0-py3-none-any.whl\n"
        "  cuda13: not installed: no GPU visible"
    )
    installed = sorted(p.name for p in (tmp_path / "site").iterdir())
    assert installed == ["opm_gpu_demo", "opm_gpu_demo-1.1.0.dist-info"]


def test_a_project_the_index_does_not_have(index: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [OPMARKET, "install", "opm-nothing", "--index-url", index, "--dry-run"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "opm-nothing" in done.stderr and "cannot read the project page" in done.stderr


def _files(*names: str) -> list[IndexFile]:
    return [IndexFile(n, f"http://127.0.0.1/files/{n}") for n in names]


def test_the_newest_final_release_wins_over_a_newer_pre_or_dev_release() -> None:
    # pip without --pre installs 1.1.0 here; opmarket install must read that wheel's extras.
    files = _files(
        "opm_gpu_demo-1.1.0-py3-none-any.whl",
        "opm_gpu_demo-2.0.0rc1-py3-none-any.whl",
        "opm_gpu_demo-2.0.0.dev3-py3-none-any.whl",
    )
    assert newest_wheel(files) == files[0]
    # With nothing final, pip takes the newest pre-release, and so does install.
    assert newest_wheel(files[1:]) == files[1]


@pytest.mark.parametrize("name", ["foo bar", "-foo", "foo/../bar", "foo?x=1", "", "naïve"])
def test_a_name_that_is_no_project_name_is_a_clear_error(name: str) -> None:
    with pytest.raises(InstallError, match="is not a project name"):
        project_files("http://127.0.0.1:9/simple/", name)


def test_a_project_page_that_is_not_pep_691_is_a_clear_error(tmp_path: Path) -> None:
    page = tmp_path / "simple" / "opm-bad"
    page.mkdir(parents=True)
    (page / "index.json").write_text('{"files": [{"url": "no filename"}]}')
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), partial(Handler, directory=str(tmp_path))
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with pytest.raises(InstallError, match="not a PEP 691 project page"):
            project_files(f"http://127.0.0.1:{server.server_address[1]}/simple/", "opm-bad")
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_file_index_the_user_names_is_read_as_pip_reads_it(tmp_path: Path) -> None:
    # A folder is read as its index.html, and its links may point to local files.
    files = tmp_path / "files"
    files.mkdir()
    wheel = write_wheel(files, "1.0.0")
    page = tmp_path / "simple" / "opm-gpu-demo"
    page.mkdir(parents=True)
    (page / "index.html").write_text(f'<a href="../../files/{wheel.name}">{wheel.name}</a>')
    found = project_files((tmp_path / "simple").as_uri() + "/", "opm-gpu-demo")
    assert [(f.filename, f.url) for f in found] == [(wheel.name, wheel.as_uri())]
    assert wheel_extras(found[0]) == ["cuda13"]  # the wheel itself, read from the file
