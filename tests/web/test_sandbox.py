"""The sandbox stops what misbehaves: hangs, floods, fork bombs, memory hogs."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from opmarket.web import Limits
from opmarket.web._sandbox import _pids_cgroup_root, run_sandboxed

ENV = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"}


def run(code: str, tmp_path: Path, **limits: object) -> object:
    return run_sandboxed([sys.executable, "-I", "-c", code], workdir=tmp_path,
                         limits=Limits(**limits),  # type: ignore[arg-type]
                         interpreter=sys.executable, env=ENV)


def test_a_well_behaved_command_runs(tmp_path: Path) -> None:
    out = run("print('hello')", tmp_path, timeout_s=60)
    assert out.returncode == 0 and out.stdout == b"hello\n" and not out.problem  # type: ignore[attr-defined]


def test_a_hang_is_stopped_at_the_timeout(tmp_path: Path) -> None:
    start = time.monotonic()
    out = run("import time; time.sleep(600)", tmp_path, timeout_s=2)
    assert "still running after 2 s" in out.problem  # type: ignore[attr-defined]
    assert time.monotonic() - start < 30


def test_flooding_output_is_stopped(tmp_path: Path) -> None:
    out = run("import sys\nwhile True: sys.stdout.write('x' * 65536)", tmp_path,
              timeout_s=60, max_output_bytes=1_000_000)
    assert "printed more than" in out.problem  # type: ignore[attr-defined]
    assert len(out.stdout) <= 1_000_000  # type: ignore[attr-defined]


def test_a_memory_hog_fails_alone(tmp_path: Path) -> None:
    out = run("b = bytearray(2_000_000_000); print('got it')", tmp_path, timeout_s=60,
              memory_mb=512)
    assert out.returncode != 0 and b"MemoryError" in out.stderr  # type: ignore[attr-defined]


@pytest.mark.skipif(os.geteuid() != 0 or _pids_cgroup_root() is None,
                    reason="the pids limit needs root and a pids cgroup")
def test_a_fork_bomb_hits_the_pids_limit(tmp_path: Path) -> None:
    code = ("import os, time\nn = 0\n"
            "for _ in range(200):\n"
            "    try:\n        pid = os.fork()\n"
            "    except OSError:\n        print('refused', n); break\n"
            "    if pid == 0:\n        time.sleep(60); os._exit(0)\n    n += 1\n")
    out = run(code, tmp_path, timeout_s=30, max_pids=20)
    assert b"refused" in out.stdout  # type: ignore[attr-defined]
    refused_after = int(out.stdout.split()[-1])  # type: ignore[attr-defined]
    assert refused_after < 20


@pytest.mark.skipif(os.geteuid() != 0, reason="the mount namespace needs root")
def test_only_its_folder_is_writable(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    outside = tmp_path / "outside.txt"
    code = (f"open({str(work / 'in.txt')!r}, 'w').write('x')\n"
            f"try:\n    open({str(outside)!r}, 'w').write('x')\n"
            "except OSError as e:\n    print('refused:', e.strerror)\n")
    out = run_sandboxed([sys.executable, "-I", "-c", code], workdir=work,
                        limits=Limits(timeout_s=60), interpreter=sys.executable, env=ENV)
    assert out.returncode == 0, out.stderr
    assert (work / "in.txt").exists()
    assert not outside.exists()
    assert b"refused: Read-only file system" in out.stdout
