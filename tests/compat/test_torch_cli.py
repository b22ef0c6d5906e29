"""compat-check with PyTorch's schema rules, as users run it: schema lists, plugin releases
whose schemas TensorFlow's rules accept and PyTorch's do not, ``--direction``, bad input."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from opmarket.sdk import OpSet, op
from tests.compat.test_cli import run, write

OLD = """\
# PyTorch 2.x, as str() of torch._C._jit_get_all_schemas()
aten::qr(Tensor self, bool some=True) -> (Tensor Q, Tensor R)
aten::qr.Q(Tensor self, bool some=True, *, Tensor(a!) Q, Tensor(b!) R) -> (Tensor(a!), Tensor(b!))
aten::sum(Tensor self, *, ScalarType? dtype=None) -> Tensor
aten::gone(Tensor self) -> Tensor
"""
NEW = """\
aten::qr(Tensor self, bool reduced=True) -> (Tensor Q, Tensor R)
aten::qr.Q(Tensor self, bool some=True, *, Tensor(a!) Q, Tensor(b!) R) -> (Tensor(a!), Tensor(b!))
aten::sum(Tensor self, *, ScalarType? dtype=None, bool keepdim=False) -> Tensor
aten::added(Tensor self) -> Tensor
"""


@pytest.fixture
def lists(tmp_path: Path) -> tuple[Path, Path]:
    old, new = tmp_path / "old.txt", tmp_path / "new.txt"
    old.write_text(OLD, encoding="utf-8")
    new.write_text(NEW, encoding="utf-8")
    return old, new


def test_schema_lists_get_a_finding_per_operator_overload(lists: tuple[Path, Path]) -> None:
    old, new = lists
    done = run("compat-check", old, new, "--format", "json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    got = [(f["op"], f["rule"], f["rules"], f["severity"]) for f in report["findings"]]
    assert got == [
        ("aten::gone", "schema-removed", "pytorch", "breaking"),
        ("aten::qr", "argument-renamed", "pytorch", "breaking"),
        ("aten::added", "schema-added", "pytorch", "info"),
        ("aten::sum", "argument-added", "pytorch", "info"),
    ]
    assert report["ops_compared"] == 4
    assert all(f["hint"] for f in report["findings"])
    text = run("compat-check", old, new).stdout
    assert "aten::qr: argument-renamed [breaking, pytorch] argument 'some'" in text
    assert "    fix: Keep names and order" in text


def test_direction_forward_is_pytorchs_forward_check(tmp_path: Path) -> None:
    old, new = tmp_path / "old.txt", tmp_path / "new.txt"
    old.write_text("aten::f(Tensor self, int n) -> Tensor\n", encoding="utf-8")
    new.write_text("aten::f(Tensor self, int n=1, int[] k=[1]) -> Tensor\n", encoding="utf-8")
    backward = run("compat-check", old, new, "--format", "json")
    assert backward.returncode == 0, backward.stdout
    forward = run("compat-check", old, new, "--direction", "forward", "--format", "json")
    assert forward.returncode == 1
    found = json.loads(forward.stdout)["findings"]
    rules = {f["rule"] for f in found if f["severity"] == "breaking"}
    assert rules == {"argument-default-added", "argument-added-with-list-default"}


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("aten::f(Tensor self) -> Tensor\naten::g(Tensor self -> Tensor\n", "new.txt:2: not a"),
        ("aten::f(Tensor self) -> Tensor\naten::g(Foo self) -> Tensor\n", "unknown type 'Foo'"),
    ],
)
def test_a_line_that_is_not_a_schema_is_exit_2_naming_file_and_line(
    tmp_path: Path, text: str, error: str
) -> None:
    old, new = tmp_path / "old.txt", tmp_path / "new.txt"
    old.write_text("aten::f(Tensor self) -> Tensor\n", encoding="utf-8")
    new.write_text(text, encoding="utf-8")
    done = run("compat-check", old, new)
    assert done.returncode == 2
    assert error in done.stderr and "new.txt:2" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_a_schema_list_against_an_op_set_is_exit_2(
    lists: tuple[Path, Path], tmp_path: Path, release: Callable[..., OpSet]
) -> None:
    old, _ = lists
    opset = write(tmp_path / "new.json", release("1.0.0"))
    done = run("compat-check", old, opset)
    assert done.returncode == 2
    assert "compare like with like" in done.stderr
    done = run("compat-check", "--history", old, old)
    assert done.returncode == 2


def _zero_out(input_name: str, attrs: tuple[str, ...], version: str = "1.0.0") -> OpSet:
    b = op("Opm>ZeroOut").input(f"{input_name}: int32").output("zeroed: int32")
    for a in attrs:
        b.attr(a)
    return OpSet.of([b.build()], name="opm-zero", version=version)


def test_a_plugin_release_tensorflow_accepts_and_torch_export_does_not(tmp_path: Path) -> None:
    # TensorFlow matches inputs by position and attrs by name; PyTorch's schema check
    # matches arguments by name and position, keyword-only ones included.
    old = write(tmp_path / "old.json", _zero_out("to_zero", ("a: int = 0", "b: int = 0")))
    new = write(tmp_path / "new.json", _zero_out("x", ("b: int = 0", "a: int = 0")))
    done = run("compat-check", old, new, "--format", "json")
    assert done.returncode == 1, done.stderr
    findings = json.loads(done.stdout)["findings"]
    breaking = [(f["op"], f["rule"], f["rules"]) for f in findings if f["severity"] == "breaking"]
    assert breaking == [("opm::zero_out", "argument-renamed", "pytorch")] * 3
    assert {f["rules"] for f in findings if f["severity"] != "breaking"} == {"tensorflow"}


def test_a_default_given_to_an_attr_breaks_only_forward(tmp_path: Path) -> None:
    old = write(tmp_path / "old.json", _zero_out("to_zero", ("a: int",)))
    new = write(tmp_path / "new.json", _zero_out("to_zero", ("a: int = 3",), "1.1.0"))
    assert run("compat-check", old, new).returncode == 0
    done = run("compat-check", old, new, "--direction", "forward", "--format", "json")
    assert done.returncode == 1
    (finding,) = [f for f in json.loads(done.stdout)["findings"] if f["severity"] == "breaking"]
    assert (finding["op"], finding["rule"]) == ("opm::zero_out", "argument-default-added")
