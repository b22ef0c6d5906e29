"""The repository carries the test data its tests read: nothing is looked up beside the clone."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import REPO

# A path built from the checkout's parent folder, or an absolute one into another checkout.
_OUTSIDE = re.compile(r"""REPO\.parent|parent\s*/\s*["']shared["']|["']/work/""")


def test_tensorflow_data_is_in_the_repository_with_its_license(tensorflow_testdata: Path) -> None:
    assert tensorflow_testdata.is_relative_to(REPO)
    assert len(list((tensorflow_testdata / "tf_ops_history_v2").glob("*.pbtxt"))) == 45
    assert (tensorflow_testdata / "tf_op_compatibility_cases.json").is_file()
    readme = (tensorflow_testdata / "README.md").read_text(encoding="utf-8")
    assert "Apache" in readme and "TensorFlow 2.21" in readme
    license_text = (tensorflow_testdata / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in license_text and "Version 2.0" in license_text


def test_no_test_or_benchmark_reads_files_beside_the_clone() -> None:
    readers = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for folder in ("tests", "bench")
        for path in sorted((REPO / folder).rglob("*.py"))
        if path != Path(__file__).resolve()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _OUTSIDE.search(line)
    ]
    assert readers == []
