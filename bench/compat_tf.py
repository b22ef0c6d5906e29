"""Benchmark ``compat-check`` end to end on two whole TensorFlow op registries.

OLD and NEW are TensorFlow 2.12's and 2.21's registries as OpList text (tests/sdk/data, about
1.0-1.1 MB each). Each run is the real command in a fresh process (``compat-check OLD NEW
--format json``, process start and imports included); the figure is the best of a few runs.
The runs write and use bytecode caches (``PYTHONDONTWRITEBYTECODE`` is cleared for them), as an
installed opmarket has them; without them every run compiles opmarket's modules again.
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
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from google.protobuf import text_format

from opmarket.sdk import opdefs_from_pbtxt
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


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _end_to_end(
    exe: str, old: Path, new: Path, repeat: int
) -> tuple[float, float, dict[str, object]]:
    """Best wall time, best CPU time (user + system) and the report of ``compat-check``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    best = best_cpu = float("inf")
    report: dict[str, object] = {}
    for run in range(repeat + 1):  # the first run writes the bytecode caches and is not counted
        cpu = _children_cpu()
        start = time.perf_counter()
        proc = subprocess.run(
            [exe, str(old), str(new), "--format", "json"],
            capture_output=True,
            text=True,
            check=False,
            env=env,
        )
        elapsed = time.perf_counter() - start
        cpu = _children_cpu() - cpu
        if proc.returncode not in (0, 1):
            sys.exit(f"compat_tf: compat-check failed ({proc.returncode}): {proc.stderr}")
        if run:
            best, best_cpu = min(best, elapsed), min(best_cpu, cpu)
        report = json.loads(proc.stdout)
    return best, best_cpu, report


def _op_names(text: str) -> set[str]:
    prefix = '  name: "'
    return {line[len(prefix) : -1] for line in text.splitlines() if line.startswith(prefix)}


def _best(parse: Callable[[str], object], texts: list[str], repeat: int) -> tuple[float, float]:
    """Best wall and best CPU time of ``parse`` over all of ``texts``."""
    best = best_cpu = float("inf")
    for _ in range(repeat):
        start, cpu = time.perf_counter(), time.process_time()
        for text in texts:
            parse(text)
        best = min(best, time.perf_counter() - start)
        best_cpu = min(best_cpu, time.process_time() - cpu)
    return best, best_cpu


def _protobuf_parse(text: str) -> object:
    return text_format.Parse(text, messages()["OpList"]())


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
        wall, cpu, report = _end_to_end(exe, old, new, args.repeat)
    baseline, baseline_cpu = _best(_protobuf_parse, texts, max(1, args.repeat // 2))
    ours, ours_cpu = _best(opdefs_from_pbtxt, texts, args.repeat)
    pairs = len(_op_names(texts[0]) & _op_names(texts[1]))
    findings = report.get("findings", report.get("changes", []))
    count = len(findings) if isinstance(findings, list) else "?"
    print(f"{old_path.name} -> {new_path.name}: {count} findings")
    print(f"opmarket's reader alone, both files, in process: {ours:.3f} s ({ours_cpu:.3f} s CPU)")
    print(
        f"CPU time (user + system; steadier on a busy machine): {cpu:.3f} s end to end, "
        f"{baseline_cpu:.3f} s protobuf text_format parse alone, ratio {cpu / baseline_cpu:.2f}"
    )
    print(
        f"compat_tf: {wall:.3f} s end to end for {pairs} op pairs "
        f"(protobuf text_format parse alone: {baseline:.3f} s, ratio {wall / baseline:.2f})"
    )


if __name__ == "__main__":
    main()
