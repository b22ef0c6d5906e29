"""Op-set sources: files in every format, wheels, installed distributions, an index."""

from __future__ import annotations

import http.server
import re
import sys
import threading
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from opmarket.compat import load_source, opset_from_dist, opset_from_wheel
from opmarket.sdk import DocumentError, DType, OpSet, op, opdefs_to_pbtxt, opset_to_json

Release = Callable[..., OpSet]
Wheel = Callable[[OpSet], Path]


def test_canonical_json_keeps_kernels_and_version(tmp_path: Path, release: Release) -> None:
    path = tmp_path / "opset.json"
    path.write_text(opset_to_json(release("1.4.0")), encoding="utf-8")
    source = load_source(str(path))
    assert source.version == "1.4.0"
    assert source.kernels_known
    assert [o.name for o in source.opset] == ["Opm>ZeroOut"]
    assert len(source.opset.kernels) == 1


def test_spec_form_json(tmp_path: Path) -> None:
    path = tmp_path / "spec.json"
    path.write_text(
        '{"ops": [{"name": "ZeroOut", "inputs": ["to_zero: int32"], '
        '"outputs": ["zeroed: int32"]}]}',
        encoding="utf-8",
    )
    source = load_source(str(path))
    assert source.opset["ZeroOut"].inputs[0].type is DType.INT32
    assert not source.kernels_known


def test_tf_history_file_as_a_release_is_its_latest_versions(tmp_path: Path) -> None:
    v1 = op("Foo").output("y: float").build()
    v2 = op("Foo").output("y: float").attr("a: int = 1").build()
    path = tmp_path / "Foo.pbtxt"
    path.write_text(opdefs_to_pbtxt([v1, v2]), encoding="utf-8")
    assert load_source(str(path)).opset["Foo"] == v2


def test_invalid_ops_are_kept_and_reported(tmp_path: Path) -> None:
    path = tmp_path / "bad.pbtxt"
    path.write_text('op { name: "Bad" input_arg { name: "x" type_attr: "T" } }', encoding="utf-8")
    source = load_source(str(path))
    assert "Bad" in source.opset
    assert source.problems and "T" in source.problems[0].message


def test_wheel_is_read_without_importing_the_plugin(release: Release, wheel: Wheel) -> None:
    opset = opset_from_wheel(wheel(release("2.0.0")))
    assert (opset.name, opset.version) == ("opm-zero", "2.0.0")
    assert opset.kernels[0].constraint("T") == (DType.INT32, DType.FLOAT)
    assert "opm_zero" not in sys.modules  # plugin.py raises if imported


def test_broken_wheel_is_a_document_error(tmp_path: Path) -> None:
    path = tmp_path / "opm_zero-1.0.0-py3-none-any.whl"
    path.write_bytes(b"not a zip")
    with pytest.raises(DocumentError, match="not a zip archive"):
        load_source(str(path))


@pytest.mark.parametrize("member", ["METADATA", "entry_points.txt", "opmarket.opset.json"])
def test_a_wheel_member_that_is_not_utf8_is_a_document_error(
    tmp_path: Path, release: Release, wheel: Wheel, member: str
) -> None:
    good = wheel(release("1.0.0"))
    bad = tmp_path / good.name
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bad, "w") as dst:
        for name in src.namelist():
            data = src.read(name)
            dst.writestr(name, data + b"\xff\xfe" if name.endswith(member) else data)
    with pytest.raises(DocumentError, match=rf"{re.escape(member)}: not UTF-8 text"):
        load_source(str(bad))


def test_a_top_level_module_plugin_has_no_manifest_as_discovery_sees_it(
    tmp_path: Path, release: Release
) -> None:
    # A wheel whose entry point is a plain top-level module, with a manifest at its root:
    # installed, that file lands loose in site-packages, where discovery does not look.
    dist = "opm_zero-1.0.0.dist-info"
    path = tmp_path / "opm_zero-1.0.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("plug.py", "")
        zf.writestr("opmarket.opset.json", opset_to_json(release("1.0.0")))
        zf.writestr(f"{dist}/METADATA", "Metadata-Version: 2.1\nName: opm-zero\nVersion: 1.0.0\n")
        zf.writestr(f"{dist}/entry_points.txt", "[opmarket]\nzero_out = plug\n")
    with pytest.raises(DocumentError, match=r"module 'plug' has no opmarket\.opset\.json"):
        opset_from_wheel(path)


def test_installed_distribution(installed: Wheel, release: Release) -> None:
    installed(release("1.1.0"))
    source = load_source("opm-zero")
    assert source.version == "1.1.0" and source.kernels_known
    assert opset_from_dist("opm_zero").name == "opm-zero"
    assert load_source("opm-zero==1.1.0").version == "1.1.0"
    with pytest.raises(DocumentError, match=r"installed version is 1\.1\.0"):
        load_source("opm-zero==1.0.0")


def test_an_installed_manifest_that_is_not_utf8_is_a_document_error(
    installed: Wheel, release: Release
) -> None:
    site = installed(release("1.1.0"))
    manifest = site / "opm_zero" / "opmarket.opset.json"
    manifest.write_bytes(manifest.read_bytes() + b"\xff")
    with pytest.raises(DocumentError, match=r"opmarket\.opset\.json: not UTF-8 text"):
        load_source("opm-zero")


def test_unknown_name_says_what_was_looked_for() -> None:
    with pytest.raises(DocumentError, match="no installed distribution by that name"):
        load_source("no-such-plugin-anywhere")
    with pytest.raises(DocumentError, match="no such file"):
        load_source("missing/opset.json")


def test_index_fetches_the_pinned_release(
    index: Callable[[OpSet, bool], str], release: Release
) -> None:
    index(release("1.0.0"), True)
    url = index(release("1.1.0", extra_attr="mode: string = 'x'"), True)
    source = load_source("opm-zero==1.0.0", index_url=url)
    assert source.version == "1.0.0"
    assert source.opset["Opm>ZeroOut"].attr("mode") is None
    assert load_source("opm-zero==1.1.0", index_url=url).opset["Opm>ZeroOut"].attr("mode")
    with pytest.raises(DocumentError, match=r"no wheel of opm-zero 9\.9"):
        load_source("opm-zero==9.9", index_url=url)


def test_an_index_url_without_simple_says_what_to_add(
    index: Callable[[OpSet, bool], str], release: Release
) -> None:
    base = index(release("1.0.0"), True).removesuffix("simple/")
    with pytest.raises(DocumentError) as raised:
        load_source("opm-zero==1.0.0", index_url=base)
    assert str(raised.value).endswith(
        f"HTTP 404 File not found (is --index-url the simple API? it mostly ends in "
        f"/simple/: {base}simple/)"
    )
    assert load_source("opm-zero==1.0.0", index_url=f"{base}simple/").version == "1.0.0"


def test_index_rejects_a_wheel_whose_hash_does_not_match(
    index: Callable[[OpSet, bool], str], release: Release
) -> None:
    url = index(release("1.0.0"), False)
    with pytest.raises(DocumentError, match="sha256 does not match"):
        load_source("opm-zero==1.0.0", index_url=url)


@pytest.mark.parametrize(
    "body", [b"{not json", b"[]", b'{"files": [{"url": "x"}]}', b'{"files": 3}']
)
def test_an_index_answering_malformed_json_is_unreadable_input(body: bytes) -> None:
    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/simple/"
        with pytest.raises(DocumentError, match="not a PEP 691 project page"):
            load_source("opm-zero==1.0.0", index_url=url)
    finally:
        server.shutdown()
        server.server_close()


def test_a_file_index_the_user_names_is_read_as_pip_reads_it(
    tmp_path: Path, wheel: Callable[[OpSet], Path], release: Release
) -> None:
    built = wheel(release("1.0.0"))
    page = tmp_path / "simple" / "opm-zero"
    page.mkdir(parents=True)
    (page / "index.html").write_text(f'<a href="{built.as_uri()}">{built.name}</a>')
    source = load_source("opm-zero==1.0.0", index_url=(tmp_path / "simple").as_uri() + "/")
    assert source.version == "1.0.0" and "Opm>ZeroOut" in source.opset


def test_a_manifest_that_inflates_past_the_cap_is_refused(
    tmp_path: Path, wheel: Callable[[OpSet], Path], release: Release
) -> None:
    # 65 MiB of JSON whitespace compress to a few kilobytes: a zip bomb, read whole before.
    built = wheel(release("1.0.0"))
    bomb = tmp_path / built.name
    with zipfile.ZipFile(built) as src, zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as out:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith("opmarket.opset.json"):
                data += b" " * (65 * 1024 * 1024)
            out.writestr(info.filename, data)
    assert bomb.stat().st_size < 1024 * 1024
    with pytest.raises(DocumentError, match=r"opmarket\.opset\.json: \d+ bytes uncompressed"):
        load_source(str(bomb))


def test_unreachable_index() -> None:
    with pytest.raises(DocumentError, match="cannot connect"):
        load_source("opm-zero==1.0.0", index_url="http://127.0.0.1:9/simple/")


def test_history_file_as_old_is_its_latest_release(tmp_path: Path, release: Release) -> None:
    from opmarket.compat import add_release

    path = tmp_path / "history.json"
    add_release(path, release("1.0.0"))
    add_release(path, release("1.1.0", extra_attr="a: int = 1"))
    source = load_source(str(path))
    assert source.version == "1.1.0" and source.kernels_known
