"""Benchmark ``compat-check`` on two whole PyTorch operator registries, and (``--sweep``)
compare its verdicts with PyTorch's on every mutated pair of the installed torch's schemas.

OLD is the installed torch's registry (``str()`` of every ``torch._C._jit_get_all_schemas()``
entry, about 4,400 lines); NEW is the same registry with a share of its schemas replaced by
one of their mutants (``--changed``, seeded: renamed, retyped, new arguments, new defaults,
...). Each run is the real command in a fresh process (``compat-check OLD NEW --format
json``, process start and imports included); the figure is the best of a few runs. The
baseline, measured in the same run, is PyTorch's own check of the same two files in this
process: ``torch._C.parse_schema`` of every line and ``is_backward_compatible_with`` for
every old schema against the new ones of its name, as PyTorch's
check_forward_backward_compatibility.py does it (torch's import not counted).

    python bench/torch_schemas.py [--repeat R] [--changed FRACTION] [--sweep]

The last line is ``torch_schemas: X s end to end for N + M schemas (PyTorch's own parse and
check: Y s, ratio R)``; the target is X under 1 s.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the corpus lives with the tests

import torch  # noqa: E402  (after the path)

from tests.compat.torch_mutations import disagreements, mutants, pairs  # noqa: E402


def _registries(changed: float) -> tuple[list[str], list[str]]:
    old = sorted({str(s) for s in torch._C._jit_get_all_schemas()})
    rng = random.Random(13)
    new = []
    for text in old:
        if rng.random() < changed:
            options = [m for _, m in mutants(text) if m != text and _parses(m)]
            new.append(rng.choice(options) if options else text)
        else:
            new.append(text)
    return old, new


def _parses(text: str) -> bool:
    try:
        torch._C.parse_schema(text)
    except (RuntimeError, ValueError, IndexError):
        return False
    return True


def _torch_check(old_path: Path, new_path: Path) -> tuple[float, int]:
    t0 = time.perf_counter()
    old = [torch._C.parse_schema(x) for x in old_path.read_text().splitlines()]
    by_name = defaultdict(list)
    for s in (torch._C.parse_schema(x) for x in new_path.read_text().splitlines()):
        by_name[s.name].append(s)
    broken = 0
    for s in old:
        ok = False
        for n in by_name.get(s.name, []):
            try:
                ok = n.is_backward_compatible_with(s)
            except IndexError:  # an out argument compared past the new schema's end
                ok = False
            if ok:
                break
        broken += not ok
    return time.perf_counter() - t0, broken


def _ours(old_path: Path, new_path: Path) -> tuple[float, dict[str, int]]:
    env = {**os.environ}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    exe = Path(sys.executable).with_name("compat-check")
    t0 = time.perf_counter()
    done = subprocess.run(
        [str(exe), str(old_path), str(new_path), "--format", "json"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    elapsed = time.perf_counter() - t0
    if done.returncode not in (0, 1):
        raise SystemExit(f"compat-check failed: {done.stderr.strip()}")
    report = json.loads(done.stdout)
    broken = len({f["op"] for f in report["findings"] if f["severity"] == "breaking"})
    return elapsed, {**report["summary"], "ops broken": broken}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--changed", type=float, default=0.1)
    parser.add_argument("--sweep", action="store_true", help="every mutated pair, both ways")
    args = parser.parse_args()
    if args.sweep:
        texts = sorted({str(s) for s in torch._C._jit_get_all_schemas()})
        t0 = time.perf_counter()
        counts, wrong = disagreements(torch, list(pairs(texts)))
        verdicts = counts["compared"] * 2
        print(
            f"sweep: {len(texts)} schemas, {counts['pairs']} mutated pairs, "
            f"{counts['unparsable']} that torch refuses to parse, {counts['compared']} "
            f"compared both ways: backward {counts['bc_ok']} accepted / "
            f"{counts['bc_broken']} rejected, forward {counts['fc_ok']} / "
            f"{counts['fc_broken']}; {verdicts - len(wrong)} of {verdicts} verdicts agree "
            f"({time.perf_counter() - t0:.0f} s)"
        )
        for direction, kind, old, new, theirs in wrong[:20]:
            print(f"  {direction} {kind}: torch says {theirs}\n    {old}\n    {new}")
    old, new = _registries(args.changed)
    with tempfile.TemporaryDirectory() as tmp:
        old_path, new_path = Path(tmp, "old.txt"), Path(tmp, "new.txt")
        old_path.write_text("\n".join(old) + "\n", encoding="utf-8")
        new_path.write_text("\n".join(new) + "\n", encoding="utf-8")
        theirs, broken = min(_torch_check(old_path, new_path) for _ in range(args.repeat))
        ours = min(_ours(old_path, new_path) for _ in range(args.repeat))
    changed = sum(a != b for a, b in zip(old, new, strict=True))
    print(f"registries: {len(old)} schemas each, {changed} changed; ours: {ours[1]}")
    print(f"PyTorch's check: {broken} old schemas without a compatible new one")
    print(
        f"torch_schemas: {ours[0]:.3f} s end to end for {len(old)} + {len(new)} schemas "
        f"(PyTorch's own parse and check: {theirs:.3f} s, ratio {ours[0] / theirs:.2f})"
    )


if __name__ == "__main__":
    main()
