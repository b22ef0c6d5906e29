"""The next validation's sandbox, started while a worker is idle (``_harness``, issue 26):
hostile wheels through the real pipeline with ``warm=True``, as a validation worker runs
it, and a check that nothing one leaves is seen by the next, that each started sandbox
serves one validation, and that a sandbox killed while it waits costs nothing but itself."""

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

# What one validation leaves where its sandbox lets it write, in its own process's modules
# and in numpy, and what it sees of other sandboxes' processes.
LITTER = """
import os, sys, numpy
for path in ("/job/left", "/tmp/left", "/dev/shm/left", os.path.expanduser("~/left")):
    with open(path, "w") as f:
        f.write("left by the previous upload")
sys.modules["opm_left_module"] = sys
numpy.opm_left = "poisoned"
os.environ["OPM_LEFT"] = "1"
plugins = 0  # plugin processes of validations: its own only
for entry in filter(str.isdigit, os.listdir("/proc")):
    try:
        plugins += b"plugin" in open(f"/proc/{entry}/cmdline", "rb").read().split(bytes(1))
    except OSError:
        pass
print("PLUGIN PROCESSES", plugins, file=sys.stderr)
"""
# What the next one looks for.
LOOK = """
import os, sys, numpy
seen = [p for p in ("/job/left", "/tmp/left", "/dev/shm/left", os.path.expanduser("~/left"))
        if os.path.exists(p)]
seen += ["module"] * ("opm_left_module" in sys.modules)
seen += ["numpy"] * hasattr(numpy, "opm_left")
seen += ["environment"] * ("OPM_LEFT" in os.environ)
print("SEEN", seen, file=sys.stderr)
"""
# Kills every process of its sandbox it can see, its harness first.
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


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("warm-wheels")
    codes = {"litter": LITTER, "look": LOOK, "killer": KILLER, "good": ""}
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
    yield
    _harness.discard_waiting()


def validate(wheel: Path) -> Verdict:
    return validate_wheel(wheel, limits=Limits(timeout_s=60), warm=True)


def waiting() -> _harness._Sandbox:
    sandbox = getattr(_harness._NEXT, "sandbox", None)
    assert sandbox is not None, "a warm validation leaves the next one's sandbox started"
    return sandbox


def test_nothing_one_validation_leaves_is_seen_by_the_next(wheels: dict[str, Path]) -> None:
    litter = validate(wheels["litter"])
    assert litter.status == "validated", litter.log_text()
    assert "PLUGIN PROCESSES 1" in litter.log_text()  # its own, no other sandbox's
    look = validate(wheels["look"])
    assert look.status == "validated", look.log_text()
    assert "SEEN []" in look.log_text(), look.log_text()


def test_each_started_sandbox_serves_one_validation(wheels: dict[str, Path]) -> None:
    validate(wheels["good"])
    first = waiting()
    assert first.started.alive()  # waiting, its interpreter loaded, for the next upload
    verdict = validate(wheels["good"])
    assert verdict.status == "validated", verdict.log_text()
    second = waiting()
    assert second is not first
    assert first.started.proc.poll() is not None  # it served that one and is gone
    assert not first.folder.exists()
    assert second.started.alive()


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
    validate_wheel(wheels["good"], limits=limits, warm=True)
    sandbox = waiting()
    threading.Event().wait(limits.timeout_s + 1)  # idle for longer than one timeout
    assert sandbox.started.alive()
    verdict = validate_wheel(wheels["good"], limits=limits, warm=True)
    assert verdict.status == "validated", verdict.log_text()
    assert sandbox.started.proc.poll() is not None  # that one served it
