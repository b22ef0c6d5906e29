"""The static GPU checks' tools (cuobjdump, auditwheel) read uploaded files inside the
validation sandbox: what runs there cannot reach the network, the server's files or root,
and where no sandbox can be made the tools do not run at all."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from opmarket.web.gpu._tools import ToolError, ToolSandbox, cuobjdump_path, list_device_code
from opmarket.web.sandbox._run import Limits, sandbox_problem

needs_sandbox = pytest.mark.skipif(
    bool(sandbox_problem(Limits())), reason=f"no sandbox here: {sandbox_problem(Limits())}"
)

_PROBE = """
import json, os, socket, sys
found = {"uid": os.getuid(), "input": open(sys.argv[1], "rb").read().decode()}
try:
    socket.create_connection(("127.0.0.1", 9), timeout=2)
    found["network"] = "connected"
except OSError as exc:
    found["network"] = type(exc).__name__
found["secret"] = os.path.exists(sys.argv[2])
try:
    open(sys.argv[3], "w").write("x")
    found["wrote"] = True
except OSError:
    found["wrote"] = False
print(json.dumps(found))
"""


@needs_sandbox
def test_a_tool_sees_its_input_and_nothing_else_of_the_host(tmp_path: Path) -> None:
    data = tmp_path / "data"  # stands for the server's data folder
    data.mkdir()
    (data / "secret").write_text("token")
    upload = tmp_path / "upload.so"
    upload.write_text("the uploaded bytes")
    sandbox = ToolSandbox(private=(data,))
    done = sandbox.run(
        [
            sys.executable,
            "-I",
            "-c",
            _PROBE,
            "/input/upload.so",
            str(data / "secret"),
            str(tmp_path / "written"),
        ],
        {"/input/upload.so": upload},
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["input"] == "the uploaded bytes"
    assert found["network"] != "connected"
    assert found["secret"] is False
    assert found["wrote"] is False and not (tmp_path / "written").exists()
    if os.geteuid() == 0:
        assert found["uid"] != 0  # dropped to the sandbox user


@pytest.mark.skipif(cuobjdump_path() is None, reason="cuobjdump is not installed")
def test_without_a_sandbox_cuobjdump_does_not_run_on_an_upload(tmp_path: Path) -> None:
    tool = cuobjdump_path()
    assert tool is not None
    library = tmp_path / "lib.so"
    library.write_bytes(b"\x7fELF not really")
    nowhere = ToolSandbox(Limits(bwrap=str(tmp_path / "no-bwrap")))
    with pytest.raises(ToolError, match="no sandbox"):
        list_device_code(tool, library, nowhere)


@needs_sandbox
def test_a_tool_that_runs_past_its_minute_is_stopped(tmp_path: Path) -> None:
    sandbox = ToolSandbox(Limits(timeout_s=1.0))
    with pytest.raises(ToolError, match="sleep"):
        sandbox.run(["/bin/sleep", "30"])
