"""Op resolvers (LiteRT's idea): which kernel runs each (op, version) of a graph.

A resolver maps built-in ops (a range of versions each) and custom ops (one version per
registration) to kernels; ``selective_resolver`` keeps only what one graph uses, as LiteRT's
selective registration does. A node asks for a version with its ``_version`` attr (1 when
absent).
"""

from __future__ import annotations

from typing import Any

from opmarket.registry._graph import Graph
from opmarket.registry._registry import Registry
from opmarket.sdk import InvalidArgumentError, InvalidDeclarationError, NotFoundError
from opmarket.sdk._kernel import Kernel, KernelSpec, _attr_names, declarations

__all__ = ["OpResolver", "selective_resolver"]


def _as_spec(op: str, kernel: Any) -> KernelSpec:
    if isinstance(kernel, KernelSpec):
        return kernel
    declared = [d for d in declarations(kernel) if isinstance(d, KernelSpec)]
    if declared:
        return declared[0]
    if isinstance(kernel, type) and issubclass(kernel, Kernel):
        return KernelSpec(op=op, impl=kernel, attr_names=None)
    if callable(kernel):
        return KernelSpec(op=op, impl=kernel, attr_names=_attr_names(kernel))
    raise InvalidDeclarationError(
        f"a resolver kernel is a function, a Kernel subclass or a KernelSpec, got {kernel!r}"
    )


class OpResolver:
    """LiteRT's MutableOpResolver: built-in ops with version ranges, custom ops by version."""

    def __init__(self) -> None:
        self._builtin: dict[str, dict[int, KernelSpec | None]] = {}
        self._custom: dict[str, dict[int, KernelSpec]] = {}

    @classmethod
    def from_registry(cls, registry: Registry) -> OpResolver:
        """Every op of ``registry`` as a built-in at version 1, run by normal dispatch."""
        r = cls()
        for op in registry:
            r._builtin.setdefault(op.name, {})[1] = None
        return r

    def add_builtin(
        self, op: str, kernel: Any = None, min_version: int = 1, max_version: int | None = None
    ) -> None:
        """Resolve versions ``min_version`` to ``max_version`` of built-in ``op`` to ``kernel``
        (None: whichever kernel dispatch chooses)."""
        top = min_version if max_version is None else max_version
        if top < min_version:
            raise InvalidArgumentError(f"max_version {top} is below min_version {min_version}")
        spec = None if kernel is None else _as_spec(op, kernel)
        versions = self._builtin.setdefault(op, {})
        for v in range(min_version, top + 1):
            versions[v] = spec

    def add_custom(self, name: str, kernel: Any, version: int = 1) -> None:
        """Resolve custom op ``name`` at ``version`` to ``kernel``."""
        self._custom.setdefault(name, {})[version] = _as_spec(name, kernel)

    def has(self, op: str, version: int = 1) -> bool:
        """Whether ``op`` at ``version`` is in the resolver: :meth:`find` without the
        NotFoundError."""
        return version in self._builtin.get(op, {}) or version in self._custom.get(op, {})

    def find(self, op: str, version: int = 1) -> KernelSpec | None:
        """The kernel for ``op`` at ``version`` (None: let dispatch choose); NotFoundError
        naming the versions there are."""
        if version in self._custom.get(op, {}):
            return self._custom[op][version]
        if version in self._builtin.get(op, {}):
            return self._builtin[op][version]
        have = sorted({*self._builtin.get(op, {}), *self._custom.get(op, {})})
        if have:
            raise NotFoundError(
                f"op {op!r} version {version} is not in the resolver "
                f"(it has versions {', '.join(map(str, have))})"
            )
        raise NotFoundError(f"op {op!r} is not in the resolver")

    def ops(self) -> list[tuple[str, tuple[int, ...]]]:
        """Each op the resolver knows, with its versions."""
        names = sorted({*self._builtin, *self._custom})
        return [
            (n, tuple(sorted({*self._builtin.get(n, {}), *self._custom.get(n, {})}))) for n in names
        ]

    def _copy_entry(self, other: OpResolver, op: str, version: int) -> None:
        if version in other._custom.get(op, {}):
            self._custom.setdefault(op, {})[version] = other._custom[op][version]
        else:
            self._builtin.setdefault(op, {})[version] = other._builtin[op][version]

    def __len__(self) -> int:
        return sum(len(v) for v in self._builtin.values()) + sum(
            len(v) for v in self._custom.values()
        )


def selective_resolver(graph: Graph, resolver: OpResolver) -> OpResolver:
    """A resolver with only the (op, version) pairs ``graph`` uses; NotFoundError listing every
    one ``resolver`` lacks. Graph inputs (``Placeholder``) need no kernel."""
    used = sorted({(n.op, int(n.attrs.get("_version", 1))) for n in graph if n.op != "Placeholder"})
    missing = [f"{op} v{v}" for op, v in used if not resolver.has(op, v)]
    if missing:
        raise NotFoundError(f"the resolver lacks ops the graph uses: {', '.join(missing)}")
    out = OpResolver()
    for op, v in used:
        out._copy_entry(resolver, op, v)
    return out
