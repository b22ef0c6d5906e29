"""``opmarket doctor``: this machine, and which kernel runs each installed op
(opmarket.registry's doctor decides; this prints)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from opmarket.cli._usage import CONTEXT, EXIT_PROBLEM

if TYPE_CHECKING:
    from opmarket.registry._doctor import OpReport
    from opmarket.registry._machine import Machine

__all__ = ["doctor"]


def _text(machine: Machine, reports: Sequence[OpReport], problems: Sequence[str]) -> str:
    gpus = ", ".join(
        f"{g.index}: {g.name} (compute capability {g.compute_capability[0]}."
        f"{g.compute_capability[1]})"
        for g in machine.gpus
    )
    runtimes = ", ".join(f"{r.major} ({r.source}: {r.path})" for r in machine.runtimes)
    driver_cuda = "{}.{}".format(*machine.driver_cuda) if machine.driver_cuda else ""
    lines = [
        "machine",
        f"  cpu           {machine.arch} {machine.cpu}".rstrip(),
        f"  simd          {' '.join(machine.simd) or '-'}",
        f"  gpus          {gpus or 'none: ' + (machine.gpu_note or 'no GPU visible')}",
        f"  driver        {machine.driver or '-'}"
        + (f" (CUDA {driver_cuda})" if driver_cuda else ""),
        f"  cuda runtime  {runtimes or 'none found'}",
        "",
        "ops",
    ]
    from opmarket.registry._doctor import door_text, frameworks_text

    for r in reports:
        lines.append(f"  {r.op}")
        for v in r.decisions:
            c = v.candidate
            types = "any dtype" if c.dtypes is None else ", ".join(c.dtypes)
            mark = "chosen" if v.chosen else "-"
            lines.append(f"    {c.device:<4} {mark:<6} {types}: {v.reason}{door_text(c.door)}")
            if c.frameworks:
                lines.append(f"                {frameworks_text(c.frameworks)}")
    if not reports:
        lines.append("  (no plugin ops installed)")
    lines += [f"problem: {p}" for p in problems]
    return "\n".join(lines) + "\n"


@click.command(context_settings=CONTEXT)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="text for people, json for tools.",
)
def doctor(fmt: str) -> None:
    """Show this machine's CPU, GPUs and CUDA runtimes, and which kernel runs each op.

    For every installed op, each kernel on each device: whether it is chosen here and why,
    or why it does not fit ("no GPU visible", "sm_75 GPU but the build has sm_80/sm_90 and
    no PTX <= 7.5", "CUDA runtime 13 not found; install the cuda13 extra"). Read without a
    CUDA toolkit. Exit code 1 when a plugin failed to load or an op has no kernel that runs.

    \b
    Examples:
      opmarket doctor
      opmarket doctor --format json
    """
    from opmarket.registry._doctor import examine, report_json
    from opmarket.registry._machine import machine_facts

    machine = machine_facts()
    reports, problems = examine(machine)
    if fmt == "json":  # the shape exactly; problems go to stderr
        click.echo(json.dumps(report_json(machine, reports), indent=2))
        for problem in problems:
            click.echo(f"problem: {problem}", err=True)
    else:
        click.echo(_text(machine, reports, problems), nl=False)
    if problems:
        sys.exit(EXIT_PROBLEM)
