"""Which path each framework bridge gives a GPU kernel on this machine, for ``opmarket doctor``.

Where a GPU is visible, each installed framework's bridge answers for itself
(``native_path``/``native_reason`` with ``device="GPU"``), in a process of its own: nothing of
opmarket's run time imports a bridge, a framework takes seconds to import and two may not
share a process well, so the installed ones are asked side by side. Without a GPU visible no
framework is imported: every installed framework's GPU path is its Python one, for that
reason. A framework that is not installed is said to be, never imported.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from opmarket.registry._machine import Machine

__all__ = ["FRAMEWORKS", "NOT_INSTALLED", "FrameworkPath", "Query", "framework_paths"]


@dataclass(frozen=True, slots=True)
class Framework:
    """A framework with a GPU path: its name, its module, its bridge, and the name the
    bridge gives its non-native path."""

    name: str
    module: str
    bridge: str
    python_path: str


#: The frameworks whose bridges have a GPU path (LiteRT has none), in doctor's order.
FRAMEWORKS = (
    Framework("tensorflow", "tensorflow", "opmarket.tensorflow", "python"),
    Framework("torch", "torch", "opmarket.torch", "python"),
    Framework("jax", "jax", "opmarket.jax", "callback"),
)
#: The path of a framework that is not installed.
NOT_INSTALLED = "not installed"
#: How long one framework's answer may take (its import included).
TIMEOUT = 300.0


@dataclass(frozen=True, slots=True)
class FrameworkPath:
    """The path ``framework`` gives a kernel (``native``, ``native, synchronizing``, ``ffi``,
    ``python``, ``callback``, ``not installed``, ``unknown``) and why."""

    framework: str
    path: str
    reason: str


#: One GPU kernel to ask about: (op, kernel label, {type attr: dtype name}).
Query = tuple[str, str, Mapping[str, str]]

# Run by each framework's interpreter: argv = bridge module; stdin = the queries (JSON);
# the last line of stdout = one [path, reason] per query.
_SCRIPT = r"""
import importlib, json, sys
import numpy as np
from opmarket.sdk import as_dtype

bridge = importlib.import_module(sys.argv[1])
answers = []
for op, label, types in json.load(sys.stdin):
    # JAX's path depends on the call's types: the kernel's first dtype of each type attr
    attrs = {k: np.dtype(as_dtype(v).numpy) for k, v in types.items()}
    extra = attrs if sys.argv[1] == "opmarket.jax" else {}
    try:
        path = bridge.native_path(op, device="GPU", _kernel=label, **extra)
        reason = bridge.native_reason(op, device="GPU", _kernel=label, **extra)
    except Exception as exc:
        path, reason = "unknown", f"{type(exc).__name__}: {exc}"
    answers.append([path, reason])
print()
print(json.dumps(answers))
"""


def installed(framework: Framework) -> bool:
    """Whether the framework can be imported here (found, not imported)."""
    try:
        return importlib.util.find_spec(framework.module) is not None
    except (ImportError, ValueError):
        return False


def framework_paths(
    machine: Machine,
    queries: Sequence[Query],
    frameworks: Sequence[Framework] = FRAMEWORKS,
) -> list[tuple[FrameworkPath, ...]]:
    """Each query's path in each framework (in ``frameworks``' order), on ``machine``."""
    if not queries:
        return []
    answers: dict[str, list[FrameworkPath]] = {}
    present = [f for f in frameworks if installed(f)]
    if machine.gpus:
        answers = _ask(present, queries)
    else:
        why = "no GPU visible" + (f" ({machine.gpu_note})" if machine.gpu_note else "")
        answers = {
            f.name: [FrameworkPath(f.name, f.python_path, why)] * len(queries) for f in present
        }
    missing = {
        f.name: [FrameworkPath(f.name, NOT_INSTALLED, "")] * len(queries)
        for f in frameworks
        if f not in present
    }
    answers.update(missing)
    return [tuple(answers[f.name][i] for f in frameworks) for i in range(len(queries))]


def _ask(
    frameworks: Sequence[Framework], queries: Sequence[Query]
) -> dict[str, list[FrameworkPath]]:
    """Each framework's bridge's answers, the frameworks asked side by side."""
    payload = json.dumps([[op, label, dict(types)] for op, label, types in queries])
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}  # TensorFlow's start-up chatter
    running = {
        f.name: subprocess.Popen(
            [sys.executable, "-c", _SCRIPT, f.bridge],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for f in frameworks
    }
    out: dict[str, list[FrameworkPath]] = {}
    for f in frameworks:
        proc = running[f.name]
        try:
            stdout, stderr = proc.communicate(payload, timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            stdout, stderr = "", f"no answer within {TIMEOUT:.0f} s"
        out[f.name] = _parse(f, stdout, stderr, len(queries))
    return out


def _parse(framework: Framework, stdout: str, stderr: str, n: int) -> list[FrameworkPath]:
    """The answers on the last line of ``stdout``; else each "unknown", with why."""
    lines = stdout.strip().splitlines()
    try:
        rows = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        rows = None
    if isinstance(rows, list) and len(rows) == n:
        return [FrameworkPath(framework.name, str(p), str(r)) for p, r in rows]
    tail = (stderr.strip().splitlines() or ["no output"])[-1]
    why = f"{framework.bridge} did not answer: {tail}"
    return [FrameworkPath(framework.name, "unknown", why)] * n
