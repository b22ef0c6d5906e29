"""Hostile uploads, replayed: each attack of the campaign runs as a real plugin wheel through
the real validation pipeline (and, for a killed server, real ``opmarket serve`` and
``opmarket worker`` processes), and each is held. The wheels are built once per session.

Attacks on host settings write the value the host already has (so a sandbox that failed
would change nothing) and the tests check that the write was refused and the value is the
same afterwards."""

from __future__ import annotations

import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from opmarket.web import Limits, Verdict, validate_wheel
from opmarket.web.sandbox._run import _interpreter_paths, sandbox_problem

from .conftest import OPMARKET, Market, _wait_up, clean_env, start_serve, twine
from .plugins import build_plugin, plugin_source
from .test_sandbox import processes_with, wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(sandbox_problem(Limits())), reason="no sandbox here"),
]

OP = "Test>Hostile"
GOOD = plugin_source(OP, 2)
TAG = uuid.uuid4().hex[:8]
SOCKET = f"/tmp/opmarket-hostile-{TAG}.sock"
DATA = Path(f"/tmp/opmarket-hostile-{TAG}-data")  # "the server's data" the plugin looks for
PUBLIC = set(_interpreter_paths(sys.executable))  # what the sandbox shows of the interpreter

ATTACKS = {
    # 1. core_pattern (same value back), hostname, /dev/kmsg, then a crash that would run it.
    "escape": """
import ctypes, os, socket, sys
for path in ("/proc/sys/kernel/core_pattern", "/proc/sys/kernel/hostname", "/dev/kmsg"):
    try:
        value = open(path).read() if "sys" in path else ""
        with open(path, "w") as f:
            f.write(value)
        print("ESCAPED", path, file=sys.stderr)
    except OSError as e:
        print("refused", path, e.strerror, file=sys.stderr)
try:
    socket.sethostname(socket.gethostname())
    print("ESCAPED sethostname", file=sys.stderr)
except OSError as e:
    print("refused sethostname", e.strerror, file=sys.stderr)
if os.fork() == 0:
    ctypes.string_at(0)
os.wait()
""",
    # 2. a host Unix socket
    "socket": f"""
import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect({SOCKET!r}); s.sendall(b"from the sandbox")
    print("ESCAPED connected", file=sys.stderr)
except OSError as e:
    print("refused socket", e.strerror, file=sys.stderr)
""",
    # 3. the server's data: the database and another user's never-public wheel (the
    # interpreter's own folders, read-only code that may lie under /tmp, are not searched)
    "snoop": f"""
import os, sys
for root in ({str(DATA)!r}, "/home", "/var", "/srv", "/run", "/tmp", "/job"):
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if os.path.join(folder, d) not in {PUBLIC!r}]
        for name in files:
            path = os.path.join(folder, name)
            try:
                print("READ", path, open(path, "rb").read(200), file=sys.stderr)
            except OSError as e:
                print("refused", path, e.strerror, file=sys.stderr)
print("snooped", os.path.exists({str(DATA)!r}), os.listdir("/root"), file=sys.stderr)
""",
    # 4. memory of the whole job (children), and the disk
    "memory": """
import os, sys, time
pids = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        b = bytearray(300 * 2**20)
        for i in range(0, len(b), 4096):
            b[i] = 1
        time.sleep(2)
        os._exit(0)
    pids.append(pid)
print("children", [os.waitpid(p, 0)[1] & 0x7f for p in pids], file=sys.stderr)
try:
    with open("fill", "wb") as f:
        for _ in range(4096):
            f.write(b"x" * 2**20)
    print("ESCAPED wrote 4 GiB", file=sys.stderr)
except OSError as e:
    print("refused disk", e.strerror, file=sys.stderr)
os.remove("fill")
""",
    "allocation": "b = bytearray(2 * 2**30)\nfor i in range(0, len(b), 4096):\n    b[i] = 1\n",
    # 5. a malformed report ("ops": ["x"]) on the report pipe, then gone
    "malformed": """
import fcntl, json, os, stat
def report_pipe(fd):  # the one pipe it may write besides its stdout and stderr
    try:
        st, flags = os.fstat(fd), fcntl.fcntl(fd, fcntl.F_GETFL)
    except OSError:
        return False
    return fd > 2 and stat.S_ISFIFO(st.st_mode) and flags & os.O_ACCMODE == os.O_WRONLY
(fd,) = [int(f) for f in os.listdir("/proc/self/fd") if report_pipe(int(f))]
os.write(fd, json.dumps({"steps": [{"name": "load", "status": "passed", "log": []}],
                         "ops": ["x"]}).encode())
os._exit(0)
""",
    # Also: a fake passing verdict, printed, and written to every descriptor it can find
    # (its own, and the harness's through /proc), then gone before the harness reports.
    "fake": """
import glob, json, os, sys
fake = json.dumps({"secret": "0" * 64, "returncode": 0, "protected": True, "report": {
    "steps": [{"name": "conformance", "status": "passed", "log": []}]}})
print("RESULT " + json.dumps({"status": "validated"}), flush=True)
for path in glob.glob("/proc/*/fd/*"):
    if path.startswith(("/proc/self/", "/proc/thread-self/", f"/proc/{os.getpid()}/")):
        continue
    try:
        with open(path, "w") as f:
            f.write(fake)
        print("ESCAPED wrote", path, file=sys.stderr)
    except OSError as e:
        pass
for fd in range(3, 64):
    try:
        os.write(fd, fake.encode())
    except OSError:
        pass
sys.stderr.flush()
os._exit(0)
""",
    # 9. a relative path in its work folder
    "relative": "open('notes.txt', 'w').write('fine')\nassert open('notes.txt').read() == 'fine'\n",
}


@pytest.fixture(scope="session")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("hostile-wheels")
    return {
        name: build_plugin(
            d, f"opm-{name}", "1.0.0", op_name=OP, source=GOOD + code, manifest_source=GOOD
        )
        for name, code in ATTACKS.items()
    }


def validate(wheel: Path, **limits: object) -> Verdict:
    return validate_wheel(wheel, limits=Limits(**{"timeout_s": 60, **limits}))  # type: ignore[arg-type]


def test_kernel_settings_hostname_and_kmsg_are_refused(hostile: dict[str, Path]) -> None:
    before = (Path("/proc/sys/kernel/core_pattern").read_text(), socket.gethostname())
    verdict = validate(hostile["escape"])
    log = verdict.log_text()
    assert "ESCAPED" not in log
    assert log.count("refused") == 4, log
    assert (Path("/proc/sys/kernel/core_pattern").read_text(), socket.gethostname()) == before
    assert verdict.status == "validated", log  # contained, not a failure of the plugin


def test_a_host_unix_socket_is_out_of_reach(hostile: dict[str, Path]) -> None:
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(SOCKET)
    listener.listen(1)
    listener.setblocking(False)
    try:
        log = validate(hostile["socket"]).log_text()
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()
        os.unlink(SOCKET)
    assert "refused socket No such file or directory" in log and "ESCAPED" not in log


@pytest.fixture
def server_data() -> Iterator[Path]:
    (DATA / "files").mkdir(parents=True)
    with sqlite3.connect(DATA / "opmarket.sqlite3") as db:
        db.execute("CREATE TABLE tokens (user TEXT, digest TEXT)")
        db.execute("INSERT INTO tokens VALUES ('bob', 'digest-of-bobs-token')")
    db.close()
    (DATA / "files" / "bobs_rejected-1.0-py3-none-any.whl").write_bytes(b"bob's secret wheel")
    yield DATA
    for path in sorted(DATA.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    DATA.rmdir()


def test_the_servers_data_and_other_users_files_are_invisible(
    hostile: dict[str, Path], server_data: Path
) -> None:
    log = validate(hostile["snoop"]).log_text()
    assert "snooped False" in log
    assert "digest-of-bobs-token" not in log and "bob's secret wheel" not in log
    # Its own folder only: nothing under /home, /var, /srv, /run or /tmp; of /root, only
    # the interpreter's folder where the interpreter lives there.
    assert [line for line in log.splitlines() if "READ" in line and "/job/" not in line] == []
    listed = re.search(r"snooped False (\[.*\])", log)
    assert listed is not None and set(eval(listed.group(1))) <= {".pyenv", ".local"}


def test_memory_is_bounded_for_the_whole_job_and_the_disk_too(hostile: dict[str, Path]) -> None:
    verdict = validate(hostile["memory"], memory_mb=512, disk_mb=64)
    log = verdict.log_text()
    assert "refused disk No space left on device" in log and "ESCAPED" not in log
    killed = re.search(r"children \[([\d, ]+)\]", log)
    assert killed is not None, log
    peak = re.search(r"peak memory of the whole job (\d+) MiB", log)
    if peak is not None:  # with a memory cgroup (else each process has its own bound)
        assert int(peak.group(1)) <= 512
        assert "9" in killed.group(1).split(", ")  # at least one child hit the job's bound


def test_one_big_allocation_fails_alone(hostile: dict[str, Path]) -> None:
    verdict = validate(hostile["allocation"], memory_mb=512)
    assert verdict.status == "rejected"
    assert "killed by signal SIGKILL" in verdict.log_text() or "MemoryError" in (verdict.log_text())


def test_a_malformed_report_rejects_with_the_reason(hostile: dict[str, Path]) -> None:
    verdict = validate(hostile["malformed"])
    assert verdict.status == "rejected"
    (failed,) = verdict.failures
    assert "sent a malformed report: each of ops must be an object of strings" in failed.log[0]
    assert "'x'" in failed.log[0]


def test_a_fake_verdict_from_the_plugin_is_not_believed(hostile: dict[str, Path]) -> None:
    verdict = validate(hostile["fake"])
    log = verdict.log_text()
    assert verdict.status == "rejected", log
    assert "ESCAPED" not in log  # not even the harness's descriptors through /proc
    (failed,) = verdict.failures
    # Its own report pipe got the fake: it is the plugin's word, and not even well-formed.
    assert failed.name == "load", log


def test_relative_paths_in_the_work_folder_work(hostile: dict[str, Path]) -> None:
    verdict = validate(hostile["relative"])
    assert verdict.status == "validated", verdict.log_text()


def _serve(data: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    served = start_serve(["--data", str(data), "--validation-workers", "1"], env)
    _wait_up(served.url, served.proc)
    return served.proc, served.url


def test_a_killed_servers_job_is_taken_over_and_its_sandbox_is_gone(
    tmp_path: Path, hostile: dict[str, Path]
) -> None:
    timeout = 4
    # The upload answers at once (no wait for the verdict): the server is killed meanwhile.
    env = clean_env(OPMARKET_VALIDATION_TIMEOUT_S=str(timeout), OPMARKET_UPLOAD_WAIT_S="0")
    data = tmp_path / "market"
    subprocess.run(
        [OPMARKET, "users", "add", "alice", "--data", str(data)],
        check=True,
        capture_output=True,
        env=env,
    )
    wheel = hostile["memory"]  # runs a few seconds: long enough to be killed in the middle
    others = processes_with("/input/probe.py")  # other tests' servers' started sandboxes
    server, url = _serve(data, env)
    worker = None
    try:
        market = Market(url, data, server)
        done = market.cli("tokens", "create", "alice")
        assert twine(market, done.stdout.strip().splitlines()[-1], wheel).returncode == 0

        # its job taken (the worker thread's sandbox, started before, then has it: it runs
        # for a few seconds)
        def running() -> bool:
            with sqlite3.connect(data / "opmarket.sqlite3") as db:
                rows = db.execute("SELECT status FROM jobs").fetchall()
            db.close()
            return rows == [("running",)]

        wait_for(running)
        server.send_signal(signal.SIGKILL)
        server.wait()
        killed = time.monotonic()
        wait_for(lambda: not processes_with("/input/probe.py", besides=others), timeout=10)
        orphans_gone_s = time.monotonic() - killed
        with sqlite3.connect(data / "opmarket.sqlite3") as db:
            assert db.execute("SELECT status FROM jobs").fetchall() == [("running",)]
        db.close()
        # Another process takes the job over while it runs (its lease is still fresh now).
        worker = subprocess.Popen(
            [OPMARKET, "worker", "--data", str(data)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )

        def requeued() -> bool:
            with sqlite3.connect(data / "opmarket.sqlite3") as db:
                row = db.execute("SELECT attempts FROM jobs").fetchone()
            db.close()
            return bool(row) and row[0] == 2

        wait_for(requeued, timeout=10 * timeout)
        requeued_s = time.monotonic() - killed

        def decided() -> bool:
            with sqlite3.connect(data / "opmarket.sqlite3") as db:
                row = db.execute("SELECT status FROM files").fetchone()
            db.close()
            return bool(row) and row[0] != "pending"

        wait_for(decided, timeout=10 * timeout)
        decided_s = time.monotonic() - killed
    finally:
        server.kill()
        server.wait()
        if worker is not None:
            worker.terminate()
            worker.wait(30)
    print(
        f"sandbox gone {orphans_gone_s:.1f} s, job taken over {requeued_s:.1f} s, file "
        f"decided {decided_s:.1f} s after kill -9 (timeout {timeout} s)"
    )
    assert orphans_gone_s < timeout
    assert requeued_s < 2 * timeout + 2  # 4/3 of a lease (one timeout), the worker's start
    assert decided_s < 3 * timeout + 5  # lease (one timeout) + reclaim + one validation
    with sqlite3.connect(data / "opmarket.sqlite3") as db:
        assert db.execute("SELECT status, attempts FROM jobs").fetchall() == [("done", 2)]
    db.close()
    assert not list(Path("/sys/fs/cgroup").glob(f"*/**/opmarket-{server.pid}-*"))
    assert not list(Path(tempfile.gettempdir()).glob(f"opmarket-job-{server.pid}-*"))
