"""The catalog's README rendering (sanitized, as PyPI renders it), Python calls and tags."""

from __future__ import annotations

import inspect

import opmarket
from opmarket.registry import get_registry
from opmarket.registry._wrapper import python_call
from opmarket.sdk import opset_to_json
from opmarket.web.catalog._showcase import python_calls, render_readme
from opmarket.web.wheels._filename import WheelName
from tests.first_party import skip_unless_installed


def _metadata(body: str, kind: str) -> bytes:
    head = f"Metadata-Version: 2.1\nName: x\nVersion: 1\nDescription-Content-Type: {kind}\n\n"
    return (head + body).encode()


def test_markdown_is_rendered_and_sanitized() -> None:
    html = render_readme(
        _metadata(
            '# Title\n\n**bold** <script>alert(1)</script> <a href="javascript:x">l</a>\n',
            "text/markdown",
        )
    )
    assert "<h1" in html and "<strong>bold</strong>" in html
    assert "<script" not in html and "javascript:" not in html


def test_rst_and_plain_text() -> None:
    assert "<h1" in render_readme(_metadata("Title\n=====\n\ntext\n", "text/x-rst"))
    assert render_readme(_metadata("a < b\n", "text/plain")) == "a &lt; b<br>"
    assert render_readme(_metadata("", "text/markdown")) == ""


def test_the_python_call_is_the_generated_wrappers_signature() -> None:
    skip_unless_installed("zero_out")
    expected = f"zero_out{inspect.signature(opmarket.ops.zero_out)}"  # loads the plugins
    snapshot = get_registry().snapshot()
    op = snapshot.get("Opm>ZeroOut")
    assert op is not None
    assert python_call(op) == expected == "zero_out(to_zero, *, preserve_index=0)"
    assert python_calls(opset_to_json(snapshot))["Opm>ZeroOut"] == expected


def test_wheel_tags() -> None:
    assert WheelName.parse("acme_clip-0.1.0-cp311-abi3-manylinux_2_28_x86_64.whl").tag_parts == {
        "python_tag": "cp311",
        "abi_tag": "abi3",
        "platform_tag": "manylinux_2_28_x86_64",
    }
