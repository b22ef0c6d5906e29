"""What comes back from the sandbox, checked before anything of it is believed or stored.

Two layers: the harness's result (``_probe._harness``), which must carry the job's secret,
and inside it the report of the plugin's process, which is only what the plugin's code says
about itself: its shape is checked here field by field, and anything malformed rejects the
file with the reason (it never reaches the database as is). What is well-formed leaves here
as typed values (:class:`OpRow`, :class:`KernelRow`): past this module the server reads no
JSON of the sandbox's.
"""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from opmarket.sdk import OpmarketError
from opmarket.web.validation._steps import KernelRow, OpRow, StepStatus

__all__ = ["HarnessResult", "PluginReport", "ReportError", "parse_harness"]

#: What the plugin's process may say of a step (``allowed`` is compat's, decided outside).
STATUSES = tuple(s for s in StepStatus if s is not StepStatus.ALLOWED)
_Row = TypeVar("_Row", OpRow, KernelRow)


class ReportError(OpmarketError, ValueError):
    """What came back from the sandbox is not what the harness or the probe writes."""


def _quote(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


@dataclass(slots=True)
class PluginReport:
    """The plugin's process's account of itself, well-formed."""

    steps: list[tuple[str, StepStatus, list[str]]] = field(default_factory=list)
    opset: str = ""
    ops: list[OpRow] = field(default_factory=list)
    kernels: list[KernelRow] = field(default_factory=list)
    registered_kernels: list[tuple[str, str]] = field(default_factory=list)


@dataclass(slots=True)
class HarnessResult:
    """The harness's result: how the plugin's process ended and its report, if any."""

    install_error: str = ""
    returncode: int = 0
    report: PluginReport | None = None
    report_error: str = ""
    protected: bool = False


def _rows(value: object, row: type[_Row], what: str) -> list[_Row]:
    """``value`` as rows of type ``row``: a list of objects whose keys are its fields, each a
    string (a missing one is "")."""
    keys = [f.name for f in fields(row)]
    if not isinstance(value, list):
        raise ReportError(f"{what} must be a list, not {_quote(value)}")
    out = []
    for item in value:
        if (
            not isinstance(item, dict)
            or set(item) - set(keys)
            or not all(isinstance(item.get(k, ""), str) for k in keys)
        ):
            raise ReportError(
                f"each of {what} must be an object of strings {', '.join(keys)}; got {_quote(item)}"
            )
        out.append(row(**{k: str(item.get(k, "")) for k in keys}))
    return out


def _report(data: object) -> PluginReport:
    if not isinstance(data, dict):
        raise ReportError(f"the report must be an object, not {_quote(data)}")
    report = PluginReport()
    steps = data.get("steps")
    if not isinstance(steps, list) or not steps:
        raise ReportError(f"the report's steps must be a non-empty list, not {_quote(steps)}")
    for step in steps:
        if not (
            isinstance(step, dict)
            and isinstance(step.get("name"), str)
            and step.get("status") in STATUSES
            and isinstance(step.get("log"), list)
            and all(isinstance(line, str) for line in step["log"])
        ):
            raise ReportError(
                f"a step must be {{name, status ({', '.join(STATUSES)}), log "
                f"(strings)}}; got {_quote(step)}"
            )
        report.steps.append((step["name"], StepStatus(step["status"]), list(step["log"])))
    opset = data.get("opset", "")
    if not isinstance(opset, str):
        raise ReportError(f"opset must be a string of JSON, not {_quote(opset)}")
    report.opset = opset
    report.ops = _rows(data.get("ops", []), OpRow, "ops")
    report.kernels = _rows(data.get("kernels", []), KernelRow, "kernels")
    registered = data.get("registered_kernels", [])
    if not isinstance(registered, list) or not all(
        isinstance(r, str) and r.count("\t") == 1 for r in registered
    ):
        raise ReportError(
            f"registered_kernels must be 'op<TAB>device' strings, not {_quote(registered)}"
        )
    report.registered_kernels = [(r.split("\t")[0], r.split("\t")[1]) for r in registered]
    return report


def parse_harness(raw: bytes, secret: str) -> HarnessResult:
    """The harness's result from the bytes read on the result pipe; ``ReportError`` when
    it is missing, malformed, or does not carry ``secret``. A malformed report of the
    plugin's process is not an error here: it is ``report_error``, a reason to reject."""
    try:
        data: Any = json.loads(raw) if raw else None
    except ValueError as exc:
        raise ReportError(f"the harness's result is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ReportError("the harness sent no result (its process was stopped or killed)")
    if not hmac.compare_digest(str(data.get("secret", "")), secret):
        raise ReportError("the result does not carry this job's secret")
    out = HarnessResult(protected=data.get("protected") is True)
    if data.get("install_error"):
        out.install_error = str(data["install_error"])
        return out
    code = data.get("returncode")
    if not isinstance(code, int):
        raise ReportError(f"the harness's returncode is {_quote(code)}")
    out.returncode = code
    out.report_error = str(data.get("report_error", ""))
    if not out.report_error and data.get("report") is not None:
        try:
            out.report = _report(data["report"])
        except ReportError as exc:
            out.report_error = f"sent a malformed report: {exc}"
    return out
