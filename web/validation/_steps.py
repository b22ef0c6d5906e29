"""What validation says of a file: its steps (each with a status and a log), the release it
was compared against, the ops and kernel results the catalog lists, and the verdict they add
up to, as the marketplace stores it. Inside the server these are typed values; JSON is what
the sandbox sends (read once, ``_report``) and what :meth:`Verdict.to_json` stores."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from opmarket.web._status import FileStatus

__all__ = ["KernelRow", "OpRow", "Previous", "Step", "StepStatus", "Verdict"]


class StepStatus(StrEnum):
    """How a validation step ended; the values are what the JSON and the log say."""

    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    #: the step's machinery is missing here: never counted as passed
    NOT_AVAILABLE = "not available"
    #: compat only: breaking changes that a major version bump admits
    ALLOWED = "allowed"


@dataclass(slots=True)
class Step:
    """One validation step: name, status (:class:`StepStatus`) and log."""

    name: str
    status: StepStatus
    log: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.status = StepStatus(self.status)  # what came back from the sandbox, as read
        self.log = [line for line in self.log if line]


@dataclass(frozen=True, slots=True)
class OpRow:
    """One op as the catalog lists it."""

    name: str
    signature: str  # the OpDef on one line: Name(x: T) -> (y: T) [T: {float}]
    summary: str = ""


@dataclass(frozen=True, slots=True)
class KernelRow:
    """One kernel's conformance result as the catalog lists it."""

    op: str
    device: str  # CPU, GPU
    dtypes: str = ""  # the type attrs it was run with (T=float), "" for all
    status: str = ""  # passed, failed, gpu: not run, ...
    message: str = ""


@dataclass(frozen=True, slots=True)
class Previous:
    """The release to compare against: its label, and its op-set as canonical JSON."""

    label: str
    opset: str


@dataclass(slots=True)
class Verdict:
    """The outcome: ``validated`` or ``rejected``, every step, and what was learned."""

    filename: str
    steps: list[Step] = field(default_factory=list)
    opset: str = ""  # canonical op-set JSON, when the snapshot worked
    ops: list[OpRow] = field(default_factory=list)
    kernels: list[KernelRow] = field(default_factory=list)
    compat: dict[str, Any] | None = None
    gpu: dict[str, Any] | None = None  # the static GPU checks' findings (see _gpu)
    # Which Pythons and frameworks its native code loads with (_loads); None: not asked.
    loads_with: list[dict[str, Any]] | None = None

    @property
    def status(self) -> FileStatus:
        """``validated`` when at least one step ran and none failed, else ``rejected``."""
        ok = self.steps and all(s.status != StepStatus.FAILED for s in self.steps)
        return FileStatus.VALIDATED if ok else FileStatus.REJECTED

    @property
    def failures(self) -> list[Step]:
        """The steps that failed, in order."""
        return [s for s in self.steps if s.status == StepStatus.FAILED]

    def log_text(self) -> str:
        """What a person reads: the verdict, then each step's status and name, its log indented."""
        lines = [f"{self.filename}: {self.status}"]
        for step in self.steps:
            lines.append(f"[{step.status}] {step.name}")
            lines.extend(f"    {line}" for text in step.log for line in text.splitlines())
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict[str, Any]:
        """The verdict as the marketplace stores it and ``opmarket validate --json`` prints it."""
        return {
            "filename": self.filename,
            "status": self.status,
            "steps": [asdict(s) for s in self.steps],
            "ops": [asdict(o) for o in self.ops],
            "kernels": [asdict(k) for k in self.kernels],
            "compat": self.compat,
            "gpu": self.gpu,
        }
