"""compat-check and opmarket snapshot as users run them: real subprocesses, exit codes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import pytest

from opmarket.sdk import DType, OpSet, opset_to_json

Release = Callable[..., OpSet]
Wheel = Callable[[OpSet], Path]
BIN = Path(sys.executable).parent


def run(
    tool: str, *args: str | Path, cwd: Path | None = None, path: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a console script; ``path`` goes on PYTHONPATH (an 'installed' plugin, a module)."""
    exe = shutil.which(tool, path=str(BIN))
    assert exe, f"the {tool} console script is not installed in this environment"
    env = dict(os.environ)
    if path is not None:
        env["PYTHONPATH"] = str(path)
    return subprocess.run(
        [exe, *map(str, args)], capture_output=True, text=True, cwd=cwd, check=False, env=env
    )


def write(path: Path, opset: OpSet) -> Path:
    path.write_text(opset_to_json(opset), encoding="utf-8")
    return path


@pytest.fixture
def pair(tmp_path: Path, release: Release) -> tuple[Path, Path, Path]:
    """An old release, a compatible new one and a breaking new one, as op-set files."""
    old = write(tmp_path / "old.json", release("1.0.0"))
    ok = write(tmp_path / "ok.json", release("1.1.0", extra_attr="mode: string = 'x'"))
    bad = write(tmp_path / "bad.json", release("2.0.0", extra_attr="mode: string"))
    return old, ok, bad


def test_compatible_release_exits_0_with_a_linter_like_report(
    pair: tuple[Path, Path, Path],
) -> None:
    old, ok, _ = pair
    done = run("compat-check", old, ok)
    assert done.returncode == 0, done.stderr
    assert "Opm>ZeroOut: attr-added [info] new attr 'mode'" in done.stdout
    assert "compatible; 1 ops compared, 0 breaking, 0 warning, 1 info" in done.stdout
    assert "version: 1.0.0 -> 1.1.0: ok" in done.stdout


def test_breaking_release_exits_1_and_says_how_to_fix(pair: tuple[Path, Path, Path]) -> None:
    old, _, bad = pair
    done = run("compat-check", old, bad)
    assert done.returncode == 1
    assert (
        "Opm>ZeroOut: attr-added-without-default [breaking] attr 'mode' added without a default"
        in done.stdout
    )
    assert "    fix: Give the new attr a default" in done.stdout
    assert "NOT compatible" in done.stdout


def test_json_report(pair: tuple[Path, Path, Path]) -> None:
    old, _, bad = pair
    done = run("compat-check", old, bad, "--format", "json")
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["compatible"] is False
    assert report["version"]["ok"] is True and report["version"]["required"] == "major"
    # TensorFlow's rules and PyTorch's (for the schema opmarket.torch registers) both break
    assert [{k: f[k] for k in ("op", "rule", "rules", "severity")} for f in report["findings"]] == [
        {
            "op": "Opm>ZeroOut",
            "rule": "attr-added-without-default",
            "rules": "tensorflow",
            "severity": "breaking",
        },
        {
            "op": "opm::zero_out",
            "rule": "argument-added-without-default",
            "rules": "pytorch",
            "severity": "breaking",
        },
    ]
    assert all(f["message"] and f["hint"] for f in report["findings"])


def test_markdown_report(pair: tuple[Path, Path, Path]) -> None:
    old, _, bad = pair
    done = run("compat-check", old, bad, "--format", "markdown")
    assert done.returncode == 1
    assert done.stdout.startswith("### compat-check: breaking changes")
    assert "| **breaking** | `Opm>ZeroOut` | `attr-added-without-default` |" in done.stdout


def test_too_small_bump_exits_1_without_breaking_changes(
    pair: tuple[Path, Path, Path],
) -> None:
    old, ok, _ = pair
    done = run("compat-check", old, ok, "--new-version", "1.0.1", "--format", "json")
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["compatible"] is True and report["ok"] is False
    assert report["version"]["suggested"] == "1.1.0"


def test_wheels_carry_versions_and_kernels(release: Release, wheel: Wheel) -> None:
    old = wheel(release("1.0.0"))
    new = wheel(release("1.0.1", kernel_types=(DType.FLOAT,)))
    done = run("compat-check", old, new)
    assert done.returncode == 1
    assert "kernel-removed [breaking] no kernel any more for CPU with T=int32" in done.stdout
    assert "1.0.0 -> 1.0.1 is a patch bump, too small" in done.stdout
    assert "the smallest honest version is 2.0.0" in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.json", "other.json"], "compat-check: error: missing.json: no such file"),
        (["only-one.json"], "compat-check: error: expected OLD NEW, got 1 argument(s)"),
        (
            ["not-a-plugin", "x"],
            "compat-check: error: not-a-plugin: no such file, and no installed distribution by "
            "that name",
        ),
    ],
)
def test_bad_usage_exits_2_with_one_line(args: list[str], message: str, tmp_path: Path) -> None:
    done = run("compat-check", *args, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip() == message
    assert done.stdout == ""


def test_errors_name_the_program_the_user_ran(tmp_path: Path) -> None:
    for tool, args in [("compat-check", []), ("opmarket", ["compat"])]:
        done = run(tool, *args, "missing.json", "other.json", cwd=tmp_path)
        assert done.returncode == 2
        assert done.stderr == f"{tool}: error: missing.json: no such file\n"


def test_unreadable_file_exits_2_naming_it(tmp_path: Path, pair: tuple[Path, Path, Path]) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{"format": "opmarket.opset", "format_version": 1, "ops": 3}')
    done = run("compat-check", pair[0], broken)
    assert done.returncode == 2
    assert done.stderr.startswith(f"compat-check: error: {broken}: ")
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("tool", ["compat-check", "snapshot"])
def test_an_unwritable_output_exits_2_with_one_line(
    tmp_path: Path, pair: tuple[Path, Path, Path], tool: str
) -> None:
    target = tmp_path / "no-such-folder" / "report.txt"
    args = [pair[0], pair[1]] if tool == "compat-check" else ["snapshot", "mymod"]
    if tool == "snapshot":
        (tmp_path / "mymod.py").write_text(
            "from opmarket.sdk import op\nX = op('Mine>X').input('x: int32')\n"
        )
    done = run(
        "compat-check" if tool == "compat-check" else "opmarket",
        *args,
        "-o",
        target,
        cwd=tmp_path,
        path=tmp_path,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert f"error: {target}: cannot write: No such file or directory" in done.stderr
    assert not target.parent.exists()


def test_bad_version_exits_2(pair: tuple[Path, Path, Path]) -> None:
    done = run("compat-check", pair[0], pair[1], "--new-version", "banana")
    assert done.returncode == 2
    assert "'banana' is not a valid version" in done.stderr


def test_opmarket_compat_is_the_same_command(pair: tuple[Path, Path, Path]) -> None:
    done = run("opmarket", "compat", pair[0], pair[2], "--format", "json")
    assert done.returncode == 1
    assert json.loads(done.stdout)["compatible"] is False


def test_history_workflow(
    tmp_path: Path, release: Release, wheel: Wheel, installed: Callable[[OpSet], Path]
) -> None:
    history = tmp_path / "history.json"
    for version in ("1.0.0", "1.1.0"):
        done = run("opmarket", "snapshot", wheel(release(version)), "--append", history)
        assert done.returncode == 0, done.stderr
        assert f"added release {version}" in done.stderr
    installed(release("1.2.0"))
    snap = tmp_path / "snap.json"
    done = run("opmarket", "snapshot", "opm-zero", "-o", snap, path=tmp_path / "site")
    assert done.returncode == 0, done.stderr
    assert json.loads(snap.read_text())["version"] == "1.2.0"
    ok = run("compat-check", "--history", history, snap)
    assert ok.returncode == 0, ok.stdout
    bad = write(tmp_path / "bad.json", release("1.3.0", kernel_types=(DType.FLOAT,)))
    broken = run("compat-check", "--history", history, bad, "--format", "json")
    assert broken.returncode == 1
    assert {f["rule"] for f in json.loads(broken.stdout)["findings"]} == {"kernel-removed"}


def test_history_accepts_tensorflow_ops_history(tensorflow_testdata: Path, tmp_path: Path) -> None:
    folder = tensorflow_testdata / "tf_ops_history_v2"
    latest = tmp_path / "ops.pbtxt"
    # Today's ops: the last version of each history file.
    texts = [f.read_text(encoding="utf-8") for f in sorted(folder.glob("*.pbtxt"))]
    last_ops = [t[t.rindex("\nop {") + 1 :] if "\nop {" in t else t for t in texts]
    latest.write_text("".join(last_ops), encoding="utf-8")
    done = run("compat-check", "--history", folder, latest, "--format", "json")
    assert done.returncode == 0, done.stdout  # as TensorFlow's own history check passes
    assert json.loads(done.stdout)["ops_compared"] == 45
    # Relu without its T attr breaks against every version that had it.
    relu = (folder / "Relu.pbtxt").read_text(encoding="utf-8")
    last = relu[relu.rindex("\nop {") + 1 :]
    renamed = last.replace('name: "T"', 'name: "U"')
    latest.write_text(latest.read_text(encoding="utf-8").replace(last, renamed), encoding="utf-8")
    done = run("compat-check", "--history", folder, latest, "--format", "json")
    assert done.returncode == 1
    assert {
        (f["op"], f["rule"])
        for f in json.loads(done.stdout)["findings"]
        if f["severity"] == "breaking"
    } >= {("Relu", "attr-removed")}


def test_snapshot_of_a_module_with_ops(tmp_path: Path) -> None:
    (tmp_path / "mymod.py").write_text(
        "from opmarket.sdk import op\n"
        "ZERO = op('Mine>ZeroOut').input('x: int32').output('y: int32')\n",
        encoding="utf-8",
    )
    done = run("opmarket", "snapshot", "mymod", "--version", "0.1.0", cwd=tmp_path, path=tmp_path)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["version"] == "0.1.0"
    assert [o["name"] for o in data["ops"]] == ["Mine>ZeroOut"]


def test_snapshot_of_nothing_exits_2(tmp_path: Path) -> None:
    done = run("opmarket", "snapshot", "no_such_module_or_dist_x", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("opmarket: error: no_such_module_or_dist_x: ")


def _module(folder: Path) -> str:
    (folder / "mymod.py").write_text(
        "from opmarket.sdk import op\nX = op('Mine>X').input('x: int32').output('y: int32')\n"
    )
    return "mymod"


def test_snapshot_refuses_a_version_that_is_not_pep_440(tmp_path: Path) -> None:
    history = tmp_path / "history.json"
    done = run(
        "opmarket",
        "snapshot",
        _module(tmp_path),
        "--version",
        "banana",
        "--append",
        history,
        cwd=tmp_path,
        path=tmp_path,
    )
    assert done.returncode == 2
    assert done.stderr == (
        "opmarket: error: --version: 'banana' is not a valid version (PEP 440)\n"
    )
    assert not history.exists()


@pytest.mark.parametrize("kind", ["op-set", "spec", "pbtxt"])
def test_snapshot_appends_only_to_a_history(tmp_path: Path, release: Release, kind: str) -> None:
    from opmarket.sdk import render_document

    opset = release("1.0.0")
    target = tmp_path / f"ops.{'pbtxt' if kind == 'pbtxt' else 'json'}"
    formats: dict[str, Literal["json", "spec", "tf-pbtxt"]] = {
        "op-set": "json",
        "spec": "spec",
        "pbtxt": "tf-pbtxt",
    }
    text = render_document(opset.ops, formats[kind], opset.kernels)
    target.write_text(text, encoding="utf-8")
    done = run(
        "opmarket",
        "snapshot",
        _module(tmp_path),
        "--version",
        "1.1.0",
        "--append",
        target,
        cwd=tmp_path,
        path=tmp_path,
    )
    assert done.returncode == 2
    assert done.stderr.startswith(f"opmarket: error: {target}: not an opmarket history file")
    assert done.stderr.count("\n") == 1
    assert target.read_text(encoding="utf-8") == text


def test_fail_on_version_passes_a_break_released_as_a_major_bump(
    pair: tuple[Path, Path, Path],
) -> None:
    old, _, bad = pair  # bad: a breaking change released as 2.0.0
    done = run("compat-check", old, bad, "--fail-on", "version", "--format", "json")
    assert done.returncode == 0, done.stdout
    report = json.loads(done.stdout)
    assert report["compatible"] is False and report["ok"] is True
    assert report["fail_on"] == "version"
    markdown = run("compat-check", old, bad, "--fail-on", "version", "--format", "markdown")
    assert markdown.returncode == 0
    assert markdown.stdout.startswith(
        "### compat-check: breaking changes, released as a major bump"
    )
    assert "**Version:** 1.0.0 -> 2.0.0: ok (" in markdown.stdout


def test_fail_on_version_fails_a_break_released_as_a_minor_bump(
    pair: tuple[Path, Path, Path],
) -> None:
    old, _, bad = pair
    done = run("compat-check", old, bad, "--fail-on", "version", "--new-version", "1.1.0")
    assert done.returncode == 1
    assert "version: 1.0.0 -> 1.1.0 is a minor bump, too small" in done.stdout
    markdown = run(
        "compat-check", old, bad, "--new-version", "1.1.0", "--format", "markdown"
    ).stdout
    assert markdown.startswith("### compat-check: version bump too small")
    assert "**Version too small:** 1.0.0 -> 1.1.0 is a minor bump" in markdown


def test_fail_on_never_reports_and_exits_0(pair: tuple[Path, Path, Path]) -> None:
    old, _, bad = pair
    done = run("compat-check", old, bad, "--fail-on", "never")
    assert done.returncode == 0
    assert "NOT compatible" in done.stdout


def test_fail_on_version_without_versions_is_a_usage_error(
    tmp_path: Path, release: Release
) -> None:
    def unversioned(opset: OpSet) -> OpSet:
        return OpSet.of(list(opset.ops), opset.kernels, name=opset.name)

    old = write(tmp_path / "a.json", unversioned(release("1.0.0")))
    new = write(tmp_path / "b.json", unversioned(release("2.0.0", extra_attr="mode: string")))
    done = run("compat-check", old, new, "--fail-on", "version")
    assert done.returncode == 2
    assert "--fail-on version needs both releases' versions" in done.stderr


def test_graphs_name_each_node_that_relies_on_a_changed_default(
    tmp_path: Path, release: Release
) -> None:
    """clip_max's default 6 -> 1: a graph saved before defaults were stored (format 2) takes
    the new default and computes [1, 1] instead of [3, 6]; compat-check names its node. A graph
    saved now stores 6 and keeps its meaning."""
    old_set = release("1.0.0", extra_attr="clip_max: float = 6.0")
    new_set = release("1.0.1", extra_attr="clip_max: float = 1.0")
    old = write(tmp_path / "old.json", old_set)
    new = write(tmp_path / "new.json", new_set)
    graphs = tmp_path / "graphs"
    graphs.mkdir()
    node = {"name": "clipped", "op": "Opm>ZeroOut", "inputs": ["x:0"]}
    placeholder = {
        "name": "x",
        "op": "Placeholder",
        "inputs": [],
        "attrs": {"dtype": {"type": "type", "value": "float"}},
    }
    (graphs / "before.json").write_text(
        json.dumps(
            {
                "format": "opmarket.graph",
                "format_version": 2,
                "nodes": [
                    placeholder,
                    {**node, "attrs": {"T": {"type": "type", "value": "float"}}},
                ],
            }
        )
    )
    from opmarket.registry import Graph, save_graph

    g = Graph()
    x = g.placeholder("float", name="x")
    g.add("Opm>ZeroOut", x, name="clipped", T="float")
    save_graph(g, graphs / "now.json", ops=old_set)

    done = run("compat-check", old, new, "--graphs", graphs, "--format", "json")
    assert done.returncode == 1
    findings = [f for f in json.loads(done.stdout)["findings"] if f.get("graph")]
    assert [(f["rule"], Path(f["graph"]).name) for f in findings] == [
        ("graph-default-changed", "before.json")
    ]
    assert findings[0]["message"] == (
        "node 'clipped' takes attr 'clip_max' from its default (saved before defaults were "
        "stored): 6.0 when saved, 1.0 now, so its result changes"
    )
