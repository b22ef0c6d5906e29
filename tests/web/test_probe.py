"""What the plugin's code finds in the sandbox's plugin process (``validation/_probe.py``): the
process runs compiled code (its script is not parsed again per sandbox), the garbage collector
is on again once opmarket's own imports are done (with their objects frozen out of its
sight), and numerical libraries get one thread. Real bwrap, a real wheel, the real pipeline."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from opmarket.web import Limits, Verdict, validate_wheel
from opmarket.web.sandbox._run import sandbox_problem
from opmarket.web.validation._harness import _PROBE, _probe_code

from .plugins import build_plugin, plugin_source

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        bool(sandbox_problem(Limits())), reason=f"no sandbox here: {sandbox_problem(Limits())}"
    ),
]

OP = "Test>ProbeProcess"
GOOD = plugin_source(OP, 2)
# Run by the plugin's process when it imports the plugin, as any plugin's code runs.
LOOK = """
import gc, os, sys
print("SCRIPT", os.path.basename(sys.argv[0]), file=sys.stderr)
print("COLLECTOR", gc.isenabled(), gc.get_freeze_count() > 0, file=sys.stderr)
print("THREADS", os.environ.get("OPENBLAS_NUM_THREADS"), len(os.listdir("/proc/self/task")),
      file=sys.stderr)
"""


@pytest.fixture(scope="module")
def verdict(tmp_path_factory: pytest.TempPathFactory) -> Verdict:
    d = tmp_path_factory.mktemp("probe-wheels")
    wheel = build_plugin(
        d, "opm-probe-process", "1.0.0", op_name=OP, source=GOOD + LOOK, manifest_source=GOOD
    )
    return validate_wheel(wheel, limits=Limits(timeout_s=60))


def _line(verdict: Verdict, word: str) -> list[str]:
    (line,) = [x for x in verdict.log_text().splitlines() if x.strip().startswith(word + " ")]
    return line.split()[1:]


def test_the_plugins_process_runs_the_probe_compiled(verdict: Verdict) -> None:
    assert verdict.status == "validated", verdict.log_text()
    # The harness started it with its own script's name: the harness ran compiled too.
    assert _line(verdict, "SCRIPT") == ["probe.pyc"]


def test_the_plugins_code_runs_with_the_collector_on(verdict: Verdict) -> None:
    enabled, frozen = _line(verdict, "COLLECTOR")
    assert enabled == "True"  # as in any Python: a plugin that makes cycles gets them freed
    assert frozen == "True"  # opmarket's and numpy's modules, out of its passes


def test_numerical_libraries_get_one_thread(verdict: Verdict) -> None:
    assert _line(verdict, "THREADS") == ["1", "1"]


def test_what_the_plugins_process_loads_leaves_out_protobuf() -> None:
    # The plugin's process has no use for it (a plugin declares its ops in code, and the
    # op-set goes out as JSON), and it was one of the dearer imports of every validation.
    code = (
        "import importlib, sys\n"
        "from opmarket.web.validation._probe import _OWN\n"
        "for name, exports in _OWN.items():\n"
        "    module = importlib.import_module(name)\n"
        "    for export in exports:\n"
        "        getattr(module, export)\n"
        "print(sorted(m for m in sys.modules if m.startswith('google.protobuf')))\n"
    )
    done = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, check=True)
    assert done.stdout.decode().strip() == "[]"


def test_an_interpreter_that_cannot_compile_the_probe_runs_its_source() -> None:
    # Compiled by the interpreter the sandbox runs (its bytecode is that one's); one that
    # fails (here a program that only exits 1) leaves the source to run, not no sandbox.
    assert _probe_code("/bin/false") == ("/input/probe.py", _PROBE)
    where, code = _probe_code(sys.executable)
    assert where == "/input/probe.pyc"
    assert code.read_bytes()[:4] == importlib.util.MAGIC_NUMBER


@pytest.mark.parametrize("removed", ["probe.pyc", "_reuse.pyc"])
def test_a_compiled_probe_removed_from_the_temporary_folder_is_compiled_again(
    tmp_path: Path, removed: str
) -> None:
    # The compiled probe (and the module it loads from beside it) lie in the temporary
    # folder for the process's life; a cleaner of that folder (systemd-tmpfiles: files
    # unread for 10 days) may remove one. The next validation compiles them again, rather
    # than every later one failing to start.
    wheel = build_plugin(tmp_path, "opm-probe-again", "1.0.0", op_name=OP, source=GOOD)
    assert validate_wheel(wheel, limits=Limits(timeout_s=60)).status == "validated"
    _, code = _probe_code(sys.executable)
    code.with_name(removed).unlink()
    verdict = validate_wheel(wheel, limits=Limits(timeout_s=60))
    assert verdict.status == "validated", verdict.log_text()
    assert _probe_code(sys.executable)[1].with_name(removed).is_file()
