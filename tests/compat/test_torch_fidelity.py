"""PyTorch's own verdicts: compat-check agrees with ``FunctionSchema.is_backward_compatible_
with`` and ``check_forward_compatible_with`` on mutated pairs of the installed torch's schemas.

A seeded sample of the pairs keeps this bounded; ``python bench/torch_schemas.py --sweep``
compares every pair.
"""

from __future__ import annotations

import functools
import json
import random
import subprocess
import sys

import pytest

from opmarket.compat._torch_schema import parse_schema
from tests.compat.torch_mutations import disagreements, pairs

torch = pytest.importorskip("torch")

SAMPLE = 3000


# What a fresh `import torch` registers, read in a process of its own: ops that other tests
# register in this process (torch.compile's, opmarket.torch's) would change the corpus, and
# some of them print types (PyObject) that torch's own parser refuses.
_FRESH = """
import json, torch
def fields(s):
    return {
        "text": str(s),
        "name": s.name,
        "overload": s.overload_name,
        "args": [[a.name, a.kwarg_only, a.N, a.default_value is not None] for a in s.arguments],
        "returns": len(s.returns),
    }
print(json.dumps({
    "registry": [fields(s) for s in torch._C._jit_get_all_schemas()],
    "classes": [fields(s) for s in torch._C._jit_get_custom_class_schemas()],
}))
"""


@functools.cache
def _fresh() -> dict[str, list[dict[str, object]]]:
    out = subprocess.run(
        [sys.executable, "-c", _FRESH], capture_output=True, text=True, check=True
    ).stdout
    fresh: dict[str, list[dict[str, object]]] = json.loads(out)
    return fresh


def _registry() -> list[str]:
    return sorted({str(s["text"]) for s in _fresh()["registry"]})


def test_every_schema_of_the_installed_torch_reads_as_torch_reads_it() -> None:
    schemas = [*_fresh()["registry"], *_fresh()["classes"]]
    assert len(schemas) > 4000
    for theirs in schemas:
        ours = parse_schema(str(theirs["text"]))
        args = theirs["args"]
        assert isinstance(args, list)
        assert (ours.name, ours.overload) == (theirs["name"], theirs["overload"])
        assert [a.name for a in ours.arguments] == [a[0] for a in args]
        assert [a.kwarg_only for a in ours.arguments] == [a[1] for a in args]
        assert [a.n for a in ours.arguments] == [a[2] for a in args]
        # torch shows a default of None as None: only the others can be compared
        assert all(o.has_default for o, t in zip(ours.arguments, args, strict=True) if t[3])
        assert len(ours.returns) == theirs["returns"]


def test_a_seeded_sample_of_mutated_pairs_gets_pytorchs_verdict_both_ways() -> None:
    cases = list(pairs(_registry()))
    sample = random.Random(25).sample(cases, SAMPLE)
    counts, wrong = disagreements(torch, sample)
    assert wrong == []
    # the sample holds accepted and rejected pairs in both directions
    assert counts["compared"] > SAMPLE * 0.8
    assert min(counts["bc_ok"], counts["bc_broken"], counts["fc_ok"], counts["fc_broken"]) > 300


@pytest.mark.parametrize(
    "kind",
    [
        "append-default",
        "append-no-default",
        "append-list-default",
        "make-kwarg-only",
        "make-positional",
        "reorder",
        "rename",
        "default-add",
        "default-remove",
        "default-change",
        "alias-drop",
        "out-remove",
        "out-add",
        "return-optional",
        "return-rename",
        "return-drop",
    ],
)
def test_every_edge_is_in_the_corpus_and_agrees(kind: str) -> None:
    texts = _registry()[::40]  # about 110 schemas, every kind of them
    cases = [c for c in pairs(texts) if c[0].removesuffix(" (reverse)") == kind]
    assert cases, kind
    counts, wrong = disagreements(torch, cases)
    assert wrong == []
    assert counts["compared"]
