"""Benchmark ``compat-check`` end to end on two whole TensorFlow op registries.

OLD and NEW are TensorFlow 2.12's and 2.21's registries as OpList text (tests/sdk/data, about
1.1-1.3 MB each). Each run is the real command in a fresh process (``compat-check OLD NEW
--format json``, process start and imports included); the figure is the best of a few runs.
The baseline, measured in the same run, is protobuf's own ``text_format.Parse`` of the same two
files (in this process, imports not counted): what reading them cost before opmarket had its
own reader.

    python bench/compat_tf.py [--repeat R] [OLD.pbtxt[.gz] NEW.pbtxt[.gz]]

The last line is ``compat_tf: X s end to end for N op pairs (protobuf text_format parse
alone: Y s, ratio R)``; the target is X under 0.6 s.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from google.protobuf import text_format

from opmarket.sdk._tfproto import messages

_DATA = Path(__file__).resolve().parent.parent / "tests" / "sdk" / "data"
_DEFAULT = (_DATA / "tf212_registry.pbtxt.gz", _DATA / "tf221_registry.pbtxt.gz")


def _text(path: Path) -> str:
    if path.suffix == ".gz":
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return f.read()
    return path.read_text(encoding="utf-8")


def _compat_check() -> str:
    exe = Path(sys.executable).with_name("compat-check")
    if not exe.exists():
        sys.exit(f"compat_tf: {exe} not found; run scripts/setup first")
    return str(exe)


def _end_to_end(exe: str, old: Path, new: Path, repeat: int) -> tuple[float, dict[str, object]]:
    best = float("inf")
    report: dict[str, object] = {}
    for _ in range(repeat):
        start = time.perf_counter()
        proc = subprocess.run(
            [exe, str(old), str(new), "--format", "json"],
            capture_output=True,
            text=True,
            check=False,
        )
        elapsed = time.perf_counter() - start
        if proc.returncode not in (0, 1):
            sys.exit(f"compat_tf: compat-check failed ({proc.returncode}): {proc.stderr}")
        best = min(best, elapsed)
        report = json.loads(proc.stdout)
    return best, report


def _op_names(text: str) -> set[str]:
    prefix = '  name: "'
    return {line[len(prefix) : -1] for line in text.splitlines() if line.startswith(prefix)}


def _protobuf_parse(texts: list[str], repeat: int) -> float:
    oplist = messages()["OpList"]
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for text in texts:
            text_format.Parse(text, oplist())
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    """Run the benchmark and print its figure."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, help="OLD and NEW (default: TF 2.12, 2.21)")
    parser.add_argument("--repeat", type=int, default=5, help="end-to-end runs (best counts)")
    args = parser.parse_args()
    if len(args.files) not in (0, 2):
        parser.error("give OLD and NEW, or nothing")
    old_path, new_path = args.files or _DEFAULT
    texts = [_text(old_path), _text(new_path)]
    exe = _compat_check()
    with tempfile.TemporaryDirectory() as tmp:
        old, new = Path(tmp, "old.pbtxt"), Path(tmp, "new.pbtxt")
        old.write_text(texts[0], encoding="utf-8")
        new.write_text(texts[1], encoding="utf-8")
        wall, report = _end_to_end(exe, old, new, args.repeat)
    baseline = _protobuf_parse(texts, max(1, args.repeat // 2))
    pairs = len(_op_names(texts[0]) & _op_names(texts[1]))
    findings = report.get("findings", report.get("changes", []))
    count = len(findings) if isinstance(findings, list) else "?"
    print(f"{old_path.name} -> {new_path.name}: {count} findings, exit code by verdict")
    print(
        f"compat_tf: {wall:.3f} s end to end for {pairs} op pairs "
        f"(protobuf text_format parse alone: {baseline:.3f} s, ratio {wall / baseline:.2f})"
    )


if __name__ == "__main__":
    main()
