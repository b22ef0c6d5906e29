"""Reverse mode over graphs, and the numeric gradient checker (TensorFlow's
compute_gradient: central differences against the registered gradients)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from opmarket.registry._executor import execute, prepare_graph, structure
from opmarket.registry._graph import Graph, Node, parse_input
from opmarket.registry._registry import Registry
from opmarket.registry._runtime import registry_or_default
from opmarket.sdk import NotFoundError
from opmarket.sdk._gradients import GradientOp, as_input_grads

__all__ = ["check_gradient", "compute_gradient", "gradients", "max_error"]

_Array = np.ndarray[Any, Any]


def gradients(
    graph: Graph,
    ys: str | Sequence[str],
    xs: str | Sequence[str],
    feeds: Mapping[str, Any],
    *,
    grad_ys: Sequence[Any] | None = None,
    registry: Registry | None = None,
) -> list[_Array | None]:
    """d(sum of ys)/d(x) for each x (``"node:index"``), by running the graph forward and
    the registered gradients backward; None for an x the ys do not depend on.

    ``grad_ys`` weights each y (ones by default). An op on the path without a registered
    gradient is an error; a ``not_differentiable`` op stops the gradient there.
    """
    reg = registry_or_default(registry)
    prepared = prepare_graph(graph, reg)
    y_refs = [ys] if isinstance(ys, str) else list(ys)
    x_refs = [xs] if isinstance(xs, str) else list(xs)
    seen: list[tuple[Node, list[Any], list[Any]]] = []
    values = execute(prepared, feeds, y_refs, reg, on_node=lambda n, i, o: seen.append((n, i, o)))
    x_keys = [_key(r) for r in x_refs]
    # Only nodes downstream of an x carry gradients back to it.
    live = {k[0] for k in x_keys}
    for node, _, _ in seen:
        if any(parse_input(r)[0] in live for r in node.inputs if not r.startswith("^")):
            live.add(node.name)
    grads: dict[tuple[str, int], _Array] = {}
    for k, ref in enumerate(y_refs):
        key = _key(ref)
        y = values[key[0]][key[1]]
        g = np.ones_like(y) if grad_ys is None else np.asarray(grad_ys[k], dtype=y.dtype)
        _accumulate(grads, key, g)
    for node, inputs, outputs in reversed(seen):
        if node.name not in live or not inputs:
            continue
        out_grads = [grads.get((node.name, i)) for i in range(len(outputs))]
        if all(g is None for g in out_grads):
            continue
        spec = reg.gradient(node.op)
        if spec is None:
            raise NotFoundError(
                f"no gradient is registered for op {node.op!r} (node {node.name!r}); "
                "register one with register_gradient, or mark the op not_differentiable"
            )
        if spec.fn is None:
            continue
        op_def = reg.dispatcher(node.op).op_def
        filled = [
            g if g is not None else np.zeros_like(o)
            for g, o in zip(out_grads, outputs, strict=True)
        ]
        forward = GradientOp(
            op_def,
            tuple(structure(op_def, inputs, node.attrs)),
            tuple(structure(op_def, outputs, node.attrs, "outputs")),
            node.attrs,
            node.name,
        )
        result = as_input_grads(
            spec.fn(forward, *structure(op_def, filled, node.attrs, "outputs")),
            len(op_def.inputs),
            op_def.name,
        )
        flat: list[Any] = []
        for arg, g in zip(op_def.inputs, result, strict=True):
            if arg.is_list:
                count = len(structure(op_def, inputs, node.attrs)[op_def.inputs.index(arg)])
                flat.extend(g if g is not None else [None] * count)
            else:
                flat.append(g)
        data_refs = [r for r in node.inputs if not r.startswith("^")]
        for ref, g in zip(data_refs, flat, strict=True):
            if g is not None:
                _accumulate(grads, _key(ref), np.asarray(g))
    return [grads.get(k) for k in x_keys]


def _key(ref: str) -> tuple[str, int]:
    name, index = parse_input(ref)
    return name, max(index, 0)


def _accumulate(grads: dict[tuple[str, int], _Array], key: tuple[str, int], g: _Array) -> None:
    have = grads.get(key)
    grads[key] = g if have is None else have + g


def compute_gradient(
    graph: Graph,
    xs: Sequence[str],
    y: str,
    feeds: Mapping[str, Any],
    *,
    delta: float = 1e-3,
    registry: Registry | None = None,
) -> list[tuple[_Array, _Array]]:
    """For each placeholder in ``xs``, the theoretical (registered gradients) and numerical
    (central differences) Jacobians of ``y``, each of shape (x size, y size)."""
    from opmarket.registry._executor import run_graph  # cycle-free, kept local

    reg = registry_or_default(registry)
    base = {k: np.array(v) for k, v in feeds.items()}
    y0 = np.asarray(run_graph(graph, base, y, registry=reg))
    out: list[tuple[_Array, _Array]] = []
    for x in xs:
        name = parse_input(x)[0]
        xv = base[name]
        theory = np.zeros((xv.size, y0.size), dtype=np.float64)
        for j in range(y0.size):
            onehot = np.zeros(y0.size, dtype=y0.dtype)
            onehot[j] = 1
            (g,) = gradients(graph, y, name, base, grad_ys=[onehot.reshape(y0.shape)], registry=reg)
            if g is not None:
                theory[:, j] = np.asarray(g, dtype=np.float64).ravel()
        numeric = np.zeros_like(theory)
        for i in range(xv.size):
            plus, minus = dict(base), dict(base)
            xp, xm = xv.copy(), xv.copy()
            xp.flat[i] += delta
            xm.flat[i] -= delta
            plus[name], minus[name] = xp, xm
            yp = np.asarray(run_graph(graph, plus, y, registry=reg), dtype=np.float64)
            ym = np.asarray(run_graph(graph, minus, y, registry=reg), dtype=np.float64)
            numeric[i, :] = ((yp - ym) / (2 * delta)).ravel()
        out.append((theory, numeric))
    return out


def max_error(pairs: Sequence[tuple[_Array, _Array]]) -> float:
    """The largest absolute difference between theoretical and numerical Jacobians."""
    return max((float(np.max(np.abs(t - n))) if t.size else 0.0 for t, n in pairs), default=0.0)


def check_gradient(
    op: str,
    inputs: Sequence[Any],
    attrs: Mapping[str, Any] | None = None,
    *,
    wrt: Sequence[int] | None = None,
    delta: float = 1e-3,
    tolerance: float = 1e-2,
    registry: Registry | None = None,
) -> float:
    """Check the registered gradient of ``op`` at ``inputs`` against central differences;
    returns the max error, AssertionError naming the op if it exceeds ``tolerance``.

    ``wrt`` picks the inputs to differentiate (default: every floating-point input).
    """
    reg = registry_or_default(registry)
    g = Graph()
    names = []
    for i, value in enumerate(inputs):
        arr = np.asarray(value)
        g.placeholder(arr.dtype, arr.shape, name=f"x{i}")
        names.append(f"x{i}")
    node = g.add(op, *(f"{n}:0" for n in names), name="y", **dict(attrs or {}))
    feeds = {n: np.asarray(v) for n, v in zip(names, inputs, strict=True)}
    pick = (
        list(wrt)
        if wrt is not None
        else [i for i, v in enumerate(inputs) if np.asarray(v).dtype.kind in "fc"]
    )
    pairs = compute_gradient(
        g, [names[i] for i in pick], node.output(0), feeds, delta=delta, registry=reg
    )
    err = max_error(pairs)
    if err > tolerance:
        raise AssertionError(
            f"the gradient of {op} is off by {err:.3g} (tolerance "
            f"{tolerance:.3g}) at the given inputs"
        )
    return err
