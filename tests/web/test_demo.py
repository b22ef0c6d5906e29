"""``opmarket serve --demo``: the first-party plugins are built, uploaded through /legacy/,
validated, and served; what the README's first command shows a newcomer."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from opmarket.cli._demo import find_plugins, is_gpu_companion
from opmarket.web.gpu._tools import cuobjdump_path

from .conftest import OPMARKET, clean_env
from .upstream import serve_folder

PLUGINS = find_plugins()


def cuobjdump_lists(wheel: Path) -> tuple[list[str], list[str]]:
    """The SASS and PTX ``cuobjdump --list-elf --list-ptx`` lists for the wheel's libraries."""
    tool = cuobjdump_path()
    assert tool is not None, "cuobjdump (nvidia-cuda-cuobjdump, in the web extra) is missing"
    sass: set[str] = set()
    ptx: set[str] = set()
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if not name.endswith(".so"):
                continue
            library = wheel.parent / Path(name).name
            library.write_bytes(zf.read(name))
            out = subprocess.run(
                [str(tool), "--list-elf", "--list-ptx", str(library)],
                capture_output=True,
                text=True,
                check=False,
            ).stdout
            sass |= set(re.findall(r"^ELF file\s+\d+: \S+\.(sm_\d+)\.cubin$", out, re.M))
            found = re.findall(r"^PTX file\s+\d+: \S+\.sm_(\d+)\.ptx$", out, re.M)
            ptx |= {f"compute_{n}" for n in found}
    return sorted(sass), sorted(ptx)


@pytest.fixture
def empty_upstream(tmp_path: Path) -> Iterator[str]:
    """A local upstream index with nothing on it: the demo downloads nothing (no network)."""
    (tmp_path / "upstream" / "simple").mkdir(parents=True)
    with serve_folder(tmp_path / "upstream") as url:
        yield f"{url}/simple/"


@pytest.mark.slow
def test_demo_serves_every_first_party_plugin_validated(
    tmp_path: Path, empty_upstream: str
) -> None:
    log = tmp_path / "demo.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                *(OPMARKET, "serve", "--demo", "--port", "0"),
                *("--data", str(tmp_path / "d"), "--upstream", empty_upstream),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=clean_env(),
        )
    try:
        deadline = time.monotonic() + 400
        while "demo ready" not in log.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            time.sleep(0.5)
        progress = log.read_text()
        assert "demo ready" in progress, progress
        assert f"[{len(PLUGINS)}/{len(PLUGINS)}] building" in progress
        url = demo_url(progress)
        with urllib.request.urlopen(f"{url}/api/packages") as r:
            everything = json.load(r)["packages"]
        # opmarket's own wheel is hosted, so that a bare venv can install a plugin.
        assert [p["normalized"] for p in everything if p["status"] == "hosted"] == ["opmarket"]
        packages = [p for p in everything if p["status"] != "hosted"]
        assert len(packages) == len(PLUGINS)
        rejected = [p["normalized"] for p in packages if p["status"] != "validated"]
        logs = [
            json.load(urllib.request.urlopen(f"{url}/api/packages/{name}"))["files"][0]["log"]
            for name in rejected
        ]
        assert not rejected, "\n".join(logs)
        # The base plugins carry no GPU kernel; each companion's registers only where a GPU
        # is, its manifest declares it, so the catalog shows it as not run, beside what the
        # static checks read from its library: the SASS and PTX cuobjdump lists.
        with urllib.request.urlopen(f"{url}/api/packages/opmarket-time-two") as r:
            assert {k["device"] for k in json.load(r)["kernels"]} == {"CPU"}
        for companion in [p.name for p in PLUGINS if is_gpu_companion(p)]:
            name = "opmarket-" + companion.replace("_", "-")
            with urllib.request.urlopen(f"{url}/api/packages/{name}") as r:
                detail = json.load(r)
            gpu = [k for k in detail["kernels"] if k["device"] == "GPU"]
            assert gpu and all(k["status"] == "gpu: not run" for k in gpu), detail["kernels"]
            (file,) = detail["files"]
            assert file["gpu"] is not None, file["log"]
            with urllib.request.urlopen(url + file["url"]) as r:
                wheel = tmp_path / file["filename"]
                wheel.write_bytes(r.read())
            sass, ptx = cuobjdump_lists(wheel)
            assert (file["gpu"]["sass"], file["gpu"]["ptx"]) == (sass, ptx)
        for p in packages:
            request = urllib.request.Request(
                f"{url}/simple/{p['normalized']}/",
                headers={"Accept": "application/vnd.pypi.simple.v1+json"},
            )
            with urllib.request.urlopen(request) as r:
                (entry,) = json.load(r)["files"]
            with urllib.request.urlopen(url + entry["url"]) as r:
                assert hashlib.sha256(r.read()).hexdigest() == entry["hashes"]["sha256"]
    finally:
        proc.terminate()
        proc.wait(30)


def _one_plugin(tmp_path: Path) -> Path:
    """A copy of plugins/atan (pure Python) as the demo's only plugin."""
    source = next(p for p in PLUGINS if p.name == "atan")
    folder = tmp_path / "plugins"
    ignore = shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    shutil.copytree(source, folder / "atan", ignore=ignore)
    return folder


def demo_url(said: str) -> str:
    """The URL the demo said it is ready on (``--port 0``: the port it bound)."""
    (url,) = re.findall(r"^demo ready: open (http://\S+?)/$", said, re.M)
    return url


class _Demo:
    """``opmarket serve --demo --port 0`` in a subprocess: its output in a file, stopped by
    Ctrl-C."""

    def __init__(self, tmp_path: Path, plugins: Path, *args: str) -> None:
        self.log = tmp_path / f"demo-{uuid.uuid4().hex[:8]}.log"
        # The demo's own pip (for the wheels it hosts) is this machine's, as a user's is.
        env = {k: v for k, v in os.environ.items() if not k.startswith("OPMARKET_")}
        env["OPMARKET_DEMO_PLUGINS"] = str(plugins)
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [OPMARKET, "serve", "--demo", "--port", "0", *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=tmp_path,
            )

    def finished(self) -> str:
        """The output once the demo has said whether it serves what it built."""
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            said = self.log.read_text()
            if "demo ready" in said or "demo NOT as built" in said:
                return said
            assert self.proc.poll() is None, said
            time.sleep(0.5)
        raise AssertionError(self.log.read_text())

    def ctrl_c(self) -> str:
        self.proc.send_signal(signal.SIGINT)
        assert self.proc.wait(60) == 0, self.log.read_text()
        said = self.log.read_text()
        assert "Aborted!" not in said and "Traceback" not in said, said
        return said


@pytest.mark.slow
def test_a_rerun_serves_the_working_tree_or_says_it_does_not(
    tmp_path: Path, empty_upstream: str
) -> None:
    plugins = _one_plugin(tmp_path)
    kept = ("--data", str(tmp_path / "kept"), "--upstream", empty_upstream)
    first = _Demo(tmp_path, plugins, *kept)
    assert "demo ready" in first.finished()
    first.ctrl_c()

    # An edit: the same version with other contents, which a kept index refuses.
    module = plugins / "atan" / "src" / "opmarket_atan" / "__init__.py"
    module.write_text(module.read_text() + "\nEDITED_FOR_THE_DEMO = 1\n")
    second = _Demo(tmp_path, plugins, *kept)
    said = second.finished()
    assert "demo ready" not in said and "opmarket-atan: validated" not in said, said
    assert re.search(r"^REFUSED opmarket_atan-\S+\.whl: HTTP 400: .*other contents", said, re.M)
    assert "demo NOT as built" in said
    # opmarket itself did not change: built again to the same bytes, it is not refused.
    assert re.search(r"^hosted opmarket-\S+\.whl$", said, re.M) and "REFUSED opmarket-" not in said
    second.ctrl_c()

    # Without --data each run has a new index: the edit is what it serves.
    fresh = _Demo(tmp_path, plugins)
    said = fresh.finished()
    assert "demo ready" in said and "REFUSED" not in said, said
    url = demo_url(said)
    (data,) = re.findall(r"^opmarket: demo data in (\S+) ", said, re.M)
    request = urllib.request.Request(
        f"{url}/simple/opmarket-atan/",
        headers={"Accept": "application/vnd.pypi.simple.v1+json"},
    )
    with urllib.request.urlopen(request) as r:
        (entry,) = json.load(r)["files"]
    wheel = tmp_path / entry["filename"]
    with urllib.request.urlopen(url + entry["url"]) as r:
        wheel.write_bytes(r.read())
    with zipfile.ZipFile(wheel) as zf:
        assert b"EDITED_FOR_THE_DEMO" in zf.read("opmarket_atan/__init__.py")

    # What the docs promise a plain pip (no configuration, no PIP_* variables): an isolated
    # `opmarket build` with the demo as its only index finds setuptools and opmarket there.
    done = subprocess.run(
        [OPMARKET, "build", "-o", str(tmp_path / "dist"), str(plugins / "atan")],
        capture_output=True,
        text=True,
        env=clean_env(PIP_INDEX_URL=f"{url}/simple/"),
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert list((tmp_path / "dist").glob("opmarket_atan-*.whl")), done.stdout
    fresh.ctrl_c()
    assert not Path(data).exists()  # the demo's own data folder goes with it


def test_the_demos_own_data_folder_goes_when_it_is_terminated(tmp_path: Path) -> None:
    demo = _Demo(tmp_path, _one_plugin(tmp_path))
    while not (found := re.findall(r"^opmarket: demo data in (\S+) ", demo.log.read_text(), re.M)):
        assert demo.proc.poll() is None, demo.log.read_text()
        time.sleep(0.1)  # a poll interval: the line comes first
    (data,) = found
    demo.proc.terminate()
    assert demo.proc.wait(60) == 128 + signal.SIGTERM, demo.log.read_text()
    assert not Path(data).exists()
