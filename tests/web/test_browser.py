"""What a person sees: headless Chromium renders the home and package pages; the test
reads the DOM Chromium built and looks at the screenshot's pixels."""

from __future__ import annotations

import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path

import pytest

from .conftest import Market, Wheels, clean_env

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="Chromium is not installed (Debian's chromium; scripts/setup installs it as root)",
)


def chromium(*args: str) -> subprocess.CompletedProcess[bytes]:
    assert CHROMIUM is not None
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
            *args,
        ],
        capture_output=True,
        env=clean_env(),
        check=False,
        timeout=120,
    )


class Texts(HTMLParser):
    """Text of the elements with a class, by class: what the page shows where."""

    def __init__(self) -> None:
        super().__init__()
        self.by_class: dict[str, list[str]] = {}
        self._open: list[list[str]] = []
        self.rows: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = (dict(attrs).get("class") or "").split()
        if tag == "tr" and "package" in classes:
            self.rows.append(dict(attrs).get("data-name") or "")
        self._open.append(classes)

    def handle_endtag(self, tag: str) -> None:
        if self._open:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        for classes in self._open:
            for c in classes:
                self.by_class.setdefault(c, []).append(data.strip())


def dom(url: str) -> Texts:
    done = chromium("--dump-dom", url)
    assert done.returncode == 0, done.stderr[-2000:]
    parsed = Texts()
    parsed.feed(done.stdout.decode())
    return parsed


def png_pixels(path: Path) -> tuple[int, int, list[bytes]]:
    """Width, height and RGB rows of an 8-bit RGB/RGBA PNG (what Chromium writes)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    height = channels = 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and color in (2, 6)
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride, rows = zlib.decompress(idat), width * channels, []
    prev = bytearray(stride)
    for y in range(height):
        f, line = (
            raw[y * (stride + 1)],
            bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)]),
        )
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b, c = prev[i], prev[i - channels] if i >= channels else 0
            if f == 1:
                line[i] = (line[i] + a) & 0xFF
            elif f == 2:
                line[i] = (line[i] + b) & 0xFF
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[i] = (line[i] + pred) & 0xFF
        rows.append(bytes(v for i, v in enumerate(line) if i % channels < 3))
        prev = line
    return width, height, rows


def has_color(rows: list[bytes], rgb: tuple[int, int, int], *, at_least: int) -> bool:
    wanted = bytes(rgb)
    return sum(row[i : i + 3] == wanted for row in rows for i in range(0, len(row), 3)) >= at_least


@pytest.fixture(scope="module")
def shown(uploaded: Market, wheels: Wheels) -> Market:
    from .conftest import twine

    assert twine(uploaded, uploaded.tokens["bob"], wheels.wrong).returncode == 1  # rejected
    uploaded.wait_for("opm-wrong", wheels.wrong.name)
    return uploaded


@pytest.mark.slow
def test_home_page_lists_packages_with_their_status(shown: Market) -> None:
    page = dom(shown.url + "/")
    assert {"opm-double", "opm-wrong"} <= set(page.rows)
    assert "validated" in page.by_class["validated"] and "rejected" in page.by_class["rejected"]
    filtered = dom(shown.url + "/?status=rejected&q=opm-")
    assert "opm-double" not in filtered.rows and "opm-wrong" in filtered.rows


@pytest.mark.slow
def test_package_page_dom_and_screenshot(shown: Market, tmp_path: Path) -> None:
    page = dom(shown.url + "/project/opm-double/")
    assert page.by_class["name"] == ["opm-double"]
    assert page.by_class["version"][0] in {"1.0.0", "1.1.0"}  # the newest validated
    assert "validated" in page.by_class["validated"]
    assert any(s.startswith("Test>Double(x: T)") for s in page.by_class.get("ops", []))
    assert "CPU" in page.by_class["cpu"]
    shot = tmp_path / "package.png"
    done = chromium(
        "--window-size=1000,700", f"--screenshot={shot}", shown.url + "/project/opm-double/"
    )
    assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
    width, height, rows = png_pixels(shot)
    assert (width, height) == (1000, 700)
    # The styled header bar (#1f3a5f) across the top, and a green "validated" badge.
    assert has_color(rows[:40], (0x1F, 0x3A, 0x5F), at_least=width * 20)
    assert has_color(rows, (0xD9, 0xF2, 0xDE), at_least=200)
