"""Which CUDA device code runs on which GPU: one table, from which ``opmarket doctor``, the
index's static GPU check and the catalog's ``compute_capability`` filter (in SQL) all come.

Device code is SASS (``sm_86``: machine code) or PTX (``compute_75``: what the driver
compiles when the library loads), for a compute capability written as one number (``86``:
ten times the major plus the minor) and a suffix: none, ``a`` (architecture-specific:
that GPU only) or ``f`` (family-specific, CUDA 12.9: the later minors of its major), as
NVIDIA's CUDA C++ Programming Guide (compute capabilities, "feature availability") has it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "RULES",
    "Arch",
    "Rule",
    "capability_number",
    "code_runs_on",
    "parse_arch",
    "reaches",
]

Kind = Literal["sass", "ptx"]
#: ``exact``: that capability only; ``family``: the same major, that minor or later;
#: ``later``: that capability or any later one.
Reach = Literal["exact", "family", "later"]


@dataclass(frozen=True, slots=True)
class Rule:
    """Code of ``kind`` with ``suffix`` built for capability C runs on the GPUs ``reach``
    says, from C; ``why`` says so in words."""

    kind: Kind
    suffix: str
    reach: Reach
    why: str


RULES: tuple[Rule, ...] = (
    Rule("sass", "", "family", "a cubin runs on later minors of its major"),
    Rule("sass", "f", "family", "family-specific SASS runs on later minors of its major"),
    Rule("sass", "a", "exact", "architecture-specific SASS runs on its own GPU only"),
    Rule("ptx", "", "later", "the driver compiles PTX for its GPU and every later one"),
    Rule("ptx", "f", "family", "family-specific PTX compiles for later minors of its major"),
    Rule("ptx", "a", "exact", "architecture-specific PTX compiles for its own GPU only"),
)

_RULE = {(r.kind, r.suffix): r for r in RULES}
_ARCH = re.compile(r"(sm|compute)_(\d+)([af]?)")


@dataclass(frozen=True, slots=True)
class Arch:
    """One device-code target: ``sm_90a`` is Arch("sass", 90, "a")."""

    kind: Kind
    capability: int
    suffix: str

    @property
    def rule(self) -> Rule:
        """The row of :data:`RULES` that says where this code runs."""
        return _RULE[self.kind, self.suffix]

    def runs_on(self, capability: int) -> bool:
        """Whether this code runs on a GPU of ``capability`` (``86`` for 8.6)."""
        return reaches(self.rule.reach, self.capability, capability)


def reaches(reach: Reach, built: int, capability: int) -> bool:
    """Whether code built for ``built`` with ``reach`` runs on ``capability``."""
    if reach == "exact":
        return built == capability
    if reach == "family":
        return built // 10 == capability // 10 and built <= capability
    return built <= capability


def parse_arch(name: str) -> Arch:
    """``sm_86``, ``sm_90a``, ``compute_75``, ``compute_100f`` as an :class:`Arch`;
    ValueError quoting anything else."""
    match = _ARCH.fullmatch(name)
    if match is None:
        raise ValueError(f"{name!r} is not a GPU architecture such as sm_80 or compute_75")
    kind: Kind = "sass" if match.group(1) == "sm" else "ptx"
    return Arch(kind, int(match.group(2)), match.group(3))


def code_runs_on(name: str, capability: int) -> bool:
    """Whether device code named ``name`` (``sm_80``, ``compute_90a``) runs on a GPU of
    ``capability`` (``86``); False for a name that is not an architecture."""
    try:
        return parse_arch(name).runs_on(capability)
    except ValueError:
        return False


def capability_number(text: str) -> int:
    """``"8.6"`` -> 86 (ten times the major plus the minor); ValueError for anything else."""
    match = re.fullmatch(r"(\d{1,2})\.(\d)", text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a compute capability such as 8.6 or 12.0")
    return int(match.group(1)) * 10 + int(match.group(2))
