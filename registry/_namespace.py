"""``opmarket.ops``: wrappers by short name, by namespace and by full name."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from opmarket.registry._errors import AmbiguousOpNameError
from opmarket.sdk import NotFoundError, OpDef, snake_case

if TYPE_CHECKING:
    from opmarket.registry._registry import Registry

__all__ = ["Loader", "OpsNamespace", "matches", "ops_named"]

#: ``loader(prefix, name, full=...)`` loads what resolving ``name`` under the namespace
#: ``prefix`` needs (``name`` None: everything); see ``_runtime.load_plugins_for``.
Loader = Callable[..., None]


def _segment(namespace: str) -> str:
    return snake_case(namespace)


def matches(op: str, prefix: str, name: str, *, full: bool = False) -> bool:
    """Whether the op named ``op`` is what ``name`` may resolve to under the namespace
    ``prefix``: the op itself (by its Python name, or by full name when ``full``) or a
    sub-namespace holding it. The same rules as the lookups below."""
    if full:
        return op == (f"{prefix}>{name}" if prefix else name)
    ns, _, short = op.rpartition(">")
    if (not prefix or ns == prefix) and snake_case(short) == name:
        return True
    rest = ns if not prefix else (ns[len(prefix) + 1 :] if ns.startswith(prefix + ">") else "")
    return bool(rest) and _segment(rest.split(">")[0]) == name


def ops_named(registry: Registry, name: str) -> list[OpDef]:
    """The ops ``name`` names, by ``opmarket.ops``' rules, sorted: the op with that full
    name (``ops["Opm>ZeroOut"]``), else every op whose Python name it is (``ops.zero_out``)
    or, as written in specs, whose short name (``ZeroOut``). More than one is ambiguous."""
    found = registry.op_def(name)
    if found is not None:
        return [found]
    return sorted(
        (o for o in registry if name in (o.python_name, o.short_name)), key=lambda o: o.name
    )


class OpsNamespace:
    """Op wrappers as attributes: ``ops.zero_out`` while that short name is unique,
    ``ops.opm.zero_out`` by namespace, ``ops["Opm>ZeroOut"]`` by full name."""

    _registry: Callable[[], Registry]
    _prefix: str
    _seen: dict[int, int]
    _loader: Loader | None
    _followers: list[Callable[[], None]]

    def __init__(
        self, registry: Callable[[], Registry], prefix: str = "", *, loader: Loader | None = None
    ) -> None:
        object.__setattr__(self, "_registry", registry)
        object.__setattr__(self, "_prefix", prefix)  # "" at the top, else "Opm" or "A>B"
        object.__setattr__(self, "_seen", {})  # id(registry) -> version indexed
        object.__setattr__(self, "_loader", loader)  # loads plugins as names need them
        object.__setattr__(self, "_followers", [])  # told on every reset

    def _need(self, name: str | None, *, full: bool = False) -> None:
        if self._loader is not None:
            self._loader(self._prefix, name, full=full)

    def _refresh(self) -> Registry:
        reg = self._registry()
        seen: dict[int, int] = self._seen
        if seen.get(id(reg)) != reg.version or len(seen) != 1:
            self.reset()
            seen[id(reg)] = reg.version
        return reg

    def reset(self) -> None:
        """Forget cached wrappers (the registry changed), here and in sub-namespaces, and
        tell each follower (see :meth:`on_reset`)."""
        for key in [k for k in self.__dict__ if not k.startswith("_")]:
            value = self.__dict__.pop(key)
            if isinstance(value, OpsNamespace):
                value.reset()
        self._seen.clear()
        for follower in self._followers:
            follower()

    def on_reset(self, follower: Callable[[], None]) -> None:
        """Call ``follower`` on every :meth:`reset`: what keeps values made from this
        namespace's (a framework's ops namespace) forgets them when it does."""
        self._followers.append(follower)

    def _members(self, reg: Registry) -> tuple[dict[str, list[OpDef]], dict[str, str]]:
        """Python names -> ops, and attribute names -> sub-namespaces, at this level."""
        by_name: dict[str, list[OpDef]] = {}
        spaces: dict[str, str] = {}
        prefix = self._prefix
        for op in reg:
            ns = op.namespace
            if not prefix or ns == prefix:
                by_name.setdefault(op.python_name, []).append(op)
            rest = (
                ns
                if not prefix
                else (ns[len(prefix) + 1 :] if ns.startswith(prefix + ">") else None)
            )
            if rest:
                head = rest.split(">")[0]
                spaces.setdefault(_segment(head), f"{prefix}>{head}" if prefix else head)
        return by_name, spaces

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        self._need(name)
        reg = self._refresh()
        if name in self.__dict__:
            return self.__dict__[name]
        by_name, spaces = self._members(reg)
        found = by_name.get(name)
        value: Any
        if found and len(found) > 1:
            names = sorted(o.name for o in found)
            hints = " or ".join(
                f"opmarket.ops.{'.'.join(_segment(p) for p in o.namespace.split('>'))}.{name}"
                if o.namespace
                else f"opmarket.ops[{o.name!r}]"
                for o in sorted(found, key=lambda o: o.name)
            )
            raise AmbiguousOpNameError(
                f"opmarket.ops.{name} is ambiguous: {' and '.join(names)} both have that "
                f"name; use {hints}"
            )
        if found:
            value = reg.dispatcher(found[0].name).wrapper
        elif name in spaces:
            value = OpsNamespace(self._registry, spaces[name], loader=self._loader)
        else:
            where = (
                f"opmarket.ops.{'.'.join(map(_segment, self._prefix.split('>')))}"
                if self._prefix
                else "opmarket.ops"
            )
            raise AttributeError(f"{where} has no op {name!r}")
        self.__dict__[name] = value
        return value

    def __getitem__(self, full_name: str) -> Callable[..., Any]:
        self._need(full_name, full=True)
        reg = self._refresh()
        name = f"{self._prefix}>{full_name}" if self._prefix else full_name
        try:
            return reg.dispatcher(name).wrapper
        except NotFoundError:
            raise NotFoundError(f"no op named {name!r} is registered") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("opmarket.ops is read-only; register ops with opmarket.register")

    def __dir__(self) -> list[str]:
        self._need(None)
        by_name, spaces = self._members(self._refresh())
        return sorted({n for n, ops in by_name.items() if len(ops) == 1} | set(spaces))

    def __repr__(self) -> str:
        return f"<opmarket.ops{' ' + self._prefix if self._prefix else ''}>"
