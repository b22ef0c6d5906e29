"""Hostile uploads, second campaign: what the kernel could share between validations or with
the host past the sandbox's namespaces (the keyring, new user namespaces, socket families no
network namespace covers, /sys and /proc/cmdline). Each attack is a real plugin wheel run
through the real validation pipeline; each reports what it got on stderr, which the
verdict's log shows."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest

from opmarket.web import Limits, Verdict, validate_wheel
from opmarket.web.sandbox._run import sandbox_problem

from .plugins import build_plugin, plugin_source

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(sandbox_problem(Limits())), reason="no sandbox here"),
]

OP = "Test>Kernel"
GOOD = plugin_source(OP, 2)
CANARY = f"KERNEL-CANARY-{uuid.uuid4().hex}"

_SYSCALLS = """
import ctypes, errno, os, platform, sys
libc = ctypes.CDLL(None, use_errno=True)
# add_key, request_key, keyctl
NR = {"x86_64": (248, 249, 250), "aarch64": (217, 218, 219)}[platform.machine()]
def report(what, result):
    err = ctypes.get_errno()
    print(what, "ok" if result >= 0 else "denied " + errno.errorcode.get(err, str(err)),
          file=sys.stderr)
    return result
"""

ATTACKS = {
    # 5. A key left in the sandbox user's keyring for the next job; and one looked for.
    "keyring": _SYSCALLS
    + f"""
KEY_SPEC_USER_KEYRING = -4
found = libc.syscall(NR[2], 10, KEY_SPEC_USER_KEYRING, b"user", b"opm-canary", 0)  # SEARCH
if found >= 0:
    buf = ctypes.create_string_buffer(200)
    libc.syscall(NR[2], 11, found, buf, 200)  # READ
    print("FOUND key", found, buf.value.decode(errors="replace"), file=sys.stderr)
report("add_key", libc.syscall(NR[0], b"user", b"opm-canary", {CANARY.encode()!r},
                               len({CANARY!r}), KEY_SPEC_USER_KEYRING))
report("keyctl", libc.syscall(NR[2], 0, -3, 0))  # GET_KEYRING_ID of the session keyring
report("request_key", libc.syscall(NR[1], b"user", b"opm-canary", None, 0))
try:
    print("proc keys", open("/proc/keys").read().count("opm-canary"), file=sys.stderr)
except OSError as e:
    print("proc keys", e.strerror, file=sys.stderr)
""",
    # 9. A user namespace, then a mount namespace in it; AF_VSOCK and other families.
    "namespaces": _SYSCALLS
    + """
import socket
report("unshare user", libc.unshare(0x10000000))
report("unshare mount", libc.unshare(0x00020000))
report("unshare net", libc.unshare(0x40000000))
for name, family in (("vsock", 40), ("netlink", 16), ("alg", 38), ("packet", 17)):
    try:
        socket.socket(family, socket.SOCK_DGRAM if family != 38 else socket.SOCK_SEQPACKET)
        print("socket", name, "ok", file=sys.stderr)
    except OSError as e:
        print("socket", name, "denied", errno.errorcode.get(e.errno, e.errno), file=sys.stderr)
for name, family in (("unix", socket.AF_UNIX), ("inet", socket.AF_INET)):
    socket.socket(family, socket.SOCK_STREAM).close()
    print("socket", name, "ok", file=sys.stderr)
status = open("/proc/self/status").read()
print("status", re.sub(r"\\s+", " ", [l for l in status.splitlines()
      if l.startswith("Seccomp:")][0]), file=sys.stderr)
# Threads and processes still start (clone3 answers ENOSYS: libc falls back to clone).
import subprocess, threading
t = threading.Thread(target=lambda: None); t.start(); t.join()
print("child", subprocess.run([sys.executable, "-c", "print(7)"], capture_output=True,
      text=True).stdout.strip(), file=sys.stderr)
""",
    # 12. The host's cgroup tree, network interfaces and boot command line.
    "host": """
import os, sys
def show(path):
    try:
        if os.path.isdir(path):
            return sorted(os.listdir(path))
        return open(path).read(200).strip()
    except OSError as e:
        return "denied " + str(e.strerror)
for path in ("/sys", "/sys/fs/cgroup", "/sys/class/net", "/proc/cmdline", "/proc/modules"):
    print("HOST", path, repr(show(path)), file=sys.stderr)
print("cpus", os.cpu_count(), len(show("/sys/devices/system/cpu")) > 0, file=sys.stderr)
""",
}


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("kernel-wheels")
    return {
        name: build_plugin(
            d,
            f"opm-kernel-{name}",
            "1.0.0",
            op_name=OP,
            source=GOOD + "\nimport re\n" + code,
            manifest_source=GOOD,
        )
        for name, code in ATTACKS.items()
    }


def validate(wheel: Path) -> Verdict:
    return validate_wheel(wheel, limits=Limits(timeout_s=120))


def lines(log: str, prefix: str) -> dict[str, str]:
    found = {}
    for line in log.splitlines():
        parts = line.strip().split(" ", 2)
        if len(parts) == 3 and parts[0] == prefix:
            found[parts[1]] = parts[2]
    return found


def test_no_key_passes_from_one_validation_to_the_next(hostile: dict[str, Path]) -> None:
    first = validate(hostile["keyring"])
    second = validate(hostile["keyring"])
    for verdict in (first, second):
        log = verdict.log_text()
        assert "FOUND key" not in log and CANARY not in log, log
        assert verdict.status == "validated", log  # contained, not the plugin's failure
    reported = {
        line.split()[0]: line.split(maxsplit=1)[1]
        for line in second.log_text().splitlines()
        if line.strip().startswith(("add_key", "keyctl", "request_key"))
        for line in [line.strip()]
    }
    assert reported == {
        "add_key": "denied EPERM",
        "keyctl": "denied EPERM",
        "request_key": "denied EPERM",
    }, second.log_text()
    assert re.search(r"proc keys (0|Permission denied)\n", second.log_text())


def test_no_namespaces_and_only_unix_and_ip_sockets(hostile: dict[str, Path]) -> None:
    verdict = validate(hostile["namespaces"])
    log = verdict.log_text()
    assert verdict.status == "validated", log
    assert lines(log, "unshare") == {
        "user": "denied EPERM",
        "mount": "denied EPERM",
        "net": "denied EPERM",
    }, log
    assert lines(log, "socket") == {
        "vsock": "denied EAFNOSUPPORT",
        "netlink": "denied EAFNOSUPPORT",
        "alg": "denied EAFNOSUPPORT",
        "packet": "denied EAFNOSUPPORT",
        "unix": "ok",
        "inet": "ok",
    }, log
    assert "status Seccomp: 2" in log
    assert "child 7" in log


def test_the_host_is_not_described_to_the_job(hostile: dict[str, Path]) -> None:
    verdict = validate(hostile["host"])
    log = verdict.log_text()
    assert verdict.status == "validated", log  # numpy, opmarket and conformance still work
    seen = {m.group(1): m.group(2) for m in re.finditer(r"HOST (\S+) (.*)", log)}
    assert seen["/sys"] == "['devices']", log
    assert seen["/sys/fs/cgroup"].startswith("'denied"), log
    assert seen["/sys/class/net"].startswith("'denied"), log
    assert seen["/proc/cmdline"] in ("''", "'denied Permission denied'"), log
    cpus = re.search(r"cpus (\d+) True", log)
    assert cpus is not None and int(cpus.group(1)) >= 1, log
