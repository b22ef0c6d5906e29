"""The opmarket CLI as a user runs it: a real subprocess, exit codes, files, messages."""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest

EXAMPLES = Path(__file__).parent.parent / "docs" / "examples"
OPMARKET = shutil.which("opmarket", path=str(Path(sys.executable).parent))


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    assert OPMARKET, "the opmarket console script is not installed in this environment"
    return subprocess.run([OPMARKET, *args], capture_output=True, text=True, cwd=cwd, check=False)


def test_convert_spec_to_each_format_and_back(tmp_path: Path) -> None:
    src = EXAMPLES / "seed-ops.json"
    pbtxt = run("convert", str(src), "--to", "tf-pbtxt")
    assert pbtxt.returncode == 0, pbtxt.stderr
    assert 'name: "Opm>ZeroOut"' in pbtxt.stdout
    (tmp_path / "ops.pbtxt").write_text(pbtxt.stdout)
    out = tmp_path / "ops.json"
    done = run("convert", str(tmp_path / "ops.pbtxt"), "--to", "json", "-o", str(out))
    assert done.returncode == 0 and done.stdout == ""
    canonical = json.loads(out.read_text())
    assert canonical["format"] == "opmarket.opset"
    assert len(canonical["ops"]) == 6
    # Canonical JSON sorts ops by name; otherwise nothing changes on the way round.
    back = json.loads(run("convert", str(out), "--to", "spec").stdout)["ops"]
    direct = json.loads(run("convert", str(src), "--to", "spec").stdout)["ops"]
    assert back == sorted(direct, key=lambda o: o["name"])


def test_invalid_ops_list_every_problem_and_write_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    done = run("convert", str(EXAMPLES / "broken-ops.json"), "-o", str(out))
    assert done.returncode == 1
    assert not out.exists()
    lines = done.stderr.strip().splitlines()
    assert lines[-1] == f"{len(lines) - 1} problem(s) found"
    assert any('op Opm>Broken: Attr("T: {float8_e5m2, float}")' in line for line in lines)
    assert any("op Opm>Typo" in line and "DT_FLAOT" in line for line in lines)
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        ('{"x": 1}', "neither an opmarket op-set"),
        ("{not json", "invalid JSON"),
        ("op { name: ", "not TensorFlow text format"),
        ('{"format": "opmarket.opset", "format_version": 7, "ops": []}', "upgrade opmarket"),
        ("", "empty file"),
        ("[" * 100_000, "nested too deeply"),
        ("op { attr { default_value { tensor {" + " variant_val { tensors {" * 400, "nested"),
    ],
)
def test_unreadable_input_is_exit_2_with_one_line(
    tmp_path: Path, content: str | None, message: str
) -> None:
    path = tmp_path / "in.json"
    if content is not None:
        path.write_text(content)
    done = run("convert", str(path))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and message in done.stderr
    assert done.stderr.startswith("opmarket: error: ")


def test_bad_usage_is_exit_2() -> None:
    done = run("convert", str(EXAMPLES / "seed-ops.json"), "--to", "yaml")
    assert done.returncode == 2 and "Invalid value for '--to'" in done.stderr


def test_help_explains_formats_and_exit_codes() -> None:
    done = run("--help")
    assert done.returncode == 0
    assert "Exit codes" in done.stdout and "spec-form JSON" in done.stdout
    assert "--to" in run("convert", "--help").stdout


def test_full_types_left_out_of_spec_form_are_noted(tensorflow_testdata: Path) -> None:
    done = run(
        "convert",
        str(tensorflow_testdata / "tf_ops_history_v2" / "MapDataset.pbtxt"),
        "--to",
        "spec",
    )
    assert done.returncode == 0
    assert "note: op MapDataset: the full type of output 'handle'" in done.stderr


def test_converting_away_from_json_says_kernels_are_left_out(tmp_path: Path) -> None:
    path = tmp_path / "k.json"
    path.write_text(
        json.dumps(
            {
                "format": "opmarket.opset",
                "format_version": 1,
                "ops": [{"name": "A"}],
                "kernels": [{"op": "A", "device": "CPU"}],
            }
        )
    )
    done = run("convert", str(path), "--to", "tf-pbtxt")
    assert done.returncode == 0
    assert "note: 1 kernel(s) left out: only canonical JSON carries kernels" in done.stderr
    assert "note:" not in run("convert", str(path), "--to", "json").stderr


# What a command's --help may import: click and opmarket's CLI modules, nothing that does work.
HEAVY = (
    "numpy",
    "google.protobuf",
    "opmarket.sdk",
    "opmarket.registry._dispatch",
    "opmarket.compat._engine",
    "fastapi",
    "sqlalchemy",
)

HELP_PROBE = """
import sys
from {module} import main
try:
    main(["--help"])
except SystemExit as exc:
    assert exc.code == 0, exc.code
print("imported:", ",".join(sorted(m for m in sys.modules if m.startswith({heavy}))))
"""


@pytest.mark.parametrize("module", ["opmarket.cli", "opmarket.cli._compat"])
def test_help_imports_nothing_heavy(module: str) -> None:
    """`opmarket --help` and `compat-check --help` answer without importing the engine (they
    answer in well under 0.1 s; what they import is what can be checked without a clock)."""
    code = HELP_PROBE.format(module=module, heavy=HEAVY)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "imported: ", done.stdout


def test_listing_shows_each_commands_own_first_line_whole() -> None:
    """`opmarket --help` lists each command with the first paragraph of its own help (its
    docstring), written once and shown whole: none cut off mid-sentence."""
    from opmarket.cli._main import _COMMANDS

    listing = run("--help").stdout
    shown: dict[str, str] = {}
    for row in listing.partition("Commands:")[2].splitlines():
        if row.startswith("  ") and not row.startswith("   "):  # a command, then its help
            name, _, help_ = row.strip().partition(" ")
            shown[name] = help_.strip()
        elif row.strip():  # its help, wrapped
            shown[name] += " " + row.strip()
    assert sorted(shown) == sorted([*_COMMANDS, "convert"])
    where = {**_COMMANDS, "convert": ("opmarket.cli._main", "convert")}
    for name, (module, attr) in where.items():
        command = getattr(importlib.import_module(module), attr)
        first = " ".join((command.help or "").split("\n\n")[0].split())
        assert shown[name] == first, name


# Third-party libraries are imported once up front (a cycle can only run through our own
# modules); then each of our modules is imported first in a forked child that has none of ours,
# as many children at once as there are CPUs (each is on its own: the parent imports nothing).
IMPORT_ALONE = """
import importlib, os, sys
import click, numpy, pluggy, packaging.version, google.protobuf, fastapi, sqlalchemy
assert not [m for m in sys.modules if m.startswith("opmarket")]
running = set()
for name in sys.argv[1:]:
    if len(running) >= (os.cpu_count() or 1):
        running.discard(os.wait()[0])
    pid = os.fork()
    if pid == 0:
        try:
            importlib.import_module(name)
        except BaseException as exc:
            print(f"{name}: {type(exc).__name__}: {exc}", flush=True)
            os._exit(1)
        os._exit(0)
    running.add(pid)
while running:
    running.discard(os.wait()[0])
"""


@pytest.mark.slow
def test_every_module_imports_on_its_own() -> None:
    """No import cycle: each module of the package imports first, in a fresh interpreter."""
    names = ["opmarket"]
    packages = ("opmarket", "opmarket.cli", "opmarket.sdk", "opmarket.registry", "opmarket.compat")
    for pkg in (*packages, "opmarket.web"):
        path = importlib.import_module(pkg).__path__
        names += [f"{pkg}.{m.name}" for m in pkgutil.iter_modules(path)]
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_ALONE, *sorted(set(names))],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize(
    ("command", "url", "why"),
    [
        (["install", "opm-x"], "http://[::1", "is not a URL: Invalid IPv6 URL"),
        (["status", "opm-x==1.0"], "http://host:port/", "is not a URL: Port could not"),
        (["install", "opm-x"], "ftp://host/simple/", "is not the URL of an index"),
        (["compat-check", "a==1", "b==2"], "simple/", "is not the URL of an index"),
    ],
)
def test_an_index_url_that_is_no_url_is_one_line_and_exit_2(
    command: list[str], url: str, why: str
) -> None:
    program = command[0] if command[0] == "compat-check" else "opmarket"
    args = command[1:] if program == "compat-check" else command
    done = subprocess.run(
        [str(Path(sys.executable).parent / program), *args, "--index-url", url],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"{program}: error: --index-url: {url!r} {why}"), done.stderr
    assert done.stderr.count("\n") == 1, done.stderr  # one line, no traceback


# Runs the CLI as a Python without the web extra would: an import hook refuses the extra's
# packages (what `import fastapi` raises where it is not installed), then `opmarket ARGS`.
WITHOUT_WEB = """
import sys

REFUSED = {"fastapi", "pydantic", "pydantic_settings", "sqlalchemy", "starlette", "uvicorn"}


class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in REFUSED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Refuse())
from opmarket.cli import main

main(sys.argv[1:], prog_name="opmarket")
"""


def _required_arguments(command: Any, tmp_path: Path) -> list[str]:
    """Values that pass click's parsing for a command's required parameters."""
    values: list[str] = []
    for param in command.params:
        if not param.required:
            continue
        if isinstance(param.type, click.Path):
            value = str(tmp_path) if not param.type.file_okay else str(tmp_path / "x.whl")
        elif isinstance(param.type, (click.types.IntParamType, click.types.FloatParamType)):
            value = "1"
        else:
            value = "x"
        values += [value] if isinstance(param, click.Argument) else [param.opts[0], value]
    return values


def _web_command_lines(tmp_path: Path) -> list[list[str]]:
    """Every command (and subcommand) of the CLI that lives in opmarket.web, with arguments."""
    from opmarket.cli._main import _COMMANDS, _WEB_COMMANDS

    lines = []
    for name, (module, attr) in sorted(_COMMANDS.items()):
        if name not in _WEB_COMMANDS:
            continue
        command = getattr(importlib.import_module(module), attr)
        subcommands = getattr(command, "commands", {})
        for sub, sub_command in sorted(subcommands.items()) or [("", command)]:
            lines.append(
                [name, *([sub] if sub else []), *_required_arguments(sub_command, tmp_path)]
            )
    return lines


def test_commands_without_the_web_extra_say_which_extra_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "x.whl").write_bytes(b"")
    env = {**os.environ, "OPMARKET_DATA_DIR": str(tmp_path / "data")}
    said_web = set()
    for line in _web_command_lines(tmp_path):
        done = subprocess.run(
            [sys.executable, "-c", WITHOUT_WEB, *line],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=120,
            check=False,
        )
        assert "Traceback" not in done.stderr, (line, done.stderr)
        if "opmarket[web]" in done.stderr:
            assert done.returncode == 2, (line, done.stderr)
            assert done.stderr.count("\n") == 1, (line, done.stderr)
            assert done.stderr.startswith(f"opmarket: error: opmarket {line[0]} needs the ")
            said_web.add(line[0])
    # The commands found without the extra; validate and status run without it.
    assert {"users", "tokens", "serve", "yank", "host", "seed", "worker"} <= said_web


# A web command whose own code imports a module that is missing, but not one the web extra
# brings (a plugin's dependency, say): that is no missing extra, and is not said to be one.
MISSING_OTHER = """
import sys


class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name == "opmarket.cli._web":  # as if that module imported acme_dep
            raise ModuleNotFoundError("No module named 'acme_dep'", name="acme_dep")
        return None


sys.meta_path.insert(0, Refuse())
from opmarket.cli import main

main(sys.argv[1:], prog_name="opmarket")
"""


def test_a_missing_module_the_web_extra_does_not_bring_is_not_called_the_extra() -> None:
    done = subprocess.run(
        [sys.executable, "-c", MISSING_OTHER, "users", "list"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert "opmarket[web]" not in done.stderr
    assert "ModuleNotFoundError: No module named 'acme_dep'" in done.stderr


@pytest.mark.parametrize("extra", ["web", "web-gpu", "postgres"])
def test_the_web_extras_modules_cover_their_requirements(extra: str) -> None:
    # Each requirement of a web extra, installed here, brings only modules the CLI knows as
    # that extra's (else a Python without it would get a traceback, not the hint).
    import importlib.metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    from opmarket.cli._main import _EXTRA_MODULES

    wanted = set()
    for line in importlib.metadata.requires("opmarket") or []:
        requirement = Requirement(line)
        marker = requirement.marker
        if requirement.name == "opmarket":  # web-gpu and postgres bring web: its own test
            continue
        if marker and marker.evaluate({"extra": extra}) and not marker.evaluate({"extra": ""}):
            wanted.add(canonicalize_name(requirement.name))
    assert wanted
    modules = {
        module
        for module, dists in importlib.metadata.packages_distributions().items()
        if any(canonicalize_name(d) in wanted for d in dists) and not module.startswith("_")
    }
    assert modules - _EXTRA_MODULES[extra] == set()
