"""Two real PyTorch releases: 2.13.0's and 2.14.1's operator schemas (data/, read from the
schema strings of each release's libtorch_cpu.so; 2.14.1's wheel is a CUDA build that a
CPU-only machine cannot import). compat-check's verdicts equal PyTorch's own checks, run by
the installed torch on the same text, in both directions."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from pathlib import Path

import pytest

from tests.compat.test_cli import run

DATA = Path(__file__).resolve().parent / "data"


def _unpack(tmp_path: Path, version: str) -> Path:
    out = tmp_path / f"torch-{version}.txt"
    with gzip.open(DATA / f"torch-{version}-schemas.txt.gz", "rt", encoding="utf-8") as f:
        out.write_text(f.read(), encoding="utf-8")
    return out


def _rejected_by_pytorch(torch: object, old: Path, new: Path, direction: str) -> set[str]:
    parse = torch._C.parse_schema  # type: ignore[attr-defined]
    lines = [
        [x for x in p.read_text(encoding="utf-8").splitlines() if not x.startswith("#")]
        for p in (old, new)
    ]
    by_name = defaultdict(list)
    for text in lines[1]:
        schema = parse(text)
        by_name[schema.name].append(schema)
    rejected = set()
    for text in lines[0]:
        schema = parse(text)
        ok = False
        for candidate in by_name[schema.name]:
            if direction == "backward":
                ok = candidate.is_backward_compatible_with(schema)
            else:
                ok = candidate.check_forward_compatible_with(schema)[0]
            if ok:
                break
        if not ok:
            rejected.add(text[: text.index("(")])
    return rejected


@pytest.mark.parametrize("direction", ["backward", "forward"])
def test_213_to_2141_gets_pytorchs_verdict_on_every_schema(tmp_path: Path, direction: str) -> None:
    torch = pytest.importorskip("torch")
    old, new = _unpack(tmp_path, "2.13.0"), _unpack(tmp_path, "2.14.1")
    done = run("compat-check", old, new, "--direction", direction, "--format", "json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    ours = {f["op"] for f in report["findings"] if f["severity"] == "breaking"}
    assert ours == _rejected_by_pytorch(torch, old, new, direction)
    assert report["ops_compared"] > 3600


def test_213_to_2141_names_what_changed(tmp_path: Path) -> None:
    old, new = _unpack(tmp_path, "2.13.0"), _unpack(tmp_path, "2.14.1")
    done = run("compat-check", old, new, "--format", "json")
    found = {(f["op"], f["rule"]) for f in json.loads(done.stdout)["findings"]}
    # 2.14 renamed the gradient argument of the distance backward ops, and gave
    # _cudnn_attention_forward two optional keyword arguments
    assert ("aten::_cdist_backward", "argument-renamed") in found
    assert ("aten::_pdist_backward.out", "argument-renamed") in found
    assert ("aten::_cudnn_attention_forward", "argument-added") in found
