"""The "loads with" table of each validated file (issue 25): which Pythons and framework
releases its native code loads with, read by env-check's engine in the validation sandbox,
stored in the catalog and shown on the package page and in the JSON API. A real server on
127.0.0.1, twine uploads, a compiled first-party plugin, and a wheel with a library that
needs a symbol nothing exports and a damaged one."""

from __future__ import annotations

import html
import json
import shutil
import struct
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from opmarket.web.gpu._tools import ToolSandbox
from opmarket.web.sandbox._run import Limits
from opmarket.web.validation._loads import MAX_PROBLEMS, known_environments, loads_with

from .conftest import OPMARKET, Market, clean_env, start_market, twine
from .plugins import build_plugin, record_line

REPO = Path(__file__).resolve().parents[2]
_MISSING = "opm_nobody_exports_this"


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv's interpreter whose site has no framework (and not even pip)."""
    folder = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    return folder / "bin" / "python"


@pytest.fixture(scope="module")
def market(tmp_path_factory: pytest.TempPathFactory, bare_python: Path) -> Iterator[Market]:
    """A market whose operator lists the bare venv, and the validation interpreter again
    (which counts once)."""
    yield from start_market(
        tmp_path_factory.mktemp("loads-market"),
        validation_workers=1,
        flags=(
            "--upload-wait",
            "600",
            "--loads-with",
            str(bare_python),
            "--loads-with",
            sys.executable,
        ),
    )


def _validation_frameworks(wheel: Path) -> dict[str, str]:
    """The frameworks of this interpreter's environment, as ``opmarket env-check`` reads it."""
    done = subprocess.run(
        [OPMARKET, "env-check", "--format", "json", str(wheel)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr
    frameworks: dict[str, str] = json.loads(done.stdout)["environment"]["frameworks"]
    return frameworks


def _upload(market: Market, wheel: Path) -> dict[str, Any]:
    done = twine(market, market.tokens["alice"], wheel)
    assert done.returncode == 0, done.stdout + done.stderr
    name = wheel.name.split("-")[0].replace("_", "-")
    entry = market.wait_for(name, wheel.name)
    assert entry["status"] == "validated", entry["log"]
    return entry


def _with_libraries(wheel: Path, libraries: dict[str, bytes]) -> Path:
    """``wheel`` rewritten with more members (and their RECORD rows)."""
    with zipfile.ZipFile(wheel) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    record = next(n for n in members if n.endswith(".dist-info/RECORD"))
    members[record] += "".join(record_line(n, b) for n, b in libraries.items()).encode()
    members.update(libraries)
    wheel.unlink()
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in sorted(members, key=lambda n: n == record):  # RECORD last
            zf.writestr(name, members[name])
    return wheel


@pytest.fixture(scope="module")
def zero_out_c(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first-party C-ABI plugin's wheel, built as its author builds it for an index
    (``opmarket build``: compiled, repaired to a manylinux tag)."""
    out = tmp_path_factory.mktemp("zero-out-c")
    done = subprocess.run(
        [OPMARKET, "build", "--no-isolation", "-o", str(out), str(REPO / "plugins" / "zero_out_c")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = out.glob("*.whl")
    return wheel


@pytest.fixture(scope="module")
def lazy_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A plugin that passes validation (its code never loads its libraries) and carries a
    library needing a symbol nothing exports, and a damaged library."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc)")
    work = tmp_path_factory.mktemp("lazy")
    source = f"extern int {_MISSING}(void);\nint f(void) {{ return {_MISSING}(); }}\n"
    (work / "fast.c").write_text(source)
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", str(work / "fast.so"), str(work / "fast.c")], check=True
    )
    wheel = build_plugin(work, "opm-lazy", "1.0.0", op_name="Test>Lazy")
    library = (work / "fast.so").read_bytes()
    return _with_libraries(
        wheel, {"opm_lazy/_fast.so": library, "opm_lazy/_broken.so": _symbols_nowhere(library)}
    )


def _symbols_nowhere(library: bytes) -> bytes:
    """``library`` (64-bit, little-endian) whose dynamic table says its symbol table
    (DT_SYMTAB, where the loader finds it) is at an address no loaded segment holds: its
    headers and needed libraries read, its symbols do not."""
    data = bytearray(library)
    (table,) = struct.unpack_from("<Q", data, 0x28)  # e_shoff
    size, count = struct.unpack_from("<HH", data, 0x3A)  # e_shentsize, e_shnum
    for at in range(table, table + size * count, size):
        if struct.unpack_from("<I", data, at + 4)[0] == 6:  # SHT_DYNAMIC
            offset, length = struct.unpack_from("<QQ", data, at + 24)
            for entry in range(offset, offset + length, 16):
                if struct.unpack_from("<q", data, entry)[0] == 6:  # DT_SYMTAB
                    struct.pack_into("<Q", data, entry + 8, 2**40)
    return bytes(data)


def test_a_first_party_native_plugin_loads_with_each_known_environment(
    market: Market, zero_out_c: Path
) -> None:
    rows = _upload(market, zero_out_c)["loads_with"]
    frameworks = _validation_frameworks(zero_out_c)
    python = ".".join(map(str, sys.version_info[:3]))
    # The validation environment: a row per framework (one without, when it has none);
    # the bare venv: a row without; this interpreter listed again: no more rows.
    expected = sorted(frameworks.items()) or [(None, None)]
    assert sorted((r["framework"], r["version"]) for r in rows if r["framework"]) == [
        e for e in expected if e[0]
    ]
    assert len(rows) == len(expected) + 1
    assert [r for r in rows if r["framework"] is None][-1]["python"] == python
    assert all(r["works"] and r["problems"] == [] for r in rows), rows
    assert {r["implementation"] for r in rows} == {sys.implementation.name}

    status, _, body = market.get("/project/opmarket-zero-out-c/")
    assert status == 200
    page = html.unescape(body.decode())
    table = page.split("<h4>Loads with</h4>", 1)[1].split("</table>", 1)[0]
    assert table.count('<td class="loads">loads</td>') == len(rows)
    for name, version in frameworks.items():
        assert f"{name} {version}" in table


def test_a_library_that_needs_a_missing_symbol_does_not_load_and_says_which(
    market: Market, lazy_wheel: Path
) -> None:
    rows = _upload(market, lazy_wheel)["loads_with"]
    assert rows and not any(r["works"] for r in rows), rows
    for row in rows:
        by_library = {p["library"]: p for p in row["problems"]}
        assert by_library["opm_lazy/_fast.so"]["kind"] == "symbol"
        assert _MISSING in by_library["opm_lazy/_fast.so"]["detail"]
        # The damaged library is a problem row of its own; the server goes on.
        assert by_library["opm_lazy/_broken.so"]["kind"] == "elf"
        assert by_library["opm_lazy/_broken.so"]["detail"] == (
            "unreadable ELF file: DT_SYMTAB at 0x10000000000 lies in no loaded segment of the file"
        )

    status, _, body = market.get("/project/opm-lazy/")
    assert status == 200
    page = html.unescape(body.decode())
    assert page.count('<td class="no-load">does not load: ') == len(rows)
    assert market.get("/simple/")[0] == 200


def test_a_pure_python_wheel_has_no_table_and_says_so(market: Market, tmp_path: Path) -> None:
    wheel = build_plugin(tmp_path, "opm-plain", "1.0.0", op_name="Test>Plain")
    assert _upload(market, wheel)["loads_with"] == []
    status, _, body = market.get("/project/opm-plain/")
    assert status == 200 and "No native code (pure Python)" in body.decode()


def test_a_wheel_without_a_library_name_needs_no_sandbox(tmp_path: Path) -> None:
    # No member named *.so or *.so.N: the table is known from the names, read here as the
    # upload checks read them; a sandbox that could not even start Python is not asked.
    wheel = build_plugin(tmp_path, "opm-plain", "1.0.0", op_name="Test>Plain")
    known = known_environments((sys.executable,))
    assert loads_with(wheel, wheel.name, known, ToolSandbox(Limits(memory_mb=8))) == []


@pytest.mark.parametrize("how", ["flag", "variable"])
def test_a_loads_with_that_is_not_a_program_is_a_usage_error(tmp_path: Path, how: str) -> None:
    nope = str(tmp_path / "nope")
    flags, env = (
        (["--loads-with", nope], {})
        if how == "flag"
        else ([], {"OPMARKET_LOADS_WITH": f"{sys.executable}:{nope}"})
    )
    done = subprocess.run(
        [OPMARKET, "serve", "--data", str(tmp_path), *flags],
        capture_output=True,
        text=True,
        env=clean_env(**env),
        check=False,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"opmarket: error: setting loads_with: Value error, '{nope}' is not a program "
        "that can be run"
    ], done.stderr


def test_a_check_that_cannot_finish_gives_every_row_the_reason(zero_out_c: Path) -> None:
    # The sandboxed check with far too little memory to start Python: killed or failed,
    # never an exception here, and no row says it loads.
    known = known_environments((sys.executable,))
    starved = ToolSandbox(Limits(memory_mb=8))
    rows = loads_with(zero_out_c, zero_out_c.name, known, starved)
    assert rows is not None and len(rows) == len(known)
    for row in rows:
        assert row["works"] is False
        (problem,) = row["problems"]
        assert problem["kind"] == "check"
        assert problem["detail"].startswith(("the check could not finish", "the check exited"))


def test_an_environment_that_cannot_be_read_is_no_table_and_is_tried_again(
    tmp_path: Path,
) -> None:
    # An operator-listed Python that fails to run until its folder has a file "ready": no
    # environment known gives no table at all (not "no native code"), and the failed read
    # is not kept, so the next file reads it.
    python = tmp_path / "python"
    script = f'#!/bin/sh\n[ -e "{tmp_path}/ready" ] || exit 3\nexec "{sys.executable}" "$@"\n'
    python.write_text(script)
    python.chmod(0o755)
    assert known_environments((str(python),)) == ()
    wheel = tmp_path / "opm_native-1.0-cp311-abi3-manylinux_2_28_x86_64.whl"
    assert loads_with(wheel, wheel.name, (), ToolSandbox(Limits())) is None
    (tmp_path / "ready").touch()
    known = known_environments((str(python),))
    assert known and {k.program for k in known} == {str(python)}


def test_a_wheel_with_very_many_problems_keeps_its_table_capped(tmp_path: Path) -> None:
    # Libraries that each need thousands of libraries nothing has (a "needed" problem each,
    # within what env-check reads of one library): uncapped, the check's answer would run
    # past what the sandbox lets a tool print (1 MiB); capped in the sandbox, each row keeps
    # its first problems and a row saying how many more.
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc)")
    count = 4000
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    (tmp_path / "stub.c").write_text("int stub;\n")
    subprocess.run(
        ["cc", "-shared", "-o", str(stubs / "stub.so"), str(tmp_path / "stub.c")], check=True
    )
    names = [f"opm_nowhere_{i:05d}_{'x' * 36}" for i in range(count)]
    for name in names:
        (stubs / f"lib{name}.so").symlink_to("stub.so")
    (tmp_path / "needs.c").write_text("int f(void) { return 0; }\n")
    flags = ["-shared", "-fPIC", "-o", str(tmp_path / "needs.so"), str(tmp_path / "needs.c")]
    flags += [f"-L{stubs}", "-Wl,--no-as-needed", *(f"-l{n}" for n in names)]
    (tmp_path / "flags").write_text("\n".join(flags))
    subprocess.run(["cc", f"@{tmp_path / 'flags'}"], check=True)
    wheel = build_plugin(tmp_path, "opm-many", "1.0.0", op_name="Test>Many")
    library = (tmp_path / "needs.so").read_bytes()
    _with_libraries(wheel, {f"opm_many/_needs{i}.so": library for i in range(3)})
    known = known_environments((sys.executable,))
    rows = loads_with(wheel, wheel.name, known, ToolSandbox(Limits()))
    assert rows is not None and len(rows) == len(known)
    for row in rows:
        assert row["works"] is False
        problems = row["problems"]
        assert len(problems) == MAX_PROBLEMS + 1, problems[:2]
        assert {p["kind"] for p in problems[:MAX_PROBLEMS]} == {"needed"}
        assert problems[-1] == {
            "kind": "more",
            "library": "",
            "detail": f"{3 * count - MAX_PROBLEMS} more problems",
        }
