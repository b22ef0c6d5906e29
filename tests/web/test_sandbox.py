"""The sandbox holds: who it runs as (read from outside), what it sees, what it may write,
what it can reach, how much it may use, and that nothing of it outlives its time or its
supervisor. Real bwrap, real processes, real control groups."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Collection, Iterator
from pathlib import Path

import pytest

from opmarket.web import Limits
from opmarket.web.sandbox._cgroup import create_job_cgroup, sweep_stale
from opmarket.web.sandbox._run import (
    Outcome,
    SandboxUnavailableError,
    _interpreter_paths,
    run_sandboxed,
    sandbox_problem,
)

ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
needs_bwrap = pytest.mark.skipif(
    bool(sandbox_problem(Limits())), reason=f"no sandbox here: {sandbox_problem(Limits())}"
)


def _group_ok() -> bool:
    group = create_job_cgroup(64, 16, 1.0)
    if group is None:
        return False
    ok = any("memory" in e for e in group.enforced) and any("process" in e for e in group.enforced)
    group.destroy()
    return ok


needs_cgroup = pytest.mark.skipif(not _group_ok(), reason="no writable memory+pids cgroup")


def run(code: str, **limits: object) -> Outcome:
    return run_sandboxed(
        [sys.executable, "-I", "-c", code],
        limits=Limits(**limits),  # type: ignore[arg-type]
        interpreter=sys.executable,
        env=ENV,
    )


def processes_with(marker: str, *, besides: Collection[int] = ()) -> list[int]:
    """Host pids of the interpreters whose command line holds ``marker``, less those in
    ``besides`` (taken before a test starts its own: every validation worker of another
    test's server keeps a sandbox started ahead, its ``/input/probe.py`` waiting)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in besides:
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0] == sys.executable.encode() and marker.encode() in b" ".join(argv):
            found.append(int(entry.name))
    return found


def wait_for(predicate: object, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


@needs_bwrap
def test_a_well_behaved_command_runs_and_writes_relative_paths() -> None:
    out = run(
        "open('rel.txt', 'w').write('x'); import os\nprint(open('rel.txt').read(), os.getcwd())",
        timeout_s=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == b"x /job\n" and not out.problem


@needs_bwrap
def test_it_runs_as_a_host_user_that_is_not_root_read_from_outside() -> None:
    marker = f"uid-probe-{uuid.uuid4().hex}"
    result: list[Outcome] = []
    worker = threading.Thread(
        target=lambda: result.append(
            run(f"import time  # {marker}\ntime.sleep(120)", timeout_s=120)
        )
    )
    worker.start()
    try:
        wait_for(lambda: processes_with(marker))
        (pid,) = processes_with(marker)
        status = Path(f"/proc/{pid}/status").read_text()
    finally:
        for pid in processes_with(marker):
            os.kill(pid, signal.SIGKILL)
        worker.join(60)
    uids = next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1:]
    caps = next(line for line in status.splitlines() if line.startswith("CapEff:")).split()[1]
    assert "0" not in uids, status
    assert int(caps, 16) == 0
    if os.geteuid() == 0:
        assert set(uids) == {"65534"}  # nobody
    assert result and result[0].problem == "killed by signal SIGKILL"


@needs_bwrap
@pytest.mark.skipif(
    not Path("/etc/ld.so.cache").exists(), reason="this system has no /etc/ld.so.cache"
)
def test_the_job_can_read_the_dynamic_linkers_cache() -> None:
    # The job runs as a user that is not root; the linker cache must be readable to it, or
    # every library a plugin loads by soname is looked up without the cache.
    out = run(
        "import os\nprint(oct(os.stat('/etc').st_mode & 0o777))\n"
        "print(len(open('/etc/ld.so.cache', 'rb').read(16)))",
        timeout_s=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [b"0o755", b"16"]


@needs_bwrap
def test_it_sees_only_what_it_needs(tmp_path: Path) -> None:
    secret = tmp_path / "server-data.txt"
    secret.write_text("token digests")
    code = (
        f"import os\nprint(os.path.exists({str(secret)!r}), "
        f"os.path.exists({str(tmp_path)!r}))\n"
        "print(sorted(os.listdir('/')))\nprint(sorted(os.listdir('/tmp')))\n"
        "print([p for p in ('/run', '/var', '/home', '/etc/passwd', '/etc/shadow') "
        "if os.path.exists(p)])\n"
    )
    out = run(code, timeout_s=60)
    assert out.returncode == 0, out.stderr
    seen, top, tmp, others = out.stdout.decode().splitlines()
    assert seen == "False False"
    # A private /tmp, not the host's: empty but for the way to the interpreter's folders,
    # read-only, where they lie under the host's /tmp (a checkout or venv under /tmp).
    assert eval(tmp) == sorted(
        {Path(p).parts[2] for p in _interpreter_paths(sys.executable) if p.startswith("/tmp/")}
    )
    assert others == "[]"
    allowed = {
        "bin",
        "sbin",
        "lib",
        "lib32",
        "lib64",
        "libx32",
        "usr",
        "etc",
        "proc",
        "dev",
        "sys",
        "tmp",
        "job",
        "input",
    }
    needed = {Path(p).parts[1] for p in (sys.prefix, sys.base_prefix, *sys.path) if p}
    assert set(eval(top)) <= allowed | needed


@needs_bwrap
@pytest.mark.skipif(not Path("/dev/fuse").exists(), reason="no /dev/fuse to pass through")
def test_only_the_devices_it_is_given_are_there() -> None:
    code = "import os\nprint(sorted(os.listdir('/dev')))"
    plain = run(code, timeout_s=60)
    given = run(code, timeout_s=60, devices=("/dev/fuse",))
    assert "'fuse'" not in plain.stdout.decode() and "'kmsg'" not in plain.stdout.decode()
    assert "'fuse'" in given.stdout.decode(), given.stderr


@needs_bwrap
def test_nothing_outside_its_folder_is_writable() -> None:
    code = (
        "import os, sys\nfor p in (sys.prefix, os.path.dirname(os.__file__), '/usr/lib',"
        " '/input', '/', '/etc', '/sys/fs/cgroup', '/proc/sys/vm'):\n"
        "    try:\n        open(os.path.join(p, 'x'), 'w'); print('WROTE', p)\n"
        "    except OSError as e:\n        print('refused', e.errno)\n"
    )
    out = run(code, timeout_s=60)
    assert out.returncode == 0, out.stderr
    assert b"WROTE" not in out.stdout and out.stdout.count(b"refused") == 8, out.stdout


@pytest.fixture
def app(tmp_path: Path) -> Path:
    """A server's folder: its environment and its data folder inside it, with a secret."""
    env = tmp_path / "app"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    (env / "opmarket-data").mkdir()
    (env / "opmarket-data" / "opmarket.sqlite3").write_text("token digests")
    return env


@needs_bwrap
@pytest.mark.parametrize("through_a_link", [False, True])
def test_a_data_folder_inside_the_interpreters_folder_is_hidden(
    app: Path, through_a_link: bool
) -> None:
    data = app / "opmarket-data"
    if through_a_link:  # the environment reached by a link: its folder is bound twice
        (app.parent / "link").symlink_to(app)
        app = app.parent / "link"
    python = str(app / "bin" / "python")
    code = (
        "import os, sys\n"
        f"print(sys.prefix, os.listdir({str(app / 'opmarket-data')!r}), "
        f"os.listdir({str(data)!r}) if os.path.exists({str(data)!r}) else 'absent')"
    )
    out = run_sandboxed(
        [python, "-I", "-c", code],
        limits=Limits(timeout_s=60),
        interpreter=python,
        env=ENV,
        private=[data],
    )
    assert out.returncode == 0, out.stderr
    # The environment runs; no data where it lies, nor through the link.
    assert out.stdout.decode().split() == [str(app), "[]", "[]"]
    assert (data / "opmarket.sqlite3").read_text() == "token digests"  # the host's, intact


@needs_bwrap
def test_a_data_folder_that_holds_the_interpreter_is_refused(app: Path) -> None:
    python = str(app / "bin" / "python")
    with pytest.raises(SandboxUnavailableError, match="holds"):
        run_sandboxed(
            [python, "-c", "print(1)"],
            limits=Limits(timeout_s=60),
            interpreter=python,
            env=ENV,
            private=[app.parent],
        )


@needs_bwrap
def test_kernel_settings_and_devices_are_out_of_reach() -> None:
    before = (Path("/proc/sys/kernel/core_pattern").read_text(), socket.gethostname())
    code = (
        "import socket\nfor p in ('/proc/sys/kernel/core_pattern', "
        "'/proc/sys/kernel/hostname', '/dev/kmsg', '/sys/kernel/uevent_helper', "
        "'/proc/sysrq-trigger'):\n"
        "    try:\n        open(p, 'w')\n        print('OPENED', p)\n"
        "    except OSError as e:\n        print('refused', p, e.errno)\n"
        "try:\n    socket.sethostname('pwned')\n    print('OPENED hostname')\n"
        "except OSError as e:\n    print('refused sethostname', e.errno)\n"
    )
    out = run(code, timeout_s=60)
    assert out.returncode == 0, out.stderr
    assert b"OPENED" not in out.stdout, out.stdout
    assert out.stdout.count(b"refused") == 6
    assert (Path("/proc/sys/kernel/core_pattern").read_text(), socket.gethostname()) == before


@pytest.fixture
def listeners(tmp_path: Path) -> Iterator[tuple[str, str, int, list[socket.socket]]]:
    path = str(tmp_path / "host.sock")
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(path)
    abstract = f"\0opmarket-test-{uuid.uuid4().hex}"
    hidden = socket.socket(socket.AF_UNIX)
    hidden.bind(abstract)
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    for s in (unix, hidden, tcp):
        s.listen(1)
        s.setblocking(False)
    yield path, abstract, tcp.getsockname()[1], [unix, hidden, tcp]
    for s in (unix, hidden, tcp):
        s.close()


@needs_bwrap
def test_no_host_socket_or_network_is_reachable(
    listeners: tuple[str, str, int, list[socket.socket]],
) -> None:
    path, abstract, port, sockets = listeners
    code = (
        "import socket\n"
        f"for family, where in ((socket.AF_UNIX, {path!r}), (socket.AF_UNIX, {abstract!r}),"
        f" (socket.AF_INET, ('127.0.0.1', {port}))):\n"
        "    s = socket.socket(family)\n    try:\n        s.connect(where)\n"
        "        s.sendall(b'hello')\n        print('CONNECTED', where)\n"
        "    except OSError as e:\n        print('refused', e.errno)\n"
    )
    out = run(code, timeout_s=60)
    assert out.returncode == 0, out.stderr
    assert b"CONNECTED" not in out.stdout and out.stdout.count(b"refused") == 3
    for s in sockets:
        with pytest.raises(BlockingIOError):
            s.accept()


@needs_bwrap
def test_a_hang_is_stopped_with_everything_it_started() -> None:
    marker = f"hang-{uuid.uuid4().hex}"
    start = time.monotonic()
    # A daemon that leaves its session and process group, then the parent hangs too.
    out = run(
        f"import os, sys, time  # {marker}\n"
        "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        time.sleep(600)\n    os._exit(0)\n"
        "time.sleep(600)\n",
        timeout_s=2,
    )
    assert "still running after 2 s" in out.problem
    assert time.monotonic() - start < 30
    assert processes_with(marker) == []


@needs_bwrap
def test_the_sandbox_dies_with_its_supervisor() -> None:
    marker = f"orphan-{uuid.uuid4().hex}"
    supervisor = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys\nfrom opmarket.web.sandbox._run import Limits, run_sandboxed\n"
                f"run_sandboxed([sys.executable, '-I', '-c', 'import time  # {marker}\\n"
                "time.sleep(600)'], limits=Limits(timeout_s=600), interpreter=sys.executable, "
                "env={'PATH': '/usr/bin:/bin'})\n"
            ),
        ]
    )
    try:
        wait_for(lambda: processes_with(marker))
    finally:
        supervisor.kill()  # kill -9: no clean-up of its own
        supervisor.wait()
    wait_for(lambda: not processes_with(marker), timeout=10)
    # Its control groups stay behind until someone sweeps them.
    leftovers = list(Path("/sys/fs/cgroup").glob(f"*/**/opmarket-{supervisor.pid}-*"))
    sweep_stale()
    assert not [p for p in leftovers if p.exists()]


@needs_bwrap
def test_flooding_output_is_stopped() -> None:
    out = run(
        "import sys\nwhile True: sys.stdout.write('x' * 65536)",
        timeout_s=60,
        max_output_bytes=1_000_000,
    )
    assert "printed more than" in out.problem
    assert len(out.stdout) <= 1_000_000


@needs_bwrap
def test_the_work_folder_is_size_limited() -> None:
    out = run(
        "import os\ntry:\n    open('big', 'wb').write(b'x' * 64_000_000)\n"
        "except OSError as e:\n    print('refused', e.errno)\n",
        timeout_s=60,
        disk_mb=16,
    )
    assert out.stdout == b"refused 28\n", out.stderr  # ENOSPC


@needs_bwrap
@needs_cgroup
def test_memory_is_bounded_for_the_whole_job() -> None:
    # Four children of 200 MB each, under a 256 MiB bound for the whole job.
    code = (
        "import os, time\npids = []\nfor _ in range(4):\n    pid = os.fork()\n"
        "    if pid == 0:\n        b = bytearray(200_000_000)\n"
        "        for i in range(0, len(b), 4096): b[i] = 1\n"
        "        time.sleep(3)\n        os._exit(0)\n    pids.append(pid)\n"
        "print([os.waitpid(p, 0)[1] for p in pids])\n"
    )
    out = run(code, timeout_s=60, memory_mb=256)
    assert out.peak_memory_bytes is not None
    assert out.peak_memory_bytes <= 256 * 1024 * 1024
    assert out.problem or b"9" in out.stdout  # the kernel killed what went over


@needs_bwrap
@needs_cgroup
def test_a_fork_bomb_hits_the_pids_limit() -> None:
    code = (
        "import os, time\nn = 0\n"
        "for _ in range(200):\n"
        "    try:\n        pid = os.fork()\n"
        "    except OSError:\n        print('refused', n); break\n"
        "    if pid == 0:\n        time.sleep(60); os._exit(0)\n    n += 1\n"
    )
    out = run(code, timeout_s=30, max_pids=20)
    assert b"refused" in out.stdout, out.stderr
    assert int(out.stdout.split()[-1]) < 20


def test_without_bubblewrap_it_refuses_unless_allowed() -> None:
    with pytest.raises(SandboxUnavailableError, match="'/nonexistent/bwrap' is not installed"):
        run("print('ran')", bwrap="/nonexistent/bwrap")
    out = run("print('ran')", bwrap="/nonexistent/bwrap", allow_unsandboxed=True)
    assert out.stdout == b"ran\n"
    assert out.protections[0].startswith("NOT SANDBOXED")


def _system_python() -> str | None:
    found = shutil.which("python3", path="/usr/bin")
    if found is None or os.geteuid() != 0 or shutil.which("setpriv") is None:
        return None
    done = subprocess.run(
        [found, "-c", "import sys; print(sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=False,
    )
    return found if done.stdout.strip() == str(sys.version_info[:2]) else None


@needs_bwrap
@pytest.mark.skipif(
    _system_python() is None,
    reason="needs root (to become nobody) and a system Python of this version",
)
def test_a_server_that_is_not_root_sandboxes_as_itself(tmp_path: Path) -> None:
    """The supervisor runs as nobody (as a server of its own user would), with a system
    interpreter that user can read: bwrap's user namespace, same guarantees."""
    python = _system_python()
    assert python is not None
    site = [p for p in sys.path if p.endswith("site-packages") or "__editable__" in p]
    code = (
        "import os, socket\nfor p in ('/proc/sys/kernel/core_pattern', '/dev/kmsg'):\n"
        "    try:\n        open(p, 'w'); print('OPENED', p)\n"
        "    except OSError as e:\n        print('refused', e.errno)\n"
        "print(os.getuid(), sorted(os.listdir('/')))\n"
    )
    supervisor = (
        "import sys\nfrom opmarket.web.sandbox._run import Limits, run_sandboxed\n"
        f"out = run_sandboxed([sys.executable, '-I', '-c', {code!r}], limits=Limits(timeout_s=60),"
        " interpreter=sys.executable, env={'PATH': '/usr/bin:/bin'})\n"
        "print(out.stdout.decode(), out.protections[-1], out.stderr.decode())\n"
    )
    done = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", python, "-c", supervisor],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join(site)},
    )
    assert done.returncode == 0, done.stderr
    assert "OPENED" not in done.stdout and done.stdout.count("refused") == 2, done.stdout
    assert "65534 ['bin', 'dev'" in done.stdout
    assert "runs as host uid 65534 in a user namespace" in done.stdout


@needs_cgroup
def test_a_process_that_exits_with_a_job_running_removes_its_groups() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            (
                "import os\nfrom opmarket.web.sandbox._cgroup import create_job_cgroup\n"
                "group = create_job_cgroup(64, 16, 1.0)\nprint(os.getpid(), *group.folders)\n"
            ),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    pid, *folders = done.stdout.split()
    assert folders and all(f"opmarket-{pid}-" in f for f in folders)
    assert not [f for f in folders if Path(f).exists()]
