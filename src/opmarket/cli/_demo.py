"""``opmarket serve --demo``: build the first-party plugins, upload them through /legacy/ as
twine would, wait for their validation, and keep serving."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import click

from opmarket.cli._usage import UsageError
from opmarket.web._settings import Settings
from opmarket.web._status import FileStatus

__all__ = ["find_plugins", "run_demo", "upload_wheel"]

# The checkout this module runs from (src/opmarket/cli/_demo.py): its plugins/ and its own
# project, which the demo builds.
_CHECKOUT = Path(__file__).resolve().parents[3]


def find_plugins() -> list[Path]:
    """The first-party plugin projects: ``plugins/*/pyproject.toml`` of the checkout (or of
    ``OPMARKET_DEMO_PLUGINS``); the GPU companions (``*_cuda<major>``) only where nvcc is,
    since they cannot build without it."""
    from opmarket.sdk.build._cuda import find_nvcc

    override = os.environ.get("OPMARKET_DEMO_PLUGINS")
    root = Path(override) if override else _CHECKOUT / "plugins"
    found = sorted(p.parent for p in root.glob("*/pyproject.toml"))
    if find_nvcc() is None:
        return [p for p in found if not is_gpu_companion(p)]
    return found


def is_gpu_companion(project: Path) -> bool:
    """Whether a first-party plugin folder is a GPU companion (``plugins/time_two_cuda13``)."""
    return re.search(r"_cuda\d+$", project.name) is not None


def upload_wheel(base_url: str, token: str, wheel: Path) -> tuple[int, str]:
    """POST ``wheel`` to ``base_url/legacy/`` as twine does; (status, body)."""
    data = wheel.read_bytes()
    parts = wheel.name.split("-")
    fields = {
        ":action": "file_upload",
        "protocol_version": "1",
        "name": parts[0],
        "version": parts[1],
        "filetype": "bdist_wheel",
        "pyversion": "py3",
        "metadata_version": "2.1",
        "sha256_digest": hashlib.sha256(data).hexdigest(),
    }
    boundary = uuid.uuid4().hex
    body = (
        b"".join(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
            for k, v in fields.items()
        )
        + (
            f'--{boundary}\r\nContent-Disposition: form-data; name="content"; '
            f'filename="{wheel.name}"\r\nContent-Type: application/octet-stream\r\n\r\n'
        ).encode()
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    auth = base64.b64encode(f"__token__:{token}".encode()).decode()
    request = urllib.request.Request(
        f"{base_url}/legacy/",
        data=body,
        method="POST",
        headers={
            "Content-Type": f"multipart/form-data; boundary={boundary}",
            "Authorization": f"Basic {auth}",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def _build(projects: list[Path], out: Path, pool: ThreadPoolExecutor) -> list[Path]:
    """The projects' wheels, in the projects' order, built on ``pool`` (each build is its own
    process, and the C++ and CUDA compiles are most of the demo's start)."""

    def build(numbered: tuple[int, Path]) -> list[Path]:
        i, project = numbered
        click.echo(f"[{i}/{len(projects)}] building {project.name}", err=True)
        return _opmarket_build(project, out)

    built = list(pool.map(build, enumerate(projects, 1)))
    return [wheel for wheels in built for wheel in wheels]


def _opmarket_build(project: Path, out: Path) -> list[Path]:
    # `opmarket build`, as an author builds for the index (manylinux wheels for native code),
    # without isolation: the demo works offline. The opmarket beside this Python runs it.
    script = Path(sys.executable).with_name("opmarket")
    opmarket = [str(script)] if script.is_file() else [shutil.which("opmarket") or "opmarket"]
    # Reproducible: an unchanged tree gives the same bytes, which a kept --data folder takes
    # again; file dates in wheels would make every rebuild a refused "other contents".
    env = {"SOURCE_DATE_EPOCH": "315532800", **os.environ}  # 1980-01-01, zip's first date
    done = subprocess.run(
        [*opmarket, "build", "--no-isolation", "-o", str(out), str(project)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise UsageError(f"building {project} failed: {done.stderr.strip()[-500:]}")
    return [Path(line) for line in done.stdout.splitlines() if line.endswith(".whl")]


def _status(base_url: str, name: str) -> str:
    try:
        with urllib.request.urlopen(f"{base_url}/api/packages/{name}", timeout=30) as r:
            return str(json.load(r)["status"])
    except (urllib.error.URLError, KeyError, ValueError):
        return FileStatus.PENDING


def _publish(
    settings: Settings, base_url: str, wheels: list[Path], refused: list[tuple[str, str]]
) -> None:
    """Upload ``wheels``, wait for their verdicts, and say whether the index now serves them
    all; ``refused`` holds the files refused so far (hosting) and why, and gets this step's."""
    from opmarket.web._app import open_state
    from opmarket.web._auth import add_user, create_token

    state = open_state(settings)
    # A previous demo made the user already: fine.
    with state.db.transaction() as session, contextlib.suppress(ValueError):
        add_user(session, "demo")
    with state.db.transaction() as session:
        token = create_token(session, "demo")
    pending = set()
    for wheel in wheels:
        status, body = upload_wheel(base_url, token, wheel)
        if status == 200:
            click.echo(f"uploaded {wheel.name}", err=True)
            pending.add(wheel.name.split("-")[0].replace("_", "-").lower())
        else:
            reason = _reason(body)
            click.echo(f"REFUSED {wheel.name}: HTTP {status}: {reason}", err=True)
            refused.append((wheel.name, reason))
    while pending:
        for name in sorted(pending):
            verdict = _status(base_url, name)
            if verdict != FileStatus.PENDING:
                click.echo(f"{name}: {verdict}", err=True)
                pending.discard(name)
                if verdict != FileStatus.VALIDATED:
                    refused.append((name, verdict))
        time.sleep(0.5)
    if not refused:
        click.echo(f"demo ready: open {base_url}/", err=True)
        return
    click.echo(
        f"demo NOT as built: {', '.join(name for name, _ in refused)} refused or rejected "
        f"(above); {base_url}/ serves the rest",
        err=True,
    )
    if any("other contents" in why for _, why in refused):  # a kept --data folder
        click.echo(
            "  a file name is never reused: this --data folder keeps the earlier builds; run "
            "without --data for a new index, or publish a new version",
            err=True,
        )


def _reason(body: str) -> str:
    """The error message of the index's JSON error body, else the body itself."""
    try:
        return str(json.loads(body)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return body.strip()[:300]


def _host_dependencies(settings: Settings, out: Path) -> list[tuple[str, str]]:
    """Host opmarket's own wheel (``opmarket build`` of this checkout) and, without an
    upstream, the wheels of its dependencies and of what isolated plugin builds need
    (``pip download``, from pip's cache or its index), so that ``pip install --index-url
    <demo>/simple/ PLUGIN`` and ``opmarket build`` work with a plain pip; the names of the
    files refused, and why."""
    from importlib.metadata import requires

    from packaging.requirements import Requirement

    from opmarket.web._app import open_state
    from opmarket.web.catalog._hosted import HostError, host_wheel

    deps = out / "dependencies"
    deps.mkdir(parents=True, exist_ok=True)
    root = _CHECKOUT
    pip = [sys.executable, "-m", "pip"]
    click.echo("building opmarket's own wheel to host it", err=True)
    _opmarket_build(root, deps)  # manylinux, as the index takes wheels with native code
    steps: list[list[str]] = []
    if not settings.upstream:
        needed = [
            str(r)
            for r in map(Requirement, requires("opmarket") or [])
            if r.marker is None or r.marker.evaluate({"extra": ""})
        ]
        needed += _build_requirements(find_plugins())
        steps.append([*pip, "download", "--only-binary=:all:", "-d", str(deps), *needed])
    for argv in steps:
        done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=600)
        if done.returncode != 0:
            click.echo(
                f"  could not make the wheels to host ({' '.join(argv[3:5])}): "
                f"{done.stderr.strip()[-300:]}; serve with --upstream for what is missing",
                err=True,
            )
    state = open_state(settings)
    refused: list[tuple[str, str]] = []
    for wheel in sorted(deps.glob("*.whl")):
        try:
            done_host = host_wheel(state, wheel)
        except HostError as exc:
            click.echo(f"REFUSED {wheel.name}: not hosted: {exc}", err=True)
            refused.append((wheel.name, str(exc)))
            continue
        click.echo(f"hosted {done_host.filename}", err=True)
    state.db.dispose()
    return refused


def _build_requirements(projects: list[Path]) -> list[str]:
    """What isolated builds of ``projects`` (and of ``opmarket new``'s projects) install
    from the index besides opmarket: their ``build-system.requires``, one line a name."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    lines = ["setuptools>=70.1", "pybind11>=2.12"]  # opmarket new's (and opmarket.build_meta's)
    for project in projects:
        with open(project / "pyproject.toml", "rb") as f:
            lines += tomllib.load(f).get("build-system", {}).get("requires", [])
    merged: dict[str, SpecifierSet] = {}
    for requirement in map(Requirement, lines):
        if requirement.name != "opmarket":
            merged[requirement.name] = merged.get(requirement.name, SpecifierSet()) & (
                requirement.specifier
            )
    return [f"{name}{spec}" for name, spec in sorted(merged.items())]


def run_demo(settings: Settings, sock: socket.socket, base_url: str) -> None:
    """Serve the index on ``sock`` (at ``base_url``) and fill it: the first-party plugins
    built, their dependencies hosted, the plugins uploaded."""
    import uvicorn

    from opmarket.web._app import create_app
    from opmarket.web._limits import LimitedHttpToolsProtocol

    projects = find_plugins()
    if not projects:
        raise UsageError(
            "no first-party plugins found (plugins/*/pyproject.toml); the demo needs them"
        )
    out = settings.data_dir / "demo-dist"
    out.mkdir(parents=True, exist_ok=True)
    # As many builds at once as there are CPUs: opmarket's own wheel (with the dependencies
    # hosted beside it, in out/dependencies) is made while the plugins build.
    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        hosting = pool.submit(_host_dependencies, settings, out)
        wheels = _build(projects, out, pool)
        refused = hosting.result()
    # The same HTTP limits as `opmarket serve` (header size and count, slow clients).
    config = uvicorn.Config(
        create_app(settings),
        log_level="warning",
        http=LimitedHttpToolsProtocol,
    )
    server = uvicorn.Server(config)

    def publish_when_up() -> None:
        while not server.started:
            if server.should_exit:
                return
            time.sleep(0.1)
        _publish(settings, base_url, wheels, refused)

    threading.Thread(target=publish_when_up, daemon=True).start()
    server.run(sockets=[sock])  # bound by opmarket serve (port 0: the one it got)
