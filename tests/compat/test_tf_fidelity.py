"""TensorFlow's own verdicts: op_compatibility_test.cc's cases and the real ops_history files.

The data lives in tests/data/tensorflow (see its README); every verdict there was checked
against TensorFlow 2.21's OpDefCompatible and attr-default checks.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest

from opmarket.compat import RULES_BY_ID, Severity, compare_ops
from opmarket.sdk import OpDef, op, opdefs_from_pbtxt

_LINE = re.compile(r'^(Input|Output|Attr)\("(.*)"\)$')

# The rule that explains each kind of error TensorFlow reports.
_RULE_FOR_ERROR = {
    "removed it's default": "attr-default-removed",
    "changed it's default": "attr-default-changed",
    "added without default": "attr-added-without-default",
    "removed": "attr-removed",
    "changed type": "attr-type-changed",
    "stricter set of allowed values; from no restriction": "attr-restriction-added",
    "stricter set of allowed values": "attr-allowed-values-narrowed",
    "higher minimum; from no minimum": "attr-minimum-added",
    "higher minimum": "attr-minimum-raised",
    "Input signature mismatch": "input-signature-changed",
    "Output signature mismatch": "output-signature-changed",
    "changed from non-ref to ref": "input-became-ref",
    "changed from ref to non-ref": "output-lost-ref",
}


def _build(lines: list[str]) -> OpDef:
    b = op("Op")
    for line in lines:
        m = _LINE.match(line)
        assert m is not None, line
        getattr(b, m.group(1).lower())(m.group(2).encode().decode("unicode_escape"))
    return b.build()


def _cases(data: Path) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads(
        (data / "tf_op_compatibility_cases.json").read_text(encoding="utf-8")
    )
    return data


def test_all_54_cases_get_tensorflows_verdict(tensorflow_testdata: Path) -> None:
    cases = _cases(tensorflow_testdata)
    assert len(cases) == 54
    wrong = []
    for case in cases:
        findings = compare_ops(_build(case["old"]), _build(case["new"]))
        breaking = [f for f in findings if f.severity is Severity.BREAKING]
        if bool(breaking) == case["compatible"]:
            wrong.append((case["name"], [f.message for f in findings]))
    assert wrong == []


def test_each_rejected_case_is_explained_by_the_matching_rule(tensorflow_testdata: Path) -> None:
    for case in _cases(tensorflow_testdata):
        if case["compatible"]:
            continue
        error = case["error_substring"]
        expected = next(rule for key, rule in _RULE_FOR_ERROR.items() if key in error)
        if "Output signature mismatch" in error and case["name"].startswith("Rename"):
            expected = "output-renamed"
        rules = {f.rule for f in compare_ops(_build(case["old"]), _build(case["new"]))}
        assert expected in rules, (case["name"], error, rules)
        assert RULES_BY_ID[expected].severity is Severity.BREAKING


def _history(data: Path) -> list[tuple[str, list[OpDef]]]:
    folder = data / "tf_ops_history_v2"
    return [
        (f.stem, opdefs_from_pbtxt(f.read_text(encoding="utf-8"), str(f)))
        for f in sorted(folder.glob("*.pbtxt"))
    ]


def test_history_corpus_every_change_compatible_but_placeholders_last(
    tensorflow_testdata: Path,
) -> None:
    history = _history(tensorflow_testdata)
    assert len(history) == 45
    compatible, breaking = 0, []
    for name, versions in history:
        for i, (old, new) in enumerate(itertools.pairwise(versions)):
            found = [f for f in compare_ops(old, new) if f.severity is Severity.BREAKING]
            if found:
                breaking.append((name, i + 1, [f.rule for f in found]))
            else:
                compatible += 1
    assert compatible == 118
    placeholder_last = len(dict(history)["Placeholder"]) - 1
    assert breaking == [("Placeholder", placeholder_last, ["attr-default-changed"])]


def test_placeholder_message_names_both_shapes(tensorflow_testdata: Path) -> None:
    versions = dict(_history(tensorflow_testdata))["Placeholder"]
    (finding,) = [
        f for f in compare_ops(versions[-2], versions[-1]) if f.severity is Severity.BREAKING
    ]
    assert finding.message == "attr 'shape' default changed from [] to <unknown rank>"


@pytest.mark.parametrize("reverse", [False, True])
def test_history_against_every_release_like_ops_history(
    tensorflow_testdata: Path, reverse: bool
) -> None:
    # TensorFlow checks today's op against every recorded version: the latest version of each
    # op (Placeholder aside) is compatible with all of its ancestors.
    for name, versions in _history(tensorflow_testdata):
        latest = versions[-1]
        for old in versions[:-1]:
            found = [f for f in compare_ops(old, latest) if f.severity is Severity.BREAKING]
            if name == "Placeholder":
                continue
            assert found == [], (name, found)
        if reverse and len(versions) > 1:
            # Going back to the first version undoes additions: TensorFlow rejects that.
            back = [f for f in compare_ops(latest, versions[0]) if f.severity is Severity.BREAKING]
            assert back, name


def test_signature_messages_quote_tensorflows_signatures(tensorflow_testdata: Path) -> None:
    # TensorFlow's "Input signature mismatch 'a' vs. 'b'" strings, reproduced token for token.
    checked = 0
    for case in _cases(tensorflow_testdata):
        error = case["error_substring"] or ""
        m = re.search(r"(?:Input|Output) signature mismatch ('.*' vs\. '.*')", error)
        if m is None:
            continue
        messages = [f.message for f in compare_ops(_build(case["old"]), _build(case["new"]))]
        assert any(f"TensorFlow sees {m.group(1)}" in msg for msg in messages), messages
        checked += 1
    assert checked >= 10
