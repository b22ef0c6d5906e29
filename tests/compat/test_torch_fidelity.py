"""PyTorch's own verdicts: compat-check agrees with ``FunctionSchema.is_backward_compatible_
with`` and ``check_forward_compatible_with`` on mutated pairs of the installed torch's schemas.

A seeded sample of the pairs keeps this bounded; ``python bench/torch_schemas.py --sweep``
compares every pair.
"""

from __future__ import annotations

import random

import pytest

from opmarket.compat._torch_schema import parse_schema
from tests.compat.torch_mutations import disagreements, pairs

torch = pytest.importorskip("torch")

SAMPLE = 3000


def _registry() -> list[str]:
    return sorted({str(s) for s in torch._C._jit_get_all_schemas()})


def test_every_schema_of_the_installed_torch_reads_as_torch_reads_it() -> None:
    schemas = [*torch._C._jit_get_all_schemas(), *torch._C._jit_get_custom_class_schemas()]
    assert len(schemas) > 4000
    for theirs in schemas:
        ours = parse_schema(str(theirs))
        assert (ours.name, ours.overload) == (theirs.name, theirs.overload_name)
        assert [a.name for a in ours.arguments] == [a.name for a in theirs.arguments]
        assert [a.kwarg_only for a in ours.arguments] == [a.kwarg_only for a in theirs.arguments]
        assert [a.n for a in ours.arguments] == [a.N for a in theirs.arguments]
        # torch shows a default of None as None: only the others can be compared
        assert all(
            o.has_default
            for o, t in zip(ours.arguments, theirs.arguments, strict=True)
            if t.default_value is not None
        )
        assert len(ours.returns) == len(theirs.returns)


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
