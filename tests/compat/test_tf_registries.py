"""compat-check of two whole TensorFlow registries (2.12 -> 2.21, tests/sdk/data): the fast
text reader gives the findings protobuf's parser gave. bench/compat_tf.py times the same run."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

from opmarket.compat import render
from opmarket.compat._check import check_sources
from opmarket.compat._sources import Source, latest_versions
from opmarket.sdk import OpSet
from opmarket.sdk._documents import _problems_of
from opmarket.sdk._textformat import _opdefs_from_pbtxt_protobuf

DATA = Path(__file__).resolve().parent.parent / "sdk" / "data"


def test_compat_check_of_two_registries_finds_what_the_protobuf_path_finds(
    tmp_path: Path,
) -> None:
    paths, protobuf_ops = [], []
    for name in ("tf212_registry.pbtxt.gz", "tf221_registry.pbtxt.gz"):
        with gzip.open(DATA / name, "rt", encoding="utf-8") as f:
            text = f.read()
        paths.append(tmp_path / name.removesuffix(".gz"))
        paths[-1].write_text(text, encoding="utf-8")
        protobuf_ops.append(_opdefs_from_pbtxt_protobuf(text, name))
    exe = Path(sys.executable).with_name("compat-check")
    proc = subprocess.run(
        [str(exe), *map(str, paths), "--format", "json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr  # 2.21 breaks a few of 2.12's ops
    sources = []
    for path, ops in zip(paths, protobuf_ops, strict=True):
        latest = latest_versions(ops)
        problems = tuple(_problems_of(ops, str(path)))
        sources.append(Source(str(path), OpSet(tuple(latest)), False, problems))
    expected = render(check_sources(sources[0], sources[1]), "json")
    assert json.loads(proc.stdout) == json.loads(expected)
    assert json.loads(proc.stdout)["summary"] == {"breaking": 5, "warning": 2, "info": 171}
