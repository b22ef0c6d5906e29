"""The S3-compatible store, against moto's S3 server (a real HTTP server speaking S3's API
on 127.0.0.1; see docs/marketplace.md for why moto): the storage interface, and a
marketplace whose files live there, installed from with pip through presigned redirects."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from opmarket.web.storage._local import StorageError
from opmarket.web.storage._open import storage_from_url
from opmarket.web.storage._s3 import S3FileStore

from .conftest import BIN, Market, Wheels, clean_env, start_market, twine

# boto3 and moto[server] are in the dev extra, as pytest is: no skip for their absence.
MOTO = shutil.which("moto_server", path=str(BIN)) or shutil.which("moto_server")

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "opmarket-test",
    "AWS_SECRET_ACCESS_KEY": "opmarket-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto's S3 server on 127.0.0.1, on a port it chose itself (port 0, which it reports:
    no other process can take it in between), stopped at the end of the module."""
    assert MOTO is not None
    log = open(tmp_path_factory.mktemp("moto") / "moto.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [MOTO, "-H", "127.0.0.1", "-p", "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    assert proc.stdout is not None
    # Its request log goes on to the file, so that a full pipe never stalls it.
    drain = threading.Thread(target=shutil.copyfileobj, args=(proc.stdout, log), daemon=True)
    try:
        # Werkzeug prints where it listens once the socket is bound: the end of the wait.
        url = ""
        for line in proc.stdout:
            log.write(line)
            found = re.search(rb"Running on (http://127\.0\.0\.1:\d+)", line)
            if found:
                url = found.group(1).decode()
                break
        assert url, f"moto did not start (exit {proc.poll()}); see {log.name}"
        drain.start()
        yield url
    finally:
        proc.terminate()
        proc.wait(15)
        if drain.is_alive():
            drain.join(15)  # the pipe ends with the process
        proc.stdout.close()
        log.close()


def _bucket(endpoint: str, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    client.create_bucket(Bucket=name)
    client.close()


def test_the_storage_interface_on_s3(
    s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _bucket(s3_endpoint, "unit", monkeypatch)
    store = storage_from_url(f"s3://unit/blobs?endpoint_url={s3_endpoint}&region=us-east-1")
    data = bytes(range(256)) * 2000  # 512,000 bytes: two chunks and a bit
    key = store.put_bytes(data)
    assert key == hashlib.sha256(data).hexdigest()
    assert store.put_bytes(data) == key  # written once
    assert store.size(key) == len(data)
    assert b"".join(store.read(key)) == data
    assert b"".join(store.read(key, 1000, 300_000)) == data[1000:300_000]
    assert b"".join(store.read(key, 511_000)) == data[511_000:]
    path = tmp_path / "blob"
    path.write_bytes(b"another blob")
    other = hashlib.sha256(b"another blob").hexdigest()
    store.put_file(path, other)
    assert b"".join(store.read(other)) == b"another blob"
    assert store.local_path(key) is None
    url = store.download_url(key)
    assert url is not None and url.startswith(f"{s3_endpoint}/unit/blobs/")
    with urllib.request.urlopen(url, timeout=10) as r:  # presigned: no credentials needed
        assert r.read() == data
    store.delete(other)
    store.delete(other)  # gone already: no error
    with pytest.raises(StorageError, match=f"no blob {other}"):
        store.read(other)
    with pytest.raises(StorageError, match="no blob"):
        store.size(other)
    with pytest.raises(StorageError, match="not a sha256 key"):
        store.size("../etc/passwd")
    streaming = storage_from_url(f"s3://unit/blobs?endpoint_url={s3_endpoint}&redirect=0")
    assert streaming.download_url(key) is None
    for s3 in (store, streaming):
        assert isinstance(s3, S3FileStore)
        s3.client.close()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("s3:///nobucket", "no bucket"),
        ("s3://b?color=red", "unknown parameter"),
        ("s3://b?redirect=yes", "redirect must be 0 or 1"),
        ("ftp://host/x", "use file:///path or s3://"),
    ],
)
def test_bad_storage_urls_are_refused_with_the_url(url: str, message: str) -> None:
    with pytest.raises(StorageError, match=message) as info:
        storage_from_url(url)
    assert url in str(info.value)


@pytest.fixture
def s3_market(
    s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Market]:
    _bucket(s3_endpoint, "market", monkeypatch)
    yield from start_market(
        tmp_path / "market",
        validation_workers=1,
        env={
            **CREDENTIALS,
            "OPMARKET_STORAGE_URL": f"s3://market/files?endpoint_url={s3_endpoint}",
        },
    )


@pytest.mark.slow
def test_a_market_on_s3_validates_and_pip_installs_through_the_redirect(
    s3_market: Market, wheels: Wheels, tmp_path: Path
) -> None:
    market = s3_market
    assert twine(market, market.tokens["alice"], wheels.double_1_0).returncode == 0
    entry = market.wait_for("opm-double", wheels.double_1_0.name)
    assert entry["status"] == "validated", entry["log"]  # the worker read it from S3
    assert market.blobs() == set()  # nothing in the local data folder's store
    sha = hashlib.sha256(wheels.double_1_0.read_bytes()).hexdigest()
    opener = urllib.request.build_opener(_NoRedirect())
    with pytest.raises(urllib.error.HTTPError) as answer:
        opener.open(f"{market.url}/files/{sha}/{wheels.double_1_0.name}", timeout=10)
    answer.value.close()
    assert answer.value.code == 302
    assert "X-Amz-Signature=" in answer.value.headers["Location"]
    done = subprocess.run(
        [
            str(BIN / "python"),
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--index-url",
            f"{market.url}/simple/",
            "--dest",
            str(tmp_path / "got"),
            "opm-double==1.0.0",
        ],
        capture_output=True,
        text=True,
        env=clean_env(),
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr  # pip checked the sha256 too
    got = tmp_path / "got" / wheels.double_1_0.name
    assert got.read_bytes() == wheels.double_1_0.read_bytes()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *_args: object, **_kwargs: object) -> None:
        return None
