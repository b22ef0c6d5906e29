"""What a plugin needs from the index: an upstream for the projects it does not host (and
never for those it does), dependencies the operator hosts, uploads that answer with their
verdict, ``opmarket status``, and the catalog's README, Python call and wheel tags."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import OPMARKET, Market, Wheels, clean_env, start_market, twine
from .plugins import handmade_wheel
from .upstream import JSON_V1, repack, serve_folder, write_index

ROOT = Path(__file__).resolve().parents[2]

# Every test here needs the module's index and its upstream (about 20 s to start), which no
# quick test shares, or builds and installs wheels.
pytestmark = pytest.mark.slow


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def _get_unfollowed(url: str, accept: str = "") -> tuple[int, str]:
    opener = urllib.request.build_opener(_NoRedirect)
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with opener.open(request, timeout=30) as r:
            return r.status, ""
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Location", "")


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An upstream index with upstream-dep 1.0.0, opm-shadow 9.0.0 (a name this index will
    host) and opmarket's dependencies, repacked from this environment."""
    root = tmp_path_factory.mktemp("upstream")
    made = root / "made"
    made.mkdir()
    wheels = [
        handmade_wheel(made, "upstream-dep", "1.0.0", {}),
        handmade_wheel(made, "opm-shadow", "9.0.0", {}),
    ]
    wheels += [
        repack(name, made)
        for name in (
            *("numpy", "ml_dtypes", "pluggy", "packaging", "protobuf", "click"),
            *("setuptools", "pybind11"),  # what a plugin's isolated build needs
        )
    ]
    write_index(root / "index", wheels)
    with serve_folder(root / "index") as url:
        yield url


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory, upstream: str) -> Iterator[Market]:
    """A market with that upstream, whose uploads answer at once (``--upload-wait 0``)."""
    data = tmp_path_factory.mktemp("hosting")
    flags = ("--upstream", f"{upstream}/simple/", "--upload-wait", "0")
    yield from start_market(data, validation_workers=1, flags=flags)


def _pip_download(index: Market, requirement: str, dest: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "-d",
            str(dest),
            "--index-url",
            f"{index.url}/simple/",
            requirement,
        ],
        capture_output=True,
        text=True,
        env=clean_env(),
        check=False,
        timeout=300,
    )


def test_a_project_not_hosted_here_is_redirected_to_the_upstream(
    index: Market, upstream: str, tmp_path: Path
) -> None:
    target = f"{upstream}/simple/upstream-dep/"
    assert _get_unfollowed(f"{index.url}/simple/upstream-dep/") == (307, target)
    assert _get_unfollowed(f"{index.url}/simple/Upstream_Dep/", JSON_V1) == (307, target)
    # Followed, the client negotiates with the upstream: HTML (PEP 503) or JSON (PEP 691).
    status, headers, body = index.get("/simple/upstream-dep/", {"Accept": JSON_V1})
    assert status == 200 and {k.lower(): v for k, v in headers.items()}["content-type"] == JSON_V1
    assert json.loads(body)["files"][0]["filename"] == "upstream_dep-1.0.0-py3-none-any.whl"
    status, _, body = index.get("/simple/upstream-dep/", {"Accept": "text/html"})
    assert status == 200 and b"upstream_dep-1.0.0-py3-none-any.whl" in body
    done = _pip_download(index, "upstream-dep", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "upstream_dep-1.0.0-py3-none-any.whl").is_file()
    # The project list is this index's own.
    assert b"upstream-dep" not in index.get("/simple/")[2]


def test_a_hosted_name_is_never_looked_up_upstream(index: Market, tmp_path: Path) -> None:
    made = tmp_path / "made"
    made.mkdir()
    wheel = handmade_wheel(made, "opm-shadow", "1.0.0", {})
    done = index.cli("host", str(wheel))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"hosted: {wheel.name}"
    assert index.cli("host", str(wheel)).stdout.strip() == f"already hosted: {wheel.name}"
    status, _, body = index.get("/simple/opm-shadow/")
    assert status == 200 and wheel.name.encode() in body and b"9.0.0" not in body
    got = _pip_download(index, "opm-shadow", tmp_path / "dl")
    assert got.returncode == 0, got.stdout + got.stderr
    assert [p.name for p in (tmp_path / "dl").iterdir()] == [wheel.name]  # not upstream's 9.0.0
    package = index.json("/api/packages/opm-shadow")
    assert package["status"] == "hosted" and package["owner"] == "(operator)"
    assert package["files"][0]["status"] == "hosted"
    assert package["files"][0]["python_tag"] == "py3"
    assert package["files"][0]["platform_tag"] == "any"
    page = index.get("/project/opm-shadow/")[2].decode()
    assert "no plugin validation" in page


def test_uploads_cannot_claim_hosted_or_upstream_names(index: Market, tmp_path: Path) -> None:
    made = tmp_path / "made"
    made.mkdir()
    hosted = handmade_wheel(made, "opm-hosted", "1.0.0", {})
    assert index.cli("host", str(hosted)).returncode == 0
    claim = handmade_wheel(made, "opm-hosted", "2.0.0", {})
    done = twine(index, index.tokens["alice"], claim)
    assert done.returncode == 1
    assert "403" in done.stdout and "hosted by this index's operator" in done.stdout
    shadow = handmade_wheel(made, "upstream-dep", "2.0.0", {})
    done = twine(index, index.tokens["alice"], shadow)
    assert done.returncode == 1
    assert "exists on the upstream index" in done.stdout
    assert index.get("/api/packages/upstream-dep")[0] == 404


def test_host_refuses_what_is_not_a_wheel_or_belongs_to_an_uploader(
    uploaded: Market, tmp_path: Path
) -> None:
    bad = tmp_path / "opm_bad-1.0.0-py3-none-any.whl"
    bad.write_bytes(b"not a zip")
    done = uploaded.cli("host", str(bad))
    assert done.returncode == 2 and "not a zip archive" in done.stderr
    taken = handmade_wheel(tmp_path, "opm-double", "7.0.0", {})
    done = uploaded.cli("host", str(taken))
    assert done.returncode == 2 and "was uploaded by user 'alice'" in done.stderr


def _status(index: Market, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [OPMARKET, "status", *args, "--index-url", f"{index.url}/simple/"],
        capture_output=True,
        text=True,
        env=clean_env(),
        check=False,
        timeout=300,
    )


def test_status_tells_the_verdict(index: Market, wheels: Wheels) -> None:
    # --upload-wait 0: the upload answers "pending" at once; status --wait waits.
    done = twine(index, index.tokens["bob"], wheels.wrong)
    assert done.returncode == 0, done.stdout
    assert '"status": "pending"' in done.stdout
    told = _status(index, "opm-wrong==1.0", "--wait")
    assert told.returncode == 1, told.stdout + told.stderr
    assert told.stdout.startswith(f"{wheels.wrong.name}: rejected")
    assert "differs from the reference" in told.stdout
    assert twine(index, index.tokens["alice"], wheels.double_1_0).returncode == 0
    told = _status(index, "opm-double==1.0.0", "--wait")
    assert (told.returncode, told.stdout) == (0, f"{wheels.double_1_0.name}: validated\n")
    unknown = _status(index, "opm-double==3.0")
    assert unknown.returncode == 2 and "no release 3.0 of 'opm-double'" in unknown.stderr
    assert _status(index, "opm-double").returncode == 2
    log = (index.data / "server.log").read_text()
    assert f"upload {wheels.wrong.name} by bob: uploaded, validation queued" in log
    assert f"verdict {wheels.wrong.name}: rejected: conformance: " in log


def _opmarket_build(project: Path, out: Path, *flags: str, env: dict[str, str]) -> Path:
    done = subprocess.run(
        [OPMARKET, "build", *flags, "-o", str(out), str(project)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    return wheel


@pytest.fixture(scope="module")
def hosted_opmarket(index: Market, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """opmarket's own wheel, built as the index takes it and hosted there."""
    out = tmp_path_factory.mktemp("opmarket")
    wheel = _opmarket_build(ROOT, out, "--no-isolation", env=clean_env())
    assert "manylinux" in wheel.name  # the index takes no plain linux_x86_64 wheel
    assert index.cli("host", str(wheel)).returncode == 0
    return wheel


@pytest.mark.parametrize(
    ("kernel", "name"), [("cpp", "acme-clip"), ("c", "bolt-clip"), ("python", "core-clip")]
)
def test_an_author_goes_from_opmarket_new_to_a_bare_venv_running_the_op(
    index: Market, hosted_opmarket: Path, tmp_path: Path, kernel: str, name: str
) -> None:
    """The road of a new plugin: `opmarket new`, an isolated build whose requirements
    (opmarket hosted here; setuptools, pybind11 and opmarket's dependencies from the
    upstream) come through this index, upload with the verdict as the answer, and `pip
    install` into a venv that has only pip."""
    project = tmp_path / name
    made = subprocess.run(
        [OPMARKET, "new", name, "--kernel", kernel, "-o", str(project)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    isolated = clean_env(PIP_INDEX_URL=f"{index.url}/simple/", PIP_NO_CACHE_DIR="1")
    wheel = _opmarket_build(project, tmp_path / "dist", env=isolated)
    assert ("none-any" if kernel == "python" else "manylinux") in wheel.name, wheel.name
    done = twine(index, index.tokens["alice"], wheel)
    assert done.returncode == 0, done.stdout
    verdict = _status(index, f"{name}==0.1.0", "--wait")
    assert verdict.returncode == 0, verdict.stdout + verdict.stderr
    venv.create(tmp_path / "venv", with_pip=True)  # only pip
    python = tmp_path / "venv" / "bin" / "python"
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "--index-url", f"{index.url}/simple/", name],
        capture_output=True,
        text=True,
        env=clean_env(),
        check=False,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    run_op = (
        "import numpy, opmarket; "
        "print(opmarket.ops.clip(numpy.array([-2.0, 3.0, 9.0]), clip_max=5.0).tolist())"
    )
    ran = subprocess.run(
        [str(python), "-c", run_op],
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=tmp_path,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "[0.0, 3.0, 5.0]"
    # The catalog: the README rendered and sanitized, the Python call, the wheel's tags.
    page = index.get(f"/project/{name}/")[2].decode()
    assert '<div class="readme">' in page and "<h1" in page.split('<div class="readme">')[1]
    assert '<code class="python">clip(' in page
    package = index.json(f"/api/packages/{name}")
    assert package["op_details"][0]["python"] == "clip(x, *, clip_min=0.0, clip_max=6.0)"
    assert package["files"][0]["python_tag"] == wheel.name.split("-")[2]
