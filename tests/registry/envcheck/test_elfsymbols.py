"""The ELF symbol reader env-check stands on, against binutils on this system's libraries:
every dynamic symbol ``nm -D`` lists as defined is found by name through ``.gnu.hash``
with its version (``name@@V`` the default, ``name@V`` hidden), every one it lists as
undefined is a reference with its version, and the versions defined are ``readelf -V``'s.
Also the dynamic section's DT_SONAME and whether run paths are DT_RPATH or DT_RUNPATH.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from opmarket.registry._elf import read_library
from opmarket.registry._elfsymbols import Exports, read_imports

from .conftest import TORCH

LIBRARIES = [
    Path("/usr/lib/x86_64-linux-gnu/libstdc++.so.6"),
    Path("/lib/x86_64-linux-gnu/libc.so.6"),
]
if TORCH is not None:
    LIBRARIES.append(TORCH / "lib" / "libc10.so")


def nm(path: Path, which: str) -> list[tuple[str, str, str]]:
    """(type, name, version part with its @ signs) of each symbol ``nm -D`` lists."""
    out = subprocess.run(
        ["nm", "-D", which, str(path)], capture_output=True, text=True, check=True
    ).stdout
    rows = []
    for line in out.splitlines():
        kind, symbol = line.split()[-2:]
        name, at, version = symbol.partition("@")
        rows.append((kind, name, at + version))
    return rows


@pytest.mark.skipif(shutil.which("nm") is None, reason="binutils (nm) not installed")
@pytest.mark.parametrize("library", [p for p in LIBRARIES if p.exists()], ids=lambda p: p.name)
def test_exports_and_imports_are_what_nm_lists(library: Path) -> None:
    defined = [
        (name, version.lstrip("@"), not version.startswith("@@") and bool(version))
        for kind, name, version in nm(library, "--defined-only")
        if kind != "A"  # the version names themselves
    ]
    exports = Exports(library)
    found = exports.find({name for name, _, _ in defined})
    assert {(n, v, h) for n, pairs in found.items() for v, h in pairs} == set(defined)
    assert exports.find(["opm_not_a_symbol", "_ZN3c1013opm_not_thereEv"]) == {}
    strong = {
        (name, version.lstrip("@"))
        for kind, name, version in nm(library, "--undefined-only")
        if kind == "U"
    }
    assert {(r.name, r.version) for r in read_imports(library).references} == strong


def test_versions_defined_are_what_readelf_lists() -> None:
    library = LIBRARIES[0]
    out = subprocess.run(
        ["readelf", "-V", str(library)], capture_output=True, text=True, check=True
    ).stdout
    section = out.split("Version definition section", 1)[1].split("Version needs section", 1)[0]
    names = set(re.findall(r"Name: (\S+)", section)) - {library.name, "libstdc++.so.6"}
    assert Exports(library).versions == names
    needs = read_imports(library).needs
    assert "GLIBC_2.34" in needs["libc.so.6"] or "GLIBC_2.2.5" in needs["libc.so.6"]


@pytest.mark.parametrize(
    ("flag", "rpath_only"), [("--disable-new-dtags", True), ("--enable-new-dtags", False)]
)
def test_soname_and_the_kind_of_run_path(tmp_path: Path, flag: str, rpath_only: bool) -> None:
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc)")
    (tmp_path / "x.c").write_text("int opm_x(void) { return 1; }\n")
    library = tmp_path / "libx.so.1.2"
    subprocess.run(
        [
            "cc",
            "-shared",
            "-fPIC",
            "-o",
            str(library),
            str(tmp_path / "x.c"),
            "-Wl,-soname,libx.so.1",
            f"-Wl,{flag}",
            "-Wl,-rpath,$ORIGIN/../lib:/opt/x",
        ],
        check=True,
    )
    facts = read_library(library)
    assert facts.soname == "libx.so.1"
    assert facts.runpath == ("$ORIGIN/../lib", "/opt/x")
    assert facts.rpath_only is rpath_only


def test_a_damaged_library_is_read_without_raising(tmp_path: Path) -> None:
    # Every read lies inside the file and every chain is bounded: damage gives less, or a
    # problem, never an exception (the index will read uploaded files with it).
    import random

    small = Path("/lib/x86_64-linux-gnu/libz.so.1")
    source = (small if small.exists() else LIBRARIES[0]).read_bytes()
    rng = random.Random(25)
    damaged = tmp_path / "libdamaged.so"
    for _ in range(150):
        data = bytearray(source)
        for _ in range(rng.randint(1, 16)):
            at = rng.randrange(len(data))
            data[at] = rng.randrange(256)
        if rng.random() < 0.3:
            data = data[: rng.randrange(len(data))]
        damaged.write_bytes(bytes(data))
        imports = read_imports(damaged)
        exports = Exports(damaged)
        exports.find([r.name for r in imports.references[:50]] + ["deflate", "inflate"])
        read_library(damaged)
