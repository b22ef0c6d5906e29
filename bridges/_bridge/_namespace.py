"""``opmarket.jax.ops`` and ``opmarket.torch.ops``: the names of ``opmarket.ops``, each
resolved to the framework's version of the op.

Name resolution is ``opmarket.ops``'s own (short names while unique, namespaces, full names
by item, plugins loaded as names need them, AmbiguousOpNameError for shared short names); the
namespace only maps each op it finds through the bridge's ``make(op_name)``. What it made is
kept as an attribute while ``opmarket.ops`` keeps the value it made it from (until the
registry changes: ``opmarket.ops`` then forgets its values and tells the namespace to forget
its own), so a repeated lookup costs what ``opmarket.ops``' does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["BridgeNamespace"]


class BridgeNamespace:
    """Op callables as attributes: ``ns.zero_out``, ``ns.opm.zero_out``,
    ``ns["Opm>ZeroOut"]``, each ``make(full_name)`` for the op ``opmarket.ops`` finds."""

    _inner: Any
    _make: Callable[[str], Any]
    _label: str
    _following: bool

    def __init__(self, make: Callable[[str], Any], label: str, inner: Any = None) -> None:
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_make", make)
        object.__setattr__(self, "_label", label)
        object.__setattr__(self, "_following", False)  # told when opmarket.ops forgets

    def _ops(self) -> Any:
        if self._inner is None:
            import opmarket

            return opmarket.ops
        return self._inner

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            value = getattr(self._ops(), name)
        except AttributeError as exc:
            if type(exc) is not AttributeError:
                raise  # AmbiguousOpNameError: its message says how to reach each op
            raise AttributeError(f"{self._label} has no op {name!r}") from None
        full = getattr(value, "__opmarket_op__", None)
        if full is None:  # a sub-namespace of opmarket.ops
            made: Any = BridgeNamespace(self._make, f"{self._label}.{name}", value)
        else:
            made = self._make(full)
        ops = self._ops()
        if vars(ops).get(name) is value:  # kept there until the registry changes
            if not self._following:
                ops.on_reset(self._forget)
                object.__setattr__(self, "_following", True)
            self.__dict__[name] = made
        return made

    def _forget(self) -> None:
        for key in [k for k in self.__dict__ if not k.startswith("_")]:
            del self.__dict__[key]

    def __getitem__(self, full_name: str) -> Any:
        wrapper = self._ops()[full_name]
        return self._make(wrapper.__opmarket_op__)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{self._label} is read-only; register ops with opmarket.register")

    def __dir__(self) -> list[str]:
        return dir(self._ops())

    def __repr__(self) -> str:
        return f"<{self._label}>"
