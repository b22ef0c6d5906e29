"""``opmarket serve --demo``: the first-party plugins are built, uploaded through /legacy/,
validated, and served; what the README's first command shows a newcomer."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from opmarket.web._demo import find_plugins, is_gpu_companion
from opmarket.web._gpu_tools import cuobjdump_path

from .conftest import OPMARKET, clean_env, free_port
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
@pytest.mark.skipif(not PLUGINS, reason="no first-party plugins in plugins/")
def test_demo_serves_every_first_party_plugin_validated(
    tmp_path: Path, empty_upstream: str
) -> None:
    port = free_port()
    log = tmp_path / "demo.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                *(OPMARKET, "serve", "--demo", "--port", str(port)),
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
        url = f"http://127.0.0.1:{port}"
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
