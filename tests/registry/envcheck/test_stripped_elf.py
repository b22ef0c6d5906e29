"""The ELF readers read what the dynamic linker reads: the dynamic table through PT_DYNAMIC and
its tables through the PT_LOAD segments, never the section headers. A library whose section
headers were stripped (``sstrip``, or a wheel that zeroes ``e_shoff``) or lie still loads and
still needs its libraries and symbols: env-check must say so as for the unstripped file.
Hostile program headers and dynamic tables are refused with a reason, in bounded work."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import sys
import sysconfig
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from opmarket.registry._elf import (
    MAX_DYNAMIC,
    MAX_SEGMENTS,
    Library,
    dynamic_symbols,
    read_library,
)
from opmarket.registry._elffile import MAX_SYMBOLS
from opmarket.registry._elfsymbols import Exports, Imports, read_imports

from .conftest import predict
from .test_envcheck_cli import handmade_wheel

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc)")

_DEP = "int opm_dep_value(void) { return 41; }\n"
_USER = (
    "#include <math.h>\n"
    "extern int opm_dep_value(void);\n"
    "int opm_user(void) { return opm_dep_value() + (int)cos(opm_dep_value()); }\n"
)
_ABSENT = "extern int opm_absent(void);\nint opm_user(void) { return opm_absent(); }\n"


def _cc(folder: Path, name: str, source: str, *args: str) -> Path:
    (folder / f"{name}.c").write_text(source)
    library = folder / f"lib{name}.so"
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", str(library), str(folder / f"{name}.c"), *args],
        check=True,
    )
    return library


def stripped(data: bytes) -> bytes:
    """``data`` with no section headers, as sstrip leaves a library: e_shoff, e_shnum and
    e_shstrndx zero (32- or 64-bit, either byte order)."""
    order = "<" if data[5] == 1 else ">"
    shoff, word, shnum = (0x20, "I", 0x30) if data[4] == 1 else (0x28, "Q", 0x3C)
    out = bytearray(data)
    struct.pack_into(order + word, out, shoff, 0)
    struct.pack_into(order + "HH", out, shnum, 0, 0)
    return bytes(out)


def lying(data: bytes) -> bytes:
    """``data`` whose section headers lie: .dynamic points at the program headers and
    .dynsym is empty (the segments still say where both are)."""
    assert data[4] == 2 and data[5] == 1  # this machine's libraries
    phoff, shoff = struct.unpack_from("<QQ", data, 0x20)
    (shnum,) = struct.unpack_from("<H", data, 0x3C)
    out = bytearray(data)
    for index in range(shnum):
        at = shoff + index * 64
        kind = struct.unpack_from("<I", out, at + 4)[0]
        if kind == 6:  # SHT_DYNAMIC
            struct.pack_into("<Q", out, at + 24, phoff)
        elif kind == 11:  # SHT_DYNSYM
            struct.pack_into("<Q", out, at + 32, 0)
    return bytes(out)


def _facts(path: Path) -> tuple[Library, Imports, frozenset[str], dict[str, object]]:
    library = read_library(path)
    imports = read_imports(path)
    found: dict[str, object] = {**Exports(path).find(["opm_user", "opm_dep_value", "cos"])}
    return library, imports, dynamic_symbols(path), found


def _loads(library: Path) -> str | None:
    """None when ctypes loads ``library`` in a fresh Python, else the loader's error."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import ctypes, sys\n"
            "try:\n    print(ctypes.CDLL(sys.argv[1]).opm_user())\n"
            "except OSError as exc:\n    print('error:', exc)\n",
            str(library),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    out = done.stdout.strip()
    return out.removeprefix("error: ") if out.startswith("error: ") else None


@pytest.fixture
def user(tmp_path: Path) -> Path:
    """libuser.so: needs libopm_dep.so (beside it, by $ORIGIN) and libm, imports
    opm_dep_value and cos, exports opm_user."""
    _cc(tmp_path, "opm_dep", _DEP, "-Wl,-soname,libopm_dep.so")
    return _cc(
        tmp_path,
        "user",
        _USER,
        f"-L{tmp_path}",
        "-Wl,--no-as-needed",
        "-lopm_dep",
        "-lm",
        "-Wl,-rpath,$ORIGIN",
        "-Wl,-soname,libuser.so",
    )


@pytest.mark.parametrize("damage", [stripped, lying])
def test_a_library_without_true_section_headers_is_read_as_the_loader_reads_it(
    user: Path, damage: Callable[[bytes], bytes]
) -> None:
    damaged = user.with_name("libdamaged.so")
    damaged.write_bytes(damage(user.read_bytes()))
    assert _loads(user) is None and _loads(damaged) is None  # a real, loadable library
    library, imports, exports, found = _facts(user)
    assert library.needed[:2] == ("libopm_dep.so", "libm.so.6") and library.soname == "libuser.so"
    assert {r.name for r in imports.references} >= {"opm_dep_value", "cos"}
    assert "opm_user" in exports and set(found) == {"opm_user"}
    assert _facts(damaged) == (library, imports, exports, found)


def _wheel(folder: Path, library: Path) -> Path:
    folder.mkdir()
    return handmade_wheel(folder / "x-1.0-py3-none-any.whl", library.read_bytes())


@pytest.mark.parametrize("damage", [stripped, lying])
def test_env_check_finds_what_a_stripped_library_lacks(
    user: Path, tmp_path: Path, damage: Callable[[bytes], bytes]
) -> None:
    """libopm_dep.so is not in the wheel; libabsent.so imports a symbol nothing defines.
    Stripped of its section headers each still fails to load, and env-check says why."""
    absent = _cc(tmp_path, "absent", _ABSENT)
    for library, kind in ((user, "needed"), (absent, "symbol")):
        damaged = tmp_path / f"damaged-{library.name}"
        damaged.write_bytes(damage(library.read_bytes()))
        alone = tmp_path / f"alone-{library.name}"  # away from libopm_dep.so
        alone.mkdir()
        shutil.copy(damaged, alone / library.name)
        assert _loads(alone / library.name) is not None
        reports = []
        for name, path in (("plain", library), ("damaged", damaged)):
            code, document = predict([_wheel(tmp_path / f"{name}-{library.stem}", path)])
            (report,) = document["files"]
            assert code == 1 and not report["works"], report
            reports.append(report["problems"])
        assert reports[0] == reports[1]
        assert [p["kind"] for p in reports[1]] == [kind]


# --- against binutils ------------------------------------------------------------------------


def _first_party() -> list[Path]:
    site = Path(sysconfig.get_paths()["purelib"])
    return sorted(site.glob("opmarket_*/**/*.so"))


_SYSTEM = [
    Path("/lib/x86_64-linux-gnu/libc.so.6"),
    Path("/lib/x86_64-linux-gnu/libm.so.6"),
    Path("/usr/lib/x86_64-linux-gnu/libstdc++.so.6"),
]


def _readelf(path: Path) -> tuple[tuple[str, ...], set[str], set[str]]:
    """DT_NEEDED, and the names of the defined and undefined dynamic symbols, as
    ``readelf -d -s -D`` lists them: from the dynamic segment, stripped or not (binutils
    2.40's ``--dyn-syms -D`` lists no symbol of a file without section headers)."""
    out = subprocess.run(
        ["readelf", "-W", "-d", "-s", "-D", str(path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    needed = tuple(re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", out))
    defined, undefined = set(), set()
    for line in out.splitlines():
        fields = line.split()
        if len(fields) < 8 or not fields[0].rstrip(":").isdigit():
            continue
        binding, visibility, index = fields[4], fields[5], fields[6]
        name = fields[7].split("@")[0]
        if binding not in ("GLOBAL", "WEAK", "UNIQUE"):
            continue
        if index == "UND":
            if binding == "GLOBAL":
                undefined.add(name)
        elif visibility in ("DEFAULT", "PROTECTED"):
            defined.add(name)
    return needed, defined, undefined


@pytest.mark.skipif(shutil.which("readelf") is None, reason="binutils (readelf) not installed")
@pytest.mark.parametrize(
    "library", [p for p in _SYSTEM + _first_party() if p.exists()], ids=lambda p: p.name
)
def test_needed_and_symbols_are_what_readelf_reads_from_the_dynamic_segment(
    library: Path, tmp_path: Path
) -> None:
    needed, defined, undefined = _readelf(library)
    bare = tmp_path / library.name
    bare.write_bytes(stripped(library.read_bytes()))
    assert _readelf(bare) == (needed, defined, undefined)
    for path in (library, bare):
        assert read_library(path).needed == needed
        assert dynamic_symbols(path) == defined
        assert {r.name for r in read_imports(path).references} == undefined
        assert set(Exports(path).find(defined)) == defined


# --- by hand: every class and byte order, and hostile files ----------------------------------

_KLASS = {1: ("I", "iI", "IIIBBH", 16, 52, 32), 2: ("Q", "qQ", "IBBHQQ", 24, 64, 56)}
_BASE = 0x10000  # the address the one PT_LOAD maps the file at
_DT_HASH, _DT_STRTAB, _DT_SYMTAB, _DT_GNU_HASH = 4, 5, 6, 0x6FFFFEF5
MiB = 1024 * 1024


def crafted(
    klass: int = 2,
    order: str = "<",
    *,
    dynamic: dict[int, int] | None = None,
    hash_table: tuple[int, bytes] | None = None,
    phnum: int = 2,
    dynamic_at: int | None = None,
    tail: bytes = b"",
) -> bytes:
    """A library made by hand, with program headers and no section headers: one PT_LOAD of
    the whole file at :data:`_BASE`, PT_DYNAMIC, a dynamic table needing libneeded.so.1,
    its names, three symbols (null, opm_export defined, opm_import undefined) and a DT_HASH
    table, or ``hash_table`` (its tag and bytes). ``dynamic`` overrides entries (addresses
    relative to the file's start), ``dynamic_at`` PT_DYNAMIC's; ``tail`` ends the file."""
    word, dyn, sym, symsize, ehsize, phsize = _KLASS[klass]
    strings = b"\0libneeded.so.1\0opm_export\0opm_import\0"
    defined, undefined = (16, 0x12, 0, 5, 0x10, 0), (27, 0x12, 0, 0, 0, 0)
    if klass == 1:  # name, value, size, info, other, section
        defined, undefined = (16, 0x10, 0, 0x12, 0, 5), (27, 0, 0, 0x12, 0, 0)
    symbols = (
        bytes(symsize) + struct.pack(order + sym, *defined) + struct.pack(order + sym, *undefined)
    )
    tag, table = hash_table or (_DT_HASH, struct.pack(order + "6I", 1, 3, 0, 0, 0, 0))
    at_dynamic = ehsize + 2 * phsize
    at_strings = at_dynamic + 8 * struct.calcsize(order + dyn)  # room for 7 entries, DT_NULL
    at_symbols = at_strings + len(strings)
    at_hash = at_symbols + len(symbols)
    entries = {1: 1, _DT_STRTAB: at_strings, 10: len(strings), _DT_SYMTAB: at_symbols, 11: symsize}
    entries[tag] = at_hash
    entries.update(dynamic or {})
    body = b"".join(
        struct.pack(order + dyn, t, _BASE + v if t in (5, 6, 4, _DT_GNU_HASH) else v)
        for t, v in entries.items()
    ).ljust(at_strings - at_dynamic, b"\0")
    size = at_hash + len(table) + len(tail)
    ident = b"\x7fELF" + bytes([klass, 1 if order == "<" else 2, 1]) + bytes(9)
    header = struct.pack(
        order + f"HHI{word}{word}{word}IHHHHHH",
        3, 62, 1, 0, ehsize, 0, 0, ehsize, phsize, phnum, 0, 0, 0,
    )  # fmt: skip
    dynamic_at = _BASE + (at_dynamic if dynamic_at is None else dynamic_at)
    if klass == 1:
        phdrs = struct.pack(order + "8I", 1, 0, _BASE, _BASE, size, size, 5, 0x1000)
        phdrs += struct.pack(order + "8I", 2, at_dynamic, dynamic_at, dynamic_at, 0, 0, 6, 4)
    else:
        phdrs = struct.pack(order + "IIQQQQQQ", 1, 5, 0, _BASE, _BASE, size, size, 0x1000)
        phdrs += struct.pack(order + "IIQQQQQQ", 2, 6, at_dynamic, dynamic_at, 0, 0, 0, 8)
    return ident + header + phdrs + body + strings + symbols + table + tail


@pytest.mark.parametrize("klass", [1, 2])
@pytest.mark.parametrize("order", ["<", ">"])
def test_every_class_and_byte_order_is_read_from_the_segments(
    tmp_path: Path, klass: int, order: str
) -> None:
    path = tmp_path / "libcrafted.so"
    path.write_bytes(crafted(klass, order))
    assert read_library(path) == Library(("libneeded.so.1",))
    assert dynamic_symbols(path) == {"opm_export"}
    assert [r.name for r in read_imports(path).references] == ["opm_import"]
    assert Exports(path).find(["opm_export", "opm_import"]) == {"opm_export": [("", False)]}


def _gnu_hash(chain: int, nbuckets: int = 1) -> tuple[int, bytes]:
    """DT_GNU_HASH (64-bit): ``nbuckets`` buckets, symbols from 1, one bloom word; the
    first bucket starts at symbol 1, whose chain entry is ``chain``."""
    buckets = struct.pack(f"<{min(nbuckets, 4)}I", 1, *[0] * (min(nbuckets, 4) - 1))
    return _DT_GNU_HASH, struct.pack("<4IQ", nbuckets, 1, 1, 0, 0) + buckets + struct.pack(
        "<I", chain
    )


def _peak(read: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        read()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


_PLAIN = len(crafted())
_NO_END = _gnu_hash(0)  # a chain whose entries never have the low bit that ends it


# name -> (the file, what the refusal says, whether only the symbol readers refuse it).
HOSTILE: dict[str, tuple[bytes, str, bool]] = {
    "PT_DYNAMIC past the file": (
        crafted(dynamic_at=2**40),
        "PT_DYNAMIC at 0x10000010000 lies in no loaded segment of the file",
        False,
    ),
    "DT_STRTAB outside every PT_LOAD": (
        crafted(dynamic={_DT_STRTAB: 2**40}),
        "DT_STRTAB at 0x10000010000 lies in no loaded segment of the file",
        False,
    ),
    "no DT_NULL": (
        crafted(dynamic_at=_PLAIN, tail=b"\1" * MiB),
        f"no DT_NULL in {MAX_DYNAMIC} dynamic entries",
        False,
    ),
    "program headers past the limit": (
        crafted(phnum=MAX_SEGMENTS + 1),
        f"{MAX_SEGMENTS + 1} program headers; the index reads at most {MAX_SEGMENTS}",
        False,
    ),
    "a DT_GNU_HASH chain that never ends": (
        crafted(hash_table=_NO_END, tail=bytes(MiB)),
        "a DT_GNU_HASH chain runs past its segment without an end",
        True,
    ),
    "a DT_GNU_HASH chain past the symbols read": (
        crafted(hash_table=_NO_END, tail=bytes(17 * MiB)),
        f"{MAX_SYMBOLS + 1} dynamic symbols; the index reads at most {MAX_SYMBOLS}",
        True,
    ),
    "DT_GNU_HASH buckets past the limit": (
        crafted(hash_table=_gnu_hash(0, 2**31)),
        f"{2**31} DT_GNU_HASH buckets; the index reads at most {MAX_SYMBOLS}",
        True,
    ),
    "DT_HASH symbols past the limit": (
        crafted(hash_table=(_DT_HASH, struct.pack("<6I", 1, 2**32 - 1, 0, 0, 0, 0))),
        f"{2**32 - 1} dynamic symbols; the index reads at most {MAX_SYMBOLS}",
        True,
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_segments_are_refused_with_a_reason_in_bounded_work(
    tmp_path: Path, case: str
) -> None:
    data, reason, symbols_only = HOSTILE[case]
    path = tmp_path / "libhostile.so"
    path.write_bytes(data)
    library, imports = read_library(path), read_imports(path)
    assert imports.problem.startswith(reason) and imports.references == ()
    assert (library.problem == "") if symbols_only else library.problem.startswith(reason)
    if symbols_only:  # DT_NEEDED does not need the symbols
        assert library.needed == ("libneeded.so.1",)
    assert dynamic_symbols(path) == frozenset()
    assert Exports(path).find(["opm_export"]) == {}
    for read in (read_library, read_imports, dynamic_symbols, Exports):
        assert _peak(lambda: read(path)) < 2 * MiB  # noqa: B023 (called at once)


def test_env_check_says_a_hostile_library_is_unreadable_not_that_it_works(
    tmp_path: Path,
) -> None:
    data, reason, _ = HOSTILE["a DT_GNU_HASH chain that never ends"]
    library = tmp_path / "libhostile.so"
    library.write_bytes(data)
    code, document = predict([_wheel(tmp_path / "wheel", library)])
    (report,) = document["files"]
    assert code == 1 and not report["works"]
    assert [p["detail"] for p in report["problems"] if p["kind"] == "elf"] == [
        f"unreadable ELF file: {reason}"
    ]
