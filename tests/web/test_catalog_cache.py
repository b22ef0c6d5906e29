"""The catalog's caches across processes: two ``opmarket serve`` processes on one catalog;
what one of them takes in (an upload that waits for its verdict: the search shows a new
latest version, the project page a new file) shows on the other's searches and pages
after its next look at the change log, never a stale copy kept."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from .conftest import Backend, Market, _wait_up, clean_env, start_market, start_serve, twine
from .plugins import handmade_wheel, manifest_for, plugin_source

SERVE_ONLY = ("--validation-workers", "0", "--upload-wait", "0")
DIST = "opm-coherent"


def _servers(tmp_path: Path, database: Backend, flags: tuple[str, ...]) -> Iterator[Market]:
    """Server A, serving only, and then server B with ``flags``, on one catalog."""
    data = tmp_path / "market"
    url = database.new_url("coherent")
    first = start_market(data, validation_workers=0, flags=SERVE_ONLY[2:], database_url=url)
    a = next(first)
    env = clean_env(**({"OPMARKET_DATABASE_URL": url} if url else {}))
    served = start_serve(["--data", str(data), *flags], env, tmp_path / "b.log")
    try:
        b = Market(served.url, data, served.proc, a.tokens, a.env)
        _wait_up(b.url, served.proc)
        yield a
        yield b
    finally:
        served.stop()
        first.close()


@pytest.fixture
def two_servers(tmp_path: Path, database: Backend) -> Iterator[tuple[Market, Market]]:
    """Servers A and B on one catalog, neither validating (uploads stay pending)."""
    servers = _servers(tmp_path, database, SERVE_ONLY)
    yield next(servers), next(servers)
    servers.close()


@pytest.fixture
def serving_and_validating(tmp_path: Path, database: Backend) -> Iterator[tuple[Market, Market]]:
    """Server A serves only; server B validates what either takes in (its worker claims
    A's uploads from the shared queue)."""
    servers = _servers(tmp_path, database, ("--validation-workers", "1", "--upload-wait", "0"))
    yield next(servers), next(servers)
    servers.close()


def _wheel(folder: Path, version: str) -> Path:
    package = DIST.replace("-", "_")
    module = folder / f"{package}.py"
    module.write_text(plugin_source("Test>Coherent", 2))
    return handmade_wheel(
        folder,
        DIST,
        version,
        {
            f"{package}/__init__.py": module.read_bytes(),
            f"{package}/opmarket.opset.json": manifest_for(module, DIST, version).encode(),
            f"{package}-{version}.dist-info/entry_points.txt": (
                f"[opmarket]\n{package} = {package}\n".encode()
            ),
        },
    )


def _until(what: Callable[[], Any], expected: Any, timeout: float = 60) -> Any:
    """``what()`` once it equals ``expected`` (the other server looks at the change log
    once a second; a busy machine may take longer), else its last value."""
    deadline = time.monotonic() + timeout
    while (got := what()) != expected and time.monotonic() < deadline:
        time.sleep(0.2)
    return got


@pytest.mark.slow
def test_an_upload_to_one_server_shows_in_the_others_searches_and_pages(
    two_servers: tuple[Market, Market], tmp_path: Path
) -> None:
    a, b = two_servers
    token = a.tokens["alice"]

    def latest() -> str | None:  # what A's search says
        found = a.json("/api/packages?q=coherent")["packages"]
        return found[0]["latest"] if found else None

    def page_has(filename: str) -> bool:  # whether A's project page lists the file
        return filename.encode() in a.get(f"/project/{DIST}/")[2]

    def listed(version: str) -> bool:  # whether A's HTML search shows it as the latest
        return f"<td>{version}</td>".encode() in a.get("/?q=coherent")[2]

    first = _wheel(tmp_path, "1.0.0")
    assert twine(b, token, first).returncode == 0
    assert _until(latest, "1.0.0") == "1.0.0"
    assert _until(lambda: page_has(first.name), True)
    assert _until(lambda: listed("1.0.0"), True)
    for _ in range(3):  # A keeps them now: served from memory
        assert latest() == "1.0.0" and page_has(first.name) and listed("1.0.0")
    second = _wheel(tmp_path, "1.1.0")  # the same project: no new project in the log
    assert twine(b, token, second).returncode == 0
    assert _until(latest, "1.1.0") == "1.1.0"
    assert _until(lambda: page_has(second.name), True)
    assert _until(lambda: listed("1.1.0"), True)
    # And a server's own upload shows on its own pages at once.
    third = _wheel(tmp_path, "1.2.0")
    assert twine(a, token, third).returncode == 0
    assert latest() == "1.2.0" and page_has(third.name) and listed("1.2.0")


def test_a_verdict_in_one_server_shows_on_the_others_package_details_and_simple_pages(
    serving_and_validating: tuple[Market, Market], tmp_path: Path
) -> None:
    a, b = serving_and_validating
    token = a.tokens["alice"]

    def details(m: Market) -> dict[str, str]:  # filename -> status, from /api/packages/<name>
        status, _, body = m.get(f"/api/packages/{DIST}")
        return (
            {f["filename"]: f["status"] for f in json.loads(body)["files"]} if status == 200 else {}
        )

    def simple(m: Market) -> set[str]:  # the files /simple/<name>/ lists (JSON)
        status, _, body = m.get(
            f"/simple/{DIST}/", {"Accept": "application/vnd.pypi.simple.v1+json"}
        )
        return {f["filename"] for f in json.loads(body)["files"]} if status == 200 else set()

    for m in (a, b):  # asked for before it exists: each server keeps the "not found"
        for _ in range(3):
            assert m.get(f"/simple/{DIST}/")[0] == 404
    first = _wheel(tmp_path, "1.0.0")
    assert twine(a, token, first).returncode == 0  # A takes it in, B's worker validates it
    assert details(a) in ({}, {first.name: "pending"})  # A keeps it pending until the verdict
    for m in (a, b):
        assert _until(partial(details, m), {first.name: "validated"}) == {first.name: "validated"}
        assert _until(partial(simple, m), {first.name}) == {first.name}
    for _ in range(3):  # kept now: served from memory
        assert all(details(m) == {first.name: "validated"} for m in (a, b))
        assert all(simple(m) == {first.name} for m in (a, b))
    second = _wheel(tmp_path, "1.1.0")  # the same project, through A again
    assert twine(a, token, second).returncode == 0
    both = {first.name: "validated", second.name: "validated"}
    for m in (a, b):
        assert _until(partial(details, m), both) == both
        assert _until(partial(simple, m), set(both)) == set(both)
