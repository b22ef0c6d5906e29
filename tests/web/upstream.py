"""A local upstream simple index for the tests: a static PEP 503 folder (and a PEP 691 JSON
page beside each HTML one) served by a real ``http.server`` on 127.0.0.1, and wheels
repacked from this environment's installed distributions (no network)."""

from __future__ import annotations

import base64
import hashlib
import html
import importlib.metadata
import json
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

JSON_V1 = "application/vnd.pypi.simple.v1+json"


def write_index(root: Path, wheels: list[Path]) -> None:
    """``root/simple/<project>/`` with ``index.html`` (PEP 503) and ``index.json`` (PEP 691)
    linking to the wheels, copied to ``root/files/``."""
    (root / "files").mkdir(parents=True, exist_ok=True)
    by_project: dict[str, list[tuple[str, str]]] = {}
    for wheel in wheels:
        data = wheel.read_bytes()
        (root / "files" / wheel.name).write_bytes(data)
        name = str(canonicalize_name(wheel.name.split("-")[0]))
        by_project.setdefault(name, []).append((wheel.name, hashlib.sha256(data).hexdigest()))
    for name, files in by_project.items():
        folder = root / "simple" / name
        folder.mkdir(parents=True, exist_ok=True)
        links = "".join(
            f'<a href="../../files/{html.escape(f)}#sha256={h}">{html.escape(f)}</a><br>\n'
            for f, h in files
        )
        (folder / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
        doc = {
            "meta": {"api-version": "1.0"},
            "name": name,
            "files": [
                {"filename": f, "url": f"../../files/{f}", "hashes": {"sha256": h}}
                for f, h in files
            ],
        }
        (folder / "index.json").write_text(json.dumps(doc))


class _Handler(SimpleHTTPRequestHandler):
    def send_head(self) -> Any:
        if JSON_V1 in self.headers.get("Accept", "") and self.path.endswith("/"):
            self.path += "index.json"
        return super().send_head()

    def guess_type(self, path: Any) -> str:
        return JSON_V1 if str(path).endswith(".json") else super().guess_type(path)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def serve_folder(root: Path) -> Iterator[str]:
    """Serve ``root`` on 127.0.0.1; its base URL while the block runs."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Handler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def repack(dist_name: str, out: Path) -> Path:
    """A wheel of the installed distribution ``dist_name``, made from its RECORD (what pip
    installed): files outside site-packages (scripts) and the installer's own are left out."""
    dist = importlib.metadata.distribution(dist_name)
    files = [f for f in dist.files or [] if not str(f).startswith("..")]
    info = next(str(f).split("/")[0] for f in files if str(f).endswith(".dist-info/METADATA"))
    wheel_text = dist.read_text("WHEEL") or ""
    tags = [
        line.split(":", 1)[1].strip() for line in wheel_text.splitlines() if line.startswith("Tag:")
    ]
    parts = [t.split("-") for t in tags]
    tag = "-".join(".".join(dict.fromkeys(p[i] for p in parts)) for i in range(3))
    name = info.removesuffix(".dist-info")
    wheel = out / f"{name}-{tag}.whl"
    skip = {f"{info}/{x}" for x in ("INSTALLER", "REQUESTED", "direct_url.json", "RECORD")}
    record = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for f in files:
            path = str(f)
            if path in skip or "__pycache__" in path:
                continue
            data = Path(str(f.locate())).read_bytes()
            zf.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{path},sha256={digest.decode()},{len(data)}\n")
        zf.writestr(f"{info}/RECORD", "".join(record) + f"{info}/RECORD,,\n")
    return wheel
