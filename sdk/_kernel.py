"""Kernels as plugin authors write them: function kernels and lifecycle kernels.

A function kernel is ``fn(*inputs, **attrs) -> output | tuple of outputs``; it receives the
attrs its signature names (every attr with ``**attrs``). A lifecycle kernel subclasses
:class:`Kernel`: created once per attr set with its attrs and options bytes (TensorFlow's
create, LiteRT's init), ``prepare`` on new input shapes, ``compute`` per call, ``close`` at
the end (delete, free). Decorating declares; nothing is registered until the declaration is
handed to a ``register`` callback (see ``opmarket.sdk.hookimpl``) or ``opmarket.register``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from opmarket.sdk._dtypes import DType, as_dtype
from opmarket.sdk._errors import InvalidDeclarationError
from opmarket.sdk._opset import KernelDef

__all__ = [
    "DEVICES",
    "Kernel",
    "KernelSpec",
    "declarations",
    "declare",
    "kernel",
]

#: The devices opmarket knows; kernels for other device names are accepted as they are.
DEVICES: tuple[str, ...] = ("CPU", "GPU")

_MARK = "__opmarket_declarations__"

T = TypeVar("T")


class Kernel:
    """Base of lifecycle kernels; subclass and override ``compute`` (and ``prepare``).

    >>> class Atan(Kernel):
    ...     def compute(self, x):
    ...         return np.arctan(x)
    """

    def __init__(self, attrs: Mapping[str, Any], options: bytes = b"") -> None:
        """Called once per distinct attr set (TensorFlow's create, LiteRT's init)."""
        self.attrs = dict(attrs)
        self.options = options

    def prepare(self, *inputs: Any) -> None:
        """Called before ``compute`` when the input shapes differ from the last call's."""

    def compute(self, *inputs: Any) -> Any:
        """Return the output array, or a tuple of them for several outputs."""
        raise NotImplementedError(f"{type(self).__name__} does not implement compute()")

    def close(self) -> None:
        """Release what the kernel holds (TensorFlow's delete, LiteRT's free)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelSpec(KernelDef):
    """A kernel declaration (a :class:`KernelDef`) with its implementation: what ``@kernel``
    produces and the registry stores.

    ``impl`` is a function or a :class:`Kernel` subclass; ``options`` are the bytes a lifecycle
    kernel is created with; ``attr_names`` are the attrs a function kernel receives as keywords
    (None: all of them).
    """

    impl: Callable[..., Any]
    options: bytes = b""
    attr_names: tuple[str, ...] | None = ()

    @property
    def is_lifecycle(self) -> bool:
        """True when ``impl`` is a :class:`Kernel` subclass, made per attr set, not a function."""
        return isinstance(self.impl, type) and issubclass(self.impl, Kernel)

    @property
    def name(self) -> str:
        """The implementation's qualified name, for messages."""
        impl = self.impl
        # A compiled function's __qualname__ may name its binding's internals: use its name.
        name = impl.__name__ if inspect.isbuiltin(impl) else getattr(impl, "__qualname__", "?")
        return f"{getattr(impl, '__module__', '?')}.{name}"

    def describe(self) -> str:
        """One line for messages: ``CPU  T in {float, int32}  priority 0  (module.fn)``."""
        cons = (
            "  ".join(
                f"{name} in {{{', '.join(t.spec_name for t in types)}}}"
                for name, types in self.constraints
            )
            or "any types"
        )
        label = f"  label {self.label!r}" if self.label else ""
        return f"{self.device}  {cons}  priority {self.priority}{label}  ({self.name})"


def _attr_names(fn: Callable[..., Any]) -> tuple[str, ...] | None:
    """The keyword parameters of ``fn`` (None if it takes ``**kwargs``)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return tuple(p.name for p in params if p.kind is p.KEYWORD_ONLY)


def _dtypes(value: Any) -> tuple[DType, ...]:
    items = value if isinstance(value, (list, tuple, set, frozenset)) else (value,)
    return tuple(sorted({as_dtype(v) for v in items}))


def declare(obj: Any, declaration: Any) -> None:
    """Attach ``declaration`` to ``obj`` so that registering ``obj`` registers it."""
    found = obj.__dict__.get(_MARK) if hasattr(obj, "__dict__") else None
    if found is None:
        found = []
        setattr(obj, _MARK, found)
    found.append(declaration)


def declarations(obj: Any) -> list[Any]:
    """What decorators declared on ``obj`` (its own, not a base class's)."""
    return list(getattr(obj, "__dict__", {}).get(_MARK, ()))


def kernel(
    op: str,
    *,
    device: str = "CPU",
    constraints: Mapping[str, Any] | None = None,
    host_memory: Iterable[str] = (),
    priority: int = 0,
    label: str = "",
    options: bytes = b"",
) -> Callable[[T], T]:
    """Declare the decorated function or :class:`Kernel` subclass a kernel of ``op``.

    ``constraints`` maps type attrs to the dtypes the kernel handles (numpy dtypes, names or
    DTypes); ``host_memory`` names inputs and outputs kept in host memory; among matching
    kernels the highest ``priority`` wins; a ``label`` kernel is chosen only when a node asks
    for it with its ``_kernel`` attr. Stack decorators to declare several kernels.
    """
    cons = tuple(sorted((name, _dtypes(v)) for name, v in (constraints or {}).items()))

    def decorate(impl: T) -> T:
        if not callable(impl):
            raise InvalidDeclarationError(
                f"@kernel({op!r}) decorates a function or Kernel subclass"
            )
        lifecycle = isinstance(impl, type) and issubclass(impl, Kernel)
        spec = KernelSpec(
            op=op,
            impl=impl,
            device=device.upper(),
            constraints=cons,
            host_memory=tuple(host_memory),
            priority=priority,
            label=label,
            options=options,
            attr_names=None if lifecycle else _attr_names(impl),
        )
        declare(impl, spec)
        return impl

    return decorate
