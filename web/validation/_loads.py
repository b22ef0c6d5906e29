"""The "loads with" table of a validated file: which Pythons and framework releases its native
libraries load with, answered by ``opmarket env-check``'s engine (``registry._envcheck``).

The environments are those the index knows: the validation environment's interpreter, plus
each one the operator lists (``opmarket serve --loads-with PYTHON``). Each is read once per
server process (one that could not be read is tried again for the next file), here, with
trusted code (the interpreter asked in a subprocess, its distributions and frameworks); one
with several frameworks gives a row per framework (the wheel checked as if only that one
were installed), one without gives a row with none.

The uploaded wheel itself is read only in the validation sandbox (:mod:`._loads_child`,
run through the GPU checks' :class:`~opmarket.web.gpu._tools.ToolSandbox`, with those
interpreters' folders shown read-only): a damaged or hostile library costs that job, never
the server, and comes back as a problem row. What comes back is checked and capped here.

A row: ``{"python", "implementation", "framework", "version", "works", "problems"}``, each
problem ``{"kind", "library", "detail"}`` as env-check writes it. A wheel without native
code gets no rows (``[]``); a file checked before this existed, or while no environment
could be read, has no table (``None``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from opmarket.web.gpu._tools import ToolError, ToolSandbox
from opmarket.web.validation._loads_child import MAX_DETAIL, MAX_PROBLEMS, capped
from opmarket.web.wheels._variants import split_variant

__all__ = ["MAX_DETAIL", "MAX_PROBLEMS", "Known", "known_environments", "loads_with"]

log = logging.getLogger("opmarket.web")

_CHILD = Path(__file__).with_name("_loads_child.py")


@dataclass(frozen=True, slots=True)
class Known:
    """One row's environment: the Python (as the operator named it, ``program``), at most
    one framework release, and the facts the sandboxed check rebuilds it from."""

    program: str
    python: str
    implementation: str
    framework: str | None
    version: str | None
    facts: dict[str, Any]

    def row(self, works: bool, problems: list[dict[str, str]]) -> dict[str, Any]:
        """This environment's row of the table."""
        return {
            "python": self.python,
            "implementation": self.implementation,
            "framework": self.framework,
            "version": self.version,
            "works": works,
            "problems": problems,
        }


#: Each program's environment once read (by its name as given): a read that failed is tried
#: again for the next file, one that succeeded is not.
_READ: dict[str, tuple[tuple[str, tuple[str, ...]], tuple[Known, ...]]] = {}


def known_environments(programs: tuple[str, ...]) -> tuple[Known, ...]:
    """The environments of ``programs`` (Python interpreters), each read once per process;
    the same environment named twice counts once, and one that cannot be read is logged,
    left out, and tried again the next time."""
    found: list[Known] = []
    seen: set[tuple[str, tuple[str, ...]]] = set()
    for program in programs:
        read = _READ.get(program) or _read_environment(program)
        if read is None:
            continue
        _READ[program] = read
        key, rows = read
        if key not in seen:
            seen.add(key)
            found.extend(rows)
    return tuple(found)


def _read_environment(
    program: str,
) -> tuple[tuple[str, tuple[str, ...]], tuple[Known, ...]] | None:
    """``program``'s environment (its identity and its rows), or None, logged, when it
    cannot be read."""
    from opmarket.registry._environment import environment_facts, read_environment
    from opmarket.registry._machine import Machine

    try:
        env = read_environment(program, machine=Machine())  # GPUs: the GPU checks' part
    except Exception as exc:  # a table's environment never rejects uploads
        log.warning("loads with: %s: cannot read its environment: %s", program, exc)
        return None
    facts = environment_facts(env)
    python, implementation = env.interpreter.version, env.interpreter.implementation
    rows = [Known(program, python, implementation, None, None, facts)]
    if facts["frameworks"]:
        rows = [
            Known(
                program,
                python,
                implementation,
                framework["distribution"],
                framework["version"],
                {**facts, "frameworks": [framework]},
            )
            for framework in facts["frameworks"]
        ]
    return (env.interpreter.executable, tuple(env.interpreter.path)), tuple(rows)


def loads_with(
    wheel: Path, filename: str, known: Sequence[Known], sandbox: ToolSandbox
) -> list[dict[str, Any]] | None:
    """The table for the wheel at ``wheel`` (named ``filename``): a row per environment of
    ``known``, or none when it has no native code; no table (None) when no environment is
    known. Raises nothing: a check that could not run or answer gives every row that reason
    as its problem."""
    if not known:
        return None
    if not _may_hold_libraries(wheel):
        return []  # the sandboxed check would find no library either: no sandbox started
    plain, _ = split_variant(filename)  # env-check reads the tags from the name
    inside = "/input/" + Path(plain).name
    programs = tuple(dict.fromkeys(k.program for k in known))
    sandbox = dataclasses.replace(sandbox, shown=programs)
    with tempfile.TemporaryDirectory(prefix="opm-loads-") as tmp:
        facts = Path(tmp) / "environments.json"
        facts.write_text(json.dumps([k.facts for k in known]), encoding="utf-8")
        try:
            done = sandbox.run(
                [sandbox.interpreter, "-I", "/input/loads.py", "/input/environments.json", inside],
                {"/input/loads.py": _CHILD, "/input/environments.json": facts, inside: wheel},
            )
        except ToolError as exc:
            return _all_failed(known, f"the check could not finish: {exc}")
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return _all_failed(known, f"the check exited with {done.returncode}: {last[:MAX_DETAIL]}")
    answer = _read(done.stdout, len(known))
    if answer is None:
        return _all_failed(known, "the check's answer could not be read")
    native, rows = answer
    if native is False:
        return []
    return [k.row(works, problems) for k, (works, problems) in zip(known, rows, strict=True)]


def _may_hold_libraries(wheel: Path) -> bool:
    """Whether a member's name could be a library env-check reads (``*.so``, ``*.so.N``):
    the names only, as the upload checks read them here; any doubt says yes."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            names = zf.namelist()
    except (OSError, zipfile.BadZipFile):
        return True
    return any((name := PurePosixPath(n).name).endswith(".so") or ".so." in name for n in names)


def _all_failed(known: Sequence[Known], why: str) -> list[dict[str, Any]]:
    return [k.row(False, [{"kind": "check", "library": "", "detail": why}]) for k in known]


def _read(
    stdout: str, count: int
) -> tuple[bool | None, list[tuple[bool, list[dict[str, str]]]]] | None:
    """The sandboxed check's answer, each row's problems capped; None when it is not one
    of ``count`` rows of the expected shape."""
    try:
        data = json.loads(stdout.strip().splitlines()[-1])
        native, rows = data["native"], data["rows"]
        if native not in (True, False, None) or not isinstance(rows, list) or len(rows) != count:
            return None
        out = []
        for row in rows:
            problems = capped(row["problems"])
            out.append((row["works"] is True and not problems, problems))
        return native, out
    except (ValueError, IndexError, KeyError, TypeError):
        return None
