"""The cached entry point scan: same answer as importlib.metadata, served from the cache
only while nothing was installed or removed (checked with real pip)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import time
import venv
from pathlib import Path
from typing import Any

import pytest

from opmarket.registry._discovery import MAX_CACHE_FILES, scan
from tests.first_party import needs_first_party


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("OPMARKET_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def age(*paths: Path) -> None:
    """Set times a minute back, as after an install that happened a while ago."""
    past = time.time() - 60
    for top in paths:
        for p in [top, *top.rglob("*")]:
            os.utime(p, (past, past))


def fake_dist(site: Path, name: str, version: str = "1.0", entry_points: str = "") -> Path:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    if entry_points:
        (info / "entry_points.txt").write_text(entry_points)
    return info


def names(paths: list[str]) -> list[tuple[str, str, str, str]]:
    return sorted((e.name, e.value, e.distribution, e.version) for e in scan(paths).entries)


@needs_first_party
def test_the_scan_finds_what_importlib_metadata_finds() -> None:
    want = sorted(
        (
            ep.name,
            ep.value,
            ep.dist.metadata["Name"] if ep.dist else "",
            ep.dist.version if ep.dist else "",
        )
        for ep in importlib.metadata.entry_points(group="opmarket")
    )
    got = sorted(
        (e.name, e.value, e.distribution, e.version) for e in scan(use_cache=False).entries
    )
    assert got == want
    assert ("atan", "opmarket_atan", "opmarket-atan", "0.1.0") in got
    assert ("custom_call", "opmarket_custom_call", "opmarket-custom-call", "0.1.0") in got


def test_the_cache_serves_until_a_directory_changes(tmp_path: Path, cache: Path) -> None:
    site = tmp_path / "site"
    fake_dist(site, "plug-a", entry_points="[opmarket]\na = plug_a\n")
    fake_dist(site, "not-a-plugin", entry_points="[console_scripts]\nx = y:main\n")
    fake_dist(site, "plain")
    age(site)
    first = scan([str(site)])
    assert not first.from_cache and first.distributions == 3
    assert [e.name for e in first.entries] == ["a"]
    assert scan([str(site)]).from_cache  # nothing changed
    # An install adds a folder: the directory's time moves, the cache is not used.
    fake_dist(site, "plug-b", "2.0", "[opmarket]\nb = plug_b:plugin\n")
    second = scan([str(site)])
    assert not second.from_cache
    assert names([str(site)]) == [
        ("a", "plug_a", "plug-a", "1.0"),
        ("b", "plug_b:plugin", "plug-b", "2.0"),
    ]
    # Changed within the last two seconds: never cached (a later change in the same clock
    # tick would keep the time), so the next scan looks again.
    assert not scan([str(site)]).from_cache
    age(site)
    scan([str(site)])
    assert scan([str(site)]).from_cache


def test_editing_a_plugins_entry_points_in_place_is_seen(tmp_path: Path) -> None:
    site = tmp_path / "site"
    info = fake_dist(site, "plug-a", entry_points="[opmarket]\na = plug_a\n")
    age(site)
    scan([str(site)])
    assert scan([str(site)]).from_cache
    (info / "entry_points.txt").write_text("[opmarket]\nrenamed = plug_a\n")
    assert [e.name for e in scan([str(site)]).entries] == ["renamed"]


def test_an_egg_info_rewritten_in_place_is_seen(tmp_path: Path) -> None:
    # ``setup.py develop`` rewrites a source tree's .egg-info in place: no folder is added.
    src = tmp_path / "src"
    info = src / "plug_e.egg-info"
    info.mkdir(parents=True)
    (info / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: plug-e\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[console_scripts]\ne = plug_e:main\n")
    age(src)
    assert scan([str(src)]).entries == ()
    assert scan([str(src)]).from_cache
    with open(info / "entry_points.txt", "a") as f:  # in place, as setuptools writes
        f.write("\n[opmarket]\ne = plug_e\n")
    assert names([str(src)]) == [("e", "plug_e", "plug-e", "0.1")]


def test_the_first_directory_on_the_path_wins(tmp_path: Path) -> None:
    # As importlib.metadata: a distribution shadowed by an earlier directory is not seen.
    first, second = tmp_path / "first", tmp_path / "second"
    fake_dist(first, "plug-a", "2.0", "[opmarket]\na = plug_a\n")
    fake_dist(second, "plug_a", "1.0", "[opmarket]\na = old_plug_a\n")
    fake_dist(second, "plug-c", "1.0", "[opmarket]\nc = plug_c\n")
    assert names([str(first), str(second)]) == [
        ("a", "plug_a", "plug-a", "2.0"),
        ("c", "plug_c", "plug-c", "1.0"),
    ]


def test_an_unusable_cache_directory_only_slows_discovery(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    fake_dist(site, "plug-a", entry_points="[opmarket]\na = plug_a\n")
    age(site)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("OPMARKET_CACHE_DIR", str(blocker / "cache"))
    assert [e.name for e in scan([str(site)]).entries] == ["a"]
    assert not scan([str(site)]).from_cache


def test_a_corrupt_cache_file_is_ignored(tmp_path: Path, cache: Path) -> None:
    site = tmp_path / "site"
    fake_dist(site, "plug-a", entry_points="[opmarket]\na = plug_a\n")
    age(site)
    scan([str(site)])
    (file,) = cache.iterdir()
    file.write_text('{"format": 1, "dirs": ')
    again = scan([str(site)])
    assert not again.from_cache and [e.name for e in again.entries] == ["a"]


@pytest.mark.parametrize(
    "spoil",
    [
        lambda data: [data],
        lambda data: "entries",
        lambda data: {**data, "stamps": 3},
        lambda data: {**data, "stamps": [["a"]]},
        lambda data: {**data, "stamps": [[1, 2]]},
        lambda data: {**data, "entries": [[1, 2, 3, 4, 5]]},
        lambda data: {**data, "entries": [["a", "plug_a"]]},
        lambda data: {**data, "distributions": "3"},
    ],
)
def test_a_cache_file_of_valid_json_but_the_wrong_shape_is_ignored(
    tmp_path: Path, cache: Path, spoil: Any
) -> None:
    site = tmp_path / "site"
    fake_dist(site, "plug-a", entry_points="[opmarket]\na = plug_a\n")
    age(site)
    scan([str(site)])
    (file,) = cache.iterdir()
    file.write_text(json.dumps(spoil(json.loads(file.read_text()))))
    again = scan([str(site)])
    assert not again.from_cache and [e.name for e in again.entries] == ["a"]
    assert scan([str(site)]).from_cache  # rewritten by the scan before


def test_old_cache_files_are_pruned(tmp_path: Path, cache: Path) -> None:
    site = tmp_path / "site"
    fake_dist(site, "plug-a", entry_points="[opmarket]\na = plug_a\n")
    age(site)
    for i in range(MAX_CACHE_FILES + 5):  # a distinct sys.path each time
        (tmp_path / f"dir{i}").mkdir()
        age(tmp_path / f"dir{i}")
        scan([str(site), str(tmp_path / f"dir{i}")])
    assert len(list(cache.iterdir())) == MAX_CACHE_FILES
    assert scan([str(site), str(tmp_path / f"dir{MAX_CACHE_FILES + 4}")]).from_cache


def test_real_pip_install_and_uninstall_are_never_served_stale(
    tmp_path: Path, test_wheels: dict[str, Path]
) -> None:
    env = tmp_path / "env"
    venv.create(env, with_pip=False)
    python = env / "bin" / "python"
    (site,) = (env / "lib").glob("python*/site-packages")
    paths = [str(site)]

    def pip(*args: str) -> None:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "--python",
                str(python),
                *args,
                "--quiet",
                "--disable-pip-version-check",
            ],
            check=True,
            capture_output=True,
        )

    age(site)
    assert scan(paths).entries == ()
    assert scan(paths).from_cache
    pip("install", "--no-deps", str(test_wheels["opmarket-fresh-plugin"]))
    assert names(paths) == [("fresh", "opmarket_fresh_plugin", "opmarket-fresh-plugin", "1.0.0")]
    age(site)
    scan(paths)
    assert scan(paths).from_cache  # cached with the plugin in it
    pip("uninstall", "--yes", "opmarket-fresh-plugin")
    assert scan(paths).entries == ()
