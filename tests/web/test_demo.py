"""``opmarket serve --demo``: the first-party plugins are built, uploaded through /legacy/,
validated, and served; what the README's first command shows a newcomer."""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from opmarket.web._demo import find_plugins

from .conftest import OPMARKET, clean_env, free_port
from .upstream import serve_folder

PLUGINS = find_plugins()


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
        # time_two's CUDA kernel registers only where a GPU is; its manifest declares it, so
        # the catalog shows it as not run rather than hiding the GPU build.
        with urllib.request.urlopen(f"{url}/api/packages/opmarket-time-two") as r:
            kernels = json.load(r)["kernels"]
        gpu = [k for k in kernels if k["device"] == "GPU"]
        assert gpu and all(k["status"] in ("gpu: not run", "passed") for k in gpu), kernels
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
