"""The demo that scripts/demo runs: opmarket's CLI on the first-party ops (docs/examples)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "docs" / "examples"
BIN = Path(sys.executable).parent


FAILED: list[str] = []


def step(
    title: str, *args: str, show: int = 25, expect: int = 0
) -> subprocess.CompletedProcess[str]:
    """Run one opmarket command, show its output, and note it if it exits unexpectedly."""
    print(f"\n\033[1m$ opmarket {' '.join(args)}\033[0m   # {title}")
    proc = subprocess.run(
        [str(BIN / "opmarket"), *args], capture_output=True, text=True, check=False
    )
    lines = proc.stdout.splitlines()
    for line in lines[:show]:
        print("  " + line)
    if len(lines) > show:
        print(f"  ... ({len(lines) - show} more lines)")
    for line in proc.stderr.splitlines():
        print("  " + line)
    print(f"  [exit {proc.returncode}]")
    if proc.returncode != expect:
        FAILED.append(f"opmarket {' '.join(args)}: exit {proc.returncode}, expected {expect}")
    return proc


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="opmarket-demo-") as tmp:
        work = Path(tmp)
        seed = work / "seed-ops.json"
        shutil.copy(EXAMPLES / "seed-ops.json", seed)
        step(
            "the seeds' ops in spec form, as TensorFlow text format",
            "convert",
            str(seed),
            "--to",
            "tf-pbtxt",
        )
        canonical = work / "seed-ops.opset.json"
        step(
            "...as canonical op-set JSON, written whole to a file",
            "convert",
            str(seed),
            "-o",
            str(canonical),
        )
        print(f"  wrote {canonical.name}: {canonical.stat().st_size} bytes")
        step(
            "and back to spec form: nothing lost",
            "convert",
            str(canonical),
            "--to",
            "spec",
            show=12,
        )
        step(
            "a document with mistakes: every problem, one line each, exit 1",
            "convert",
            str(EXAMPLES / "broken-ops.json"),
            expect=1,
        )
    step(
        "the installed plugins (plugins/, installed by scripts/setup), each loaded in isolation",
        "plugins",
    )
    step("their ops, read from the manifests they ship: no plugin code imported", "ops")
    print(
        "\nNext: docs/spec-language.md (the spec language), docs/cli.md (every command), "
        "docs/plugins.md (writing a plugin)."
    )
    for failure in FAILED:
        print(f"demo: unexpected result: {failure}", file=sys.stderr)
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
