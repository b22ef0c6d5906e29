"""The "loads with" check as it runs in the validation sandbox (bound there as
``/input/loads.py`` and run with ``python -I``): ``opmarket env-check``'s engine on one
uploaded wheel, once per environment that ``/input/environments.json`` describes.

It prints one JSON line: ``{"native": bool | null, "rows": [{"works", "problems"}, ...]}``,
a row per environment in order; ``native`` is false when the wheel has no native library
(null when no check could say). Whatever a check raises on a damaged wheel becomes that
row's problem: the process that reads the untrusted bytes is this one, never the server.
Each row's problems are capped here (:func:`capped`), before printing, so that a wheel with
very many stays within what the sandbox lets a tool print; the server caps them again.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

#: The most problems a row keeps (then one saying how many more), and the longest detail.
MAX_PROBLEMS = 20
MAX_DETAIL = 2000


def capped(problems: list[dict[str, Any]]) -> list[dict[str, str]]:
    """``problems`` as strings, each detail at most MAX_DETAIL characters, and at most
    MAX_PROBLEMS of them and then a row saying how many more (kept as it is when already
    capped so)."""
    out = [{k: _cut(str(p[k])) for k in ("kind", "library", "detail")} for p in problems]
    if len(out) == MAX_PROBLEMS + 1 and out[-1]["kind"] == "more":
        return out
    if len(out) > MAX_PROBLEMS:
        more = len(out) - MAX_PROBLEMS
        out = out[:MAX_PROBLEMS]
        out.append({"kind": "more", "library": "", "detail": f"{more} more problems"})
    return out


def _cut(text: str) -> str:
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 1] + "…"


def check(environments: list[dict[str, Any]], wheel: Path) -> dict[str, Any]:
    """The answer for ``wheel`` in each environment (as its facts say)."""
    from opmarket.registry._elfsymbols import Exports
    from opmarket.registry._envcheck import check_wheel
    from opmarket.registry._environment import environment_from_facts

    exports: dict[Path, Exports] = {}  # a framework's libraries are read once for all rows
    native: bool | None = None
    rows: list[dict[str, Any]] = []
    for facts in environments:
        try:
            report = check_wheel(wheel, environment_from_facts(facts, exports=exports))
            problems = [p.to_json() for p in report.problems]
            native = bool(native) or bool(report.libraries)
        except (OSError, ValueError) as exc:  # BadWheel is a ValueError
            problems = [{"kind": "wheel", "library": "", "detail": str(exc) or repr(exc)}]
        except Exception as exc:  # a reader's bug on these bytes: this row says so
            detail = f"the check failed: {type(exc).__name__}: {exc}"
            problems = [{"kind": "check", "library": "", "detail": detail}]
        rows.append({"works": not problems, "problems": capped(problems)})
    return {"native": native, "rows": rows}


if __name__ == "__main__":
    facts = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    print(json.dumps(check(facts, Path(sys.argv[2]))))
