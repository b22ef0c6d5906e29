"""Kernel labels in eager execution. TensorFlow picks a labelled kernel for a node whose
``_kernel`` attr names the label, and its eager execution takes no such attr; so each label of
an op gets an op of its own, with the op's definition and that label's kernels only,
unlabelled, which eager calls with the label run directly (a graph's node keeps the op and
its ``_kernel`` attr)."""

from __future__ import annotations

__all__ = ["labelled_name", "targets"]


def labelled_name(op: str, label: str) -> str:
    """The op that eager calls of ``op`` with kernel ``label`` run. Its name is a valid op
    and node name: ``Opm>ZeroOut>OpmLabel_c_abi``, or the label's UTF-8 in hex
    (``...>OpmLabelHex_...``) when it has other characters than letters, digits and ``_``."""
    if label.isascii() and label.replace("_", "").isalnum():
        return f"{op}>OpmLabel_{label}"
    return f"{op}>OpmLabelHex_{label.encode().hex()}"


def targets(op: str, label: str, labelled: dict[str, str]) -> list[tuple[str, str]]:
    """Where a kernel of ``op`` under ``label`` is registered, as (op, label) pairs: the op's
    own, and its label's op (``labelled``: label -> op) without a label."""
    if label in labelled:
        return [(op, label), (labelled[label], "")]
    return [(op, label)]
