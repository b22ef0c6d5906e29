"""``opmarket validate`` runs the server's pipeline locally, with the same verdict; the
users/tokens commands behave as scripts expect."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from .conftest import OPMARKET, Market, Wheels, _wait_up, clean_env, start_serve, twine


def validate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [OPMARKET, "validate", *args],
        capture_output=True,
        text=True,
        env=clean_env(),
        check=False,
        timeout=300,
    )


def test_a_good_plugin_validates(wheels: Wheels) -> None:
    done = validate(str(wheels.double_1_0))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"{wheels.double_1_0.name}: validated")
    assert "[passed] conformance" in done.stdout


@pytest.mark.slow
def test_same_verdict_as_the_server(market: Market, wheels: Wheels) -> None:
    assert twine(market, market.tokens["bob"], wheels.wrong).returncode == 1  # rejected
    served = market.wait_for("opm-wrong", wheels.wrong.name)
    done = validate(str(wheels.wrong), "--json")
    assert done.returncode == 1
    local = json.loads(done.stdout)
    assert local["status"] == served["status"] == "rejected"
    assert [(s["name"], s["status"]) for s in local["steps"]] == [
        (s["name"], s["status"]) for s in served["steps"]
    ]


def test_version_policy_against_a_previous_release(wheels: Wheels) -> None:
    done = validate(str(wheels.double_breaking), "--previous", str(wheels.double_1_0))
    assert done.returncode == 1
    assert "[failed] version policy" in done.stdout and "2.0.0" in done.stdout
    done = validate(str(wheels.double_1_1), "--previous", str(wheels.double_1_0))
    assert done.returncode == 0, done.stdout


def test_unreadable_input_is_a_usage_error(tmp_path: Path) -> None:
    done = validate(str(tmp_path / "missing.whl"))
    assert done.returncode == 2 and "no such file" in done.stderr


@pytest.mark.slow
def test_users_and_tokens(tmp_path: Path) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [OPMARKET, *args, "--data", str(tmp_path)],
            capture_output=True,
            text=True,
            env=clean_env(),
            check=False,
        )

    assert cli("users", "add", "carol").returncode == 0
    again = cli("users", "add", "carol")
    assert again.returncode == 2 and "exists already" in again.stderr
    made = cli("tokens", "create", "carol", "--project", "Opm_Thing")
    assert made.returncode == 0
    token = made.stdout.strip().splitlines()[-1]
    assert token.startswith("opm-") and len(token) > 40
    # Only the hash is stored.
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("opmarket.sqlite3*"))
    assert token.encode() not in stored and b"carol" in stored
    missing = cli("tokens", "create", "nobody-here")
    assert missing.returncode == 2 and "no user" in missing.stderr


def test_validate_needs_no_server_dependencies(wheels: Wheels) -> None:
    """Plugin authors run it without opmarket[web]: nothing of the server is imported."""
    code = (
        "import sys\nfrom opmarket.cli import main\n"
        f"try:\n    main(['validate', {str(wheels.double_1_0)!r}])\n"
        "except SystemExit as e:\n    code = e.code\n"
        "heavy = sorted(m for m in ('fastapi', 'sqlalchemy', 'starlette', 'uvicorn', 'jinja2',"
        " 'alembic') if m in sys.modules)\n"
        "print('EXIT', code, 'HEAVY', heavy)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=clean_env(),
        check=False,
        cwd="/",
        timeout=300,
    )
    assert "EXIT 0 HEAVY []" in done.stdout, done.stdout + done.stderr


def test_validate_runs_where_the_web_extra_is_missing(wheels: Wheels) -> None:
    """An author's machine without opmarket[web] (no pydantic): the server's default limits."""
    code = (
        "import sys\nsys.modules['pydantic'] = None  # as if not installed\n"
        "from opmarket.cli import main\n"
        f"main(['validate', {str(wheels.double_1_0)!r}])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=clean_env(),
        check=False,
        cwd="/",
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "validated" in done.stdout and "Traceback" not in done.stderr


def test_an_unusable_data_folder_is_a_one_line_error() -> None:
    done = subprocess.run(
        [OPMARKET, "users", "add", "x", "--data", "/proc/opmarket-nope"],
        capture_output=True,
        text=True,
        env=clean_env(),
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("opmarket: error: --data /proc/opmarket-nope")
    assert done.stderr.count("\n") == 1


def test_serve_on_a_busy_port_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run(
            [OPMARKET, "serve", "--port", str(port), "--data", str(tmp_path)],
            capture_output=True,
            text=True,
            env=clean_env(),
            check=False,
            timeout=120,
        )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"opmarket: error: cannot listen on 127.0.0.1:{port}: Address already in use; "
        "choose another port with --port N"
    ]


def test_serve_on_port_0_says_the_port_it_bound_and_answers_there(tmp_path: Path) -> None:
    served = start_serve(["--data", str(tmp_path)], clean_env(), tmp_path / "serve.log")
    try:
        port = int(served.url.rpartition(":")[2])
        assert port != 0, served.url
        _wait_up(served.url, served.proc)  # up once it answers there
        with urllib.request.urlopen(f"{served.url}/simple/", timeout=30) as r:
            assert r.status == 200
    finally:
        served.stop()
    said = (tmp_path / "serve.log").read_text().splitlines()
    assert said[0] == f"opmarket: serving {tmp_path} on http://127.0.0.1:{port}/", said


def _no_ipv6_loopback() -> str:
    """Why this machine cannot listen on ::1 ("" when it can)."""
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError as exc:
        return f"no IPv6 loopback here: {exc}"
    return ""


@pytest.mark.skipif(bool(_no_ipv6_loopback()), reason=_no_ipv6_loopback() or "-")
def test_serve_on_an_ipv6_host_says_a_url_with_the_host_in_brackets(tmp_path: Path) -> None:
    served = start_serve(
        ["--host", "::1", "--data", str(tmp_path)], clean_env(), tmp_path / "serve.log"
    )
    try:
        port = int(served.url.rpartition(":")[2])
        assert served.url == f"http://[::1]:{port}", served.url
        _wait_up(served.url, served.proc)
        with urllib.request.urlopen(f"{served.url}/simple/", timeout=30) as r:
            assert r.status == 200
    finally:
        served.stop()


def test_ctrl_c_stops_the_server_without_abort_noise(tmp_path: Path) -> None:
    served = start_serve(["--data", str(tmp_path)], clean_env(), tmp_path / "serve.log")
    try:
        _wait_up(served.url, served.proc)  # up once it answers; then Ctrl-C, as a terminal
        served.proc.send_signal(signal.SIGINT)
        assert served.proc.wait(60) == 0
    finally:
        served.stop()
    said = (tmp_path / "serve.log").read_text()
    assert said.startswith("opmarket: serving "), said
    assert "Aborted!" not in said, said
    assert "Traceback" not in said, said


def test_serve_has_an_option_for_each_setting_marked_as_a_flag() -> None:
    """The options are made from the settings model: each marked setting is one, named after
    it, with its variable and default in its help; nothing else is (but --data, --demo)."""
    from opmarket.web._settings import FLAG, Settings

    done = subprocess.run(
        [OPMARKET, "serve", "--help"], capture_output=True, text=True, env=clean_env(), check=True
    )
    text = " ".join(done.stdout.split())
    options = {line.split()[0] for line in done.stdout.splitlines() if line.startswith("  --")}
    flagged = {n: f for n, f in Settings.model_fields.items() if FLAG in f.metadata}
    assert options == {
        "--data",
        "--demo",
        *("--" + n.removesuffix("_s").replace("_", "-") for n in flagged),
    }
    for name, field in flagged.items():
        assert f"{field.description} [env OPMARKET_{name.upper()}; default " in text, name
    assert "[env OPMARKET_MAX_UPLOAD_BYTES; default 100 MiB]" in text
    assert "[env OPMARKET_HEADER_TIMEOUT_S; default 10]" in text


def test_a_serve_option_wins_over_its_variable(tmp_path: Path) -> None:
    """--max-headers 8 with OPMARKET_MAX_HEADERS=100: a request with 12 headers gets 431."""
    import http.client

    env = clean_env(OPMARKET_MAX_HEADERS="100")
    served = start_serve(["--data", str(tmp_path), "--max-headers", "8"], env)
    try:
        _wait_up(served.url, served.proc)  # urllib sends 4 headers: under the limit
        host, _, port = served.url.removeprefix("http://").partition(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        conn.request("GET", "/simple/", headers={f"X-Extra-{i}": "1" for i in range(8)})
        assert conn.getresponse().status == 431
        conn.close()
    finally:
        served.stop()
