"""The row type of the rule table: a rule's id, severity, scope, summary, hint, check and
examples, and which framework's rules it belongs to (see _rules.py)."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["DIRECTIONS", "RULE_SETS", "Example", "Rule", "Scope", "Severity"]

#: The rule sets: TensorFlow's GraphDef rules on op definitions, PyTorch's schema rules.
RULE_SETS: tuple[str, ...] = ("tensorflow", "pytorch")
#: What a check asks: does NEW still run what was made against OLD (backward), or does OLD
#: still run what is made against NEW (forward; PyTorch's schema rules only).
DIRECTIONS: tuple[str, ...] = ("backward", "forward")

C = TypeVar("C")  # what a rule's check looks at: an OpChange, a SchemaChange


class Severity(enum.StrEnum):
    """How much a finding matters: ``breaking`` fails the check."""

    BREAKING = "breaking"
    WARNING = "warning"
    INFO = "info"


class Scope(enum.StrEnum):
    """What a rule looks at: an op present in one release, an op in both, its kernels, saved
    graphs, the op-set files themselves, or an operator schema in both releases."""

    PRESENCE = "presence"
    PAIR = "pair"
    SCHEMA = "schema"
    KERNELS = "kernels"
    GRAPH = "graph"
    DOCUMENT = "document"


@dataclass(frozen=True, slots=True)
class Example:
    """Two releases of op ``Example`` in the table's example language (see _examples.py;
    PyTorch rules: two schemas), and whether the rule fires for the change."""

    old: str
    new: str
    fires: bool


@dataclass(frozen=True, slots=True)
class Rule(Generic[C]):
    """One row of the table."""

    id: str
    severity: Severity
    scope: Scope
    summary: str
    hint: str
    check: Callable[[C], Iterable[str]] | None  # None: graphs and documents, checked elsewhere
    examples: tuple[Example, ...] = ()
    rules: str = "tensorflow"  # one of RULE_SETS
    directions: tuple[str, ...] = ("backward",)  # the DIRECTIONS it is checked in
