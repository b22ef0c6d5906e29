"""A validation worker's sandbox, started while it is idle and then serving its validations
one after the other (``_harness``, ``_probe``; issue 26): hostile wheels through the real
pipeline with ``warm=True``, as a validation worker runs it. What one job leaves where it
can write, runs or changes is tried, and the next job of the same sandbox must see none of
it; a job that changes what it cannot undo (the zygote's or harness's limits) gets its
sandbox ended; a sandbox killed while it waits costs nothing but itself."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

from opmarket.web import Limits, Verdict, validate_wheel
from opmarket.web.sandbox._run import sandbox_problem
from opmarket.web.validation import _harness

from .plugins import build_plugin, plugin_source

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(sandbox_problem(Limits())), reason="no sandbox here"),
]

OP = "Test>Warm"
GOOD = plugin_source(OP, 2)

# Processes of the sandbox with a thread that is not a zombie (a process whose first thread
# ended alone is one while its others run): its init, the harness, the zygote, ...
ALIVE = """
def alive():
    out = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        states = []
        try:
            for task in os.listdir(f"/proc/{entry}/task"):
                stat = open(f"/proc/{entry}/task/{task}/stat").read()
                states.append(stat.rsplit(")", 1)[1].split()[0])
        except OSError:
            continue
        if any(state != "Z" for state in states):
            out.append(int(entry))
    return out
"""
# What one validation leaves where its sandbox lets it write, in its own process's modules
# and in numpy, and a process of its own that outlives it (in a session of its own,
# listening on an abstract socket, writing a file as long as it runs).
LITTER = (
    ALIVE
    + """
import os, socket, sys, time, numpy
for path in ("/job/left", "/tmp/left", "/dev/shm/left", os.path.expanduser("~/left")):
    with open(path, "w") as f:
        f.write("left by the previous upload")
os.makedirs("/tmp/locked/deeper")
open("/tmp/locked/deeper/file", "w").close()
os.chmod("/tmp/locked/deeper", 0)
os.chmod("/tmp/locked", 0o500)
os.mkfifo("/job/fifo")
os.symlink("/input", "/dev/shm/link")
sys.modules["opm_left_module"] = sys
numpy.opm_left = "poisoned"
os.environ["OPM_LEFT"] = "1"
import fcntl  # its standard input's flags and owner, were they shared with the next job
fcntl.fcntl(0, fcntl.F_SETFL, os.O_NONBLOCK | os.O_APPEND)
fcntl.fcntl(0, fcntl.F_SETOWN, os.getpid())
print("PROCESSES", len(alive()), file=sys.stderr)  # init, harness, zygote, itself
ready_r, ready_w = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        listener = socket.socket(socket.AF_UNIX)
        listener.bind("\\0opm-left")
        listener.listen()
        os.write(ready_w, b"x")
        while True:
            open("/tmp/daemon-was-here", "w").close()
            time.sleep(0.01)
    os._exit(0)
os.read(ready_r, 1)
"""
)
# What the next one looks for, and what it was given (its limits, priority, CPUs).
LOOK = (
    ALIVE
    + """
import os, resource, socket, sys, numpy
seen = [
    p
    for p in ("/job/left", "/tmp/left", "/dev/shm/left", os.path.expanduser("~/left"),
              "/tmp/locked", "/job/fifo", "/dev/shm/link", "/tmp/daemon-was-here")
    if os.path.lexists(p)
]
seen += ["module"] * ("opm_left_module" in sys.modules)
seen += ["numpy"] * hasattr(numpy, "opm_left")
seen += ["environment"] * ("OPM_LEFT" in os.environ)
for entry in filter(str.isdigit, os.listdir("/proc")):  # its zygote's other children
    try:
        parent = int(open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[1])
    except OSError:
        continue
    if parent == os.getppid() and int(entry) != os.getpid():
        seen.append("zygote's child")
try:
    socket.socket(socket.AF_UNIX).connect("\\0opm-left")
    seen.append("socket")
except OSError:
    pass
print("SEEN", seen, "PROCESSES", len(alive()), file=sys.stderr)
limits = [resource.getrlimit(getattr(resource, n)) for n in sorted(dir(resource))
          if n.startswith("RLIMIT_")]
number = {"x86_64": 252, "aarch64": 31}[os.uname().machine]  # ioprio_get
import ctypes
io = ctypes.CDLL(None, use_errno=True).syscall(number, 1, 0)
import fcntl
stdin = fcntl.fcntl(0, fcntl.F_GETFL), fcntl.fcntl(0, fcntl.F_GETOWN)
attr = ctypes.create_string_buffer(56)  # sched_getattr: its scheduling, all of it
number = {"x86_64": 315, "aarch64": 275}[os.uname().machine]
scheduling = attr.raw.hex() if ctypes.CDLL(None).syscall(number, 0, attr, 56, 0) == 0 else None
try:  # its session's priority ("/autogroup-ID nice N"; its ID is the sandbox's)
    session = open("/proc/self/autogroup").read().split()[-1]
except OSError:
    session = None
print("GIVEN", limits, os.getpriority(os.PRIO_PROCESS, 0), sorted(os.sched_getaffinity(0)),
      io, stdin, session, scheduling, file=sys.stderr)
"""
)
# Changes one thing a process of the same user may change in another ({what}, in its zygote
# or its harness: {who}), and stops the zygote.
TAMPER = """
import ctypes, os, resource, signal, sys
zygote = os.getppid()
pid = zygote if "{who}" == "zygote" else int(
    open(f"/proc/{{zygote}}/stat").read().rsplit(")", 1)[1].split()[1])
if "{what}" == "limit":
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (16, 16))
elif "{what}" == "priority":
    os.setpriority(os.PRIO_PROCESS, pid, 19)
elif "{what}" == "cpus":
    os.sched_setaffinity(pid, {{min(os.sched_getaffinity(0))}})
elif "{what}" == "io priority":  # ioprio_set(IOPRIO_WHO_PROCESS, pid, IOPRIO_CLASS_IDLE)
    number = {{"x86_64": 251, "aarch64": 30}}[os.uname().machine]
    assert ctypes.CDLL(None, use_errno=True).syscall(number, 1, pid, 3 << 13) == 0
os.kill(zygote, signal.SIGSTOP)
"""
TAMPERED = [
    (what, who)
    for what in ("limit", "priority", "cpus", "io priority")
    for who in ("zygote", "harness")
    if what != "cpus" or len(os.sched_getaffinity(0)) > 1
]
# Leaves a process whose first thread ended alone (``exit``, not ``exit_group``): a zombie
# to /proc/PID/stat while its other thread runs on.
UNDEAD = """
import ctypes, os, threading, time
child = os.fork()
if child == 0:
    threading.Thread(target=time.sleep, args=(3600,)).start()
    ctypes.CDLL(None).syscall({"x86_64": 60, "aarch64": 93}[os.uname().machine], 0)
while open(f"/proc/{child}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
    time.sleep(0.001)  # until its first thread ended
"""
# Leaves children of its zygote (clone's CLONE_PARENT), which end at once: zombies that only
# their parent can remove, each holding a process of the sandbox's (and its user's) limit.
ORPHANS = """
import ctypes, os, signal, sys
clone = {"x86_64": 56, "aarch64": 220}[os.uname().machine]
made = 0
for _ in range(8):
    child = ctypes.CDLL(None).syscall(clone, 0x8000 | signal.SIGCHLD, 0, 0, 0, 0)
    if child == 0:
        os._exit(0)
    made += child > 0
print("ZYGOTE'S CHILDREN MADE", made, file=sys.stderr)
"""
# Leaves a TCP port of its loopback in TIME_WAIT (it closed the connection first): for a
# minute, a program that binds that port there fails.
TIME_WAIT = """
import socket
server = socket.create_server(("127.0.0.1", 45678))
client = socket.create_connection(("127.0.0.1", 45678))
server.accept()[0].close()
client.close()
server.close()
"""
BINDS = """
import socket, sys
try:
    socket.socket().bind(("127.0.0.1", 45678))
    print("BOUND", file=sys.stderr)
except OSError as exc:
    print("NOT BOUND", exc, file=sys.stderr)
"""
# Lowers the priority of its session (its autogroup: the sandbox's, harness and zygote
# included), which it may once it made itself dumpable again (its /proc files its own).
RENICE_SESSION = """
import ctypes, sys
ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE, 1
try:
    with open("/proc/self/autogroup", "w") as f:
        f.write("19")
    print("SESSION RENICED", file=sys.stderr)
except OSError:
    pass  # a kernel without autogroups
"""
# Gives its zygote or its harness ({who}) a time slice of its own (sched_setattr's
# sched_runtime for SCHED_OTHER: Linux 6.12's scheduler), which what they fork inherits.
SLICE = """
import ctypes, os, struct, sys
zygote = os.getppid()
pid = zygote if "{who}" == "zygote" else int(
    open(f"/proc/{{zygote}}/stat").read().rsplit(")", 1)[1].split()[1])
libc = ctypes.CDLL(None)
machine = os.uname().machine
attr = struct.pack("=IIQiIQQQ", 48, 0, 0, 0, 0, 50_000_000, 0, 0)
assert libc.syscall({{"x86_64": 314, "aarch64": 274}}[machine], pid, attr, 0) == 0
now = ctypes.create_string_buffer(48)
assert libc.syscall({{"x86_64": 315, "aarch64": 275}}[machine], pid, now, 48, 0) == 0
if struct.unpack_from("=Q", now.raw, 24)[0] == 50_000_000:
    print("SLICE SET", file=sys.stderr)  # else a kernel without slices of one's own
"""
STOPPER = """
import os, signal
os.kill(os.getppid(), signal.SIGSTOP)  # the zygote: the next job would wait for ever
"""
# Kills every process of its sandbox it can see, its zygote first.
KILLER = """
import os, signal
os.kill(os.getppid(), signal.SIGKILL)
for entry in os.listdir("/proc"):
    if entry.isdigit() and int(entry) != os.getpid():
        try:
            os.kill(int(entry), signal.SIGKILL)
        except OSError:
            pass
"""
# Kernel objects that would outlive its processes in the sandbox's IPC namespace.
IPC = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
made = []
if libc.shmget(0, 4096, 0o1600) != -1:  # IPC_PRIVATE, IPC_CREAT | 0600
    made.append("shm")
if libc.semget(0, 1, 0o1600) != -1:
    made.append("sem")
if libc.msgget(0, 0o1600) != -1:
    made.append("msg")
if hasattr(libc, "mq_open") and libc.mq_open(b"/opm-left", 0o102, 0o600, None) != -1:
    made.append("mq")
print("IPC MADE", made, file=sys.stderr)
"""
LOUD = """
import sys
sys.stdout.write("x" * (5 * 1024 * 1024))
"""


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("warm-wheels")
    codes = {
        "litter": LITTER,
        "look": LOOK,
        **{
            f"tamper-{what.replace(' ', '-')}-{who}": TAMPER.format(what=what, who=who)
            for what, who in TAMPERED
        },
        "undead": UNDEAD,
        "orphans": ORPHANS,
        "time-wait": TIME_WAIT,
        "binds": BINDS,
        "renice-session": RENICE_SESSION,
        **{f"slice-{who}": SLICE.format(who=who) for who in ("zygote", "harness")},
        "stopper": STOPPER,
        "killer": KILLER,
        "ipc": IPC,
        "loud": LOUD,
        "good": "",
    }
    return {
        name: build_plugin(
            d, f"opm-warm-{name}", "1.0.0", op_name=OP, source=GOOD + code, manifest_source=GOOD
        )
        for name, code in codes.items()
    }


@pytest.fixture(autouse=True)
def no_waiting_sandbox() -> object:
    """Each test starts without a waiting sandbox in this thread, and leaves none."""
    _harness.discard_waiting()
    _harness._NEXT.sandbox = None
    yield
    _harness.discard_waiting()
    _harness._NEXT.sandbox = None


def validate(wheel: Path, limits: Limits | None = None) -> Verdict:
    return validate_wheel(wheel, limits=limits or Limits(timeout_s=60), warm=True)


def waiting() -> _harness._Sandbox:
    sandbox = getattr(_harness._NEXT, "sandbox", None)
    assert sandbox is not None, "a warm validation leaves the next one's sandbox started"
    return sandbox


def line(verdict: Verdict, start: str) -> str:
    found = [s for s in verdict.log_text().splitlines() if s.strip().startswith(start)]
    assert found, verdict.log_text()
    return found[0].strip()


@pytest.fixture(scope="module")
def fresh_look(wheels: dict[str, Path]) -> str:
    """What a job is given in a sandbox that served nothing before."""
    verdict = validate_wheel(wheels["look"], limits=Limits(timeout_s=60))
    assert verdict.status == "validated", verdict.log_text()
    return line(verdict, "GIVEN")


def test_nothing_one_validation_leaves_is_seen_by_the_next(
    wheels: dict[str, Path], fresh_look: str
) -> None:
    litter = validate(wheels["litter"])
    assert litter.status == "validated", litter.log_text()
    assert "PROCESSES 4" in litter.log_text()  # no other sandbox's processes
    sandbox = waiting()
    look = validate(wheels["look"])
    assert waiting() is sandbox and sandbox.served == 2  # the same sandbox served both
    assert look.status == "validated", look.log_text()
    assert "SEEN [] PROCESSES 4" in look.log_text(), look.log_text()
    assert "job 2 of a sandbox that was put back as it was" in look.log_text()
    assert line(look, "GIVEN") == fresh_look


def test_a_process_whose_first_thread_ended_is_killed_too(wheels: dict[str, Path]) -> None:
    undead = validate(wheels["undead"])
    assert undead.status == "validated", undead.log_text()
    sandbox = waiting()
    look = validate(wheels["look"])
    assert look.status == "validated", look.log_text()
    assert "SEEN [] PROCESSES 4" in look.log_text(), look.log_text()
    assert waiting() is sandbox and sandbox.served == 2  # killed, and the sandbox serves on


def test_children_a_job_gives_its_zygote_are_removed(wheels: dict[str, Path]) -> None:
    orphans = validate(wheels["orphans"])
    assert orphans.status == "validated", orphans.log_text()
    assert "ZYGOTE'S CHILDREN MADE 8" in orphans.log_text(), orphans.log_text()
    sandbox = waiting()
    look = validate(wheels["look"])
    assert look.status == "validated", look.log_text()
    assert "SEEN [] PROCESSES 4" in look.log_text(), look.log_text()
    assert waiting() is sandbox and sandbox.served == 2


def test_a_job_that_leaves_a_port_in_time_wait_ends_its_sandbox(
    wheels: dict[str, Path],
) -> None:
    validate(wheels["good"])
    before = waiting()
    left = validate(wheels["time-wait"])
    assert left.status == "validated", left.log_text()
    assert waiting() is not before and before.started.proc.poll() is not None
    binds = validate(wheels["binds"])
    assert "BOUND" in binds.log_text() and "NOT BOUND" not in binds.log_text(), binds.log_text()


def test_a_sandbox_serves_its_threads_validations(wheels: dict[str, Path]) -> None:
    validate(wheels["good"])
    first = waiting()
    assert first.started.alive()  # waiting, its interpreter loaded, for the next upload
    for served in (2, 3):
        verdict = validate(wheels["good"])
        assert verdict.status == "validated", verdict.log_text()
        assert waiting() is first and first.served == served
    assert first.started.alive()
    assert sorted(p.name for p in (first.folder / "in").iterdir()) == []  # each job's removed


def test_a_sandbox_serves_at_most_most_jobs(
    wheels: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_harness, "MOST_JOBS", 2)
    validate(wheels["good"])
    first = waiting()
    validate(wheels["good"])
    second = waiting()
    assert second is not first and first.started.proc.poll() is not None
    assert not first.folder.exists()


def ends_its_sandbox(
    wheels: dict[str, Path], name: str, fresh_look: str, *, done: str = "", missing: str = ""
) -> None:
    """The wheel ``name`` passes in the sandbox a good one left, ends that sandbox (when
    its plugin says ``done``; else the test skips: ``missing``), and the next job is given
    what a fresh sandbox gives."""
    validate(wheels["good"])
    before = waiting()
    verdict = validate(wheels[name])
    assert verdict.status == "validated", verdict.log_text()  # its own plugin is fine
    if done and done not in verdict.log_text():
        pytest.skip(missing)
    assert waiting() is not before and before.started.proc.poll() is not None
    look = validate(wheels["look"])
    assert look.status == "validated", look.log_text()
    assert line(look, "GIVEN") == fresh_look


@pytest.mark.parametrize(("what", "who"), TAMPERED)
def test_a_job_that_changes_its_zygote_or_harness_ends_its_sandbox(
    wheels: dict[str, Path], fresh_look: str, what: str, who: str
) -> None:
    ends_its_sandbox(wheels, f"tamper-{what.replace(' ', '-')}-{who}", fresh_look)


def test_a_job_that_renices_its_session_ends_its_sandbox(
    wheels: dict[str, Path], fresh_look: str
) -> None:
    ends_its_sandbox(
        wheels,
        "renice-session",
        fresh_look,
        done="SESSION RENICED",
        missing="this kernel has no autogroups",
    )


@pytest.mark.parametrize("who", ["zygote", "harness"])
def test_a_job_that_gives_its_zygote_or_harness_a_time_slice_ends_its_sandbox(
    wheels: dict[str, Path], fresh_look: str, who: str
) -> None:
    ends_its_sandbox(
        wheels,
        f"slice-{who}",
        fresh_look,
        done="SLICE SET",
        missing="this kernel gives no process a time slice of its own",
    )


def test_a_job_that_stops_its_zygote_does_not_stop_the_next(wheels: dict[str, Path]) -> None:
    validate(wheels["good"])
    sandbox = waiting()
    stopped = validate(wheels["stopper"])
    assert stopped.status == "validated", stopped.log_text()
    after = validate(wheels["good"])
    assert after.status == "validated", after.log_text()
    assert waiting() is sandbox  # resumed and unchanged: it serves on


def test_ipc_objects_that_would_outlive_a_job_are_refused(wheels: dict[str, Path]) -> None:
    verdict = validate(wheels["ipc"])
    assert verdict.status == "validated", verdict.log_text()
    assert "IPC MADE []" in verdict.log_text(), verdict.log_text()


def test_a_job_that_prints_too_much_is_stopped_and_the_next_is_not(
    wheels: dict[str, Path],
) -> None:
    validate(wheels["good"])
    sandbox = waiting()
    loud = validate(wheels["loud"])
    assert loud.status == "rejected"
    assert "printed more than 4194304 bytes; stopped" in loud.log_text(), loud.log_text()
    after = validate(wheels["good"])
    assert after.status == "validated", after.log_text()
    assert "plugin output" not in [s.name for s in after.steps]  # none of the last one's
    assert waiting() is sandbox  # its harness stopped that job: the sandbox serves on


def test_a_wheel_that_kills_its_sandbox_fails_only_its_own_validation(
    wheels: dict[str, Path],
) -> None:
    validate(wheels["good"])
    killed = validate(wheels["killer"])
    assert killed.status == "rejected"
    assert [s.name for s in killed.failures] == ["load"], killed.log_text()
    after = validate(wheels["good"])
    assert after.status == "validated", after.log_text()


def test_a_waiting_sandbox_that_was_killed_is_replaced(wheels: dict[str, Path]) -> None:
    validate(wheels["good"])
    sandbox = waiting()
    os.killpg(sandbox.started.proc.pid, signal.SIGKILL)
    sandbox.started.proc.wait()
    verdict = validate(wheels["good"])
    assert verdict.status == "validated", verdict.log_text()
    assert not sandbox.folder.exists()
    assert waiting() is not sandbox


def test_without_warm_no_sandbox_is_left_waiting(wheels: dict[str, Path]) -> None:
    verdict = validate_wheel(wheels["good"], limits=Limits(timeout_s=60))
    assert verdict.status == "validated", verdict.log_text()
    assert getattr(_harness._NEXT, "sandbox", None) is None
    assert not _harness._WAITING


def test_a_sandbox_that_waited_longer_than_the_timeout_still_gets_all_of_it(
    wheels: dict[str, Path],
) -> None:
    # The timeout runs from the hand-over: a worker idle for longer than it must not find
    # its next upload's time spent (nor its CPU limit, which idle time does not use).
    limits = Limits(timeout_s=3)
    validate(wheels["good"], limits)
    sandbox = waiting()
    threading.Event().wait(limits.timeout_s + 1)  # idle for longer than one timeout
    assert sandbox.started.alive()
    verdict = validate(wheels["good"], limits)
    assert verdict.status == "validated", verdict.log_text()
    assert waiting() is sandbox  # that one served it


def test_an_unsandboxed_validation_serves_one_job(wheels: dict[str, Path]) -> None:
    # Without bubblewrap (allowed, as for an author's own wheel) the harness runs among the
    # host's processes: it must never kill "every process but its own" there.
    limits = Limits(timeout_s=60, bwrap="/nonexistent/bwrap", allow_unsandboxed=True)
    verdict = validate(wheels["good"], limits)
    assert verdict.status == "validated", verdict.log_text()
    assert "NOT SANDBOXED" in verdict.log_text()
    first = waiting()
    validate(wheels["good"], limits)
    assert waiting() is not first and first.started.proc.poll() is not None
