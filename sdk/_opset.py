"""An op-set: the ops (and, when known, the kernels) one release of a plugin provides."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from opmarket.sdk._dtypes import DType
from opmarket.sdk._opdef import OpDef

__all__ = ["KernelDef", "OpSet"]


@dataclass(frozen=True, slots=True)
class KernelDef:
    """Which (device, dtypes) an op has a kernel for: TensorFlow's KernelDef, as data.

    ``constraints`` maps a type attr to the dtypes the kernel accepts, as sorted pairs;
    an attr that is not named is unconstrained.
    """

    op: str
    device: str = "CPU"
    constraints: tuple[tuple[str, tuple[DType, ...]], ...] = ()
    host_memory: tuple[str, ...] = ()
    label: str = ""
    priority: int = 0

    def constraint(self, attr: str) -> tuple[DType, ...] | None:
        """The dtypes the kernel accepts for type attr ``attr``; None if it is unconstrained."""
        return next((types for name, types in self.constraints if name == attr), None)

    @property
    def definition(self) -> KernelDef:
        """The declaration as plain data (a kernel with an implementation drops it)."""
        if type(self) is KernelDef:
            return self
        return KernelDef(
            self.op, self.device, self.constraints, self.host_memory, self.label, self.priority
        )


@dataclass(frozen=True, slots=True)
class OpSet:
    """Ops and kernels of one release; ``name``/``version`` say whose release when known."""

    ops: tuple[OpDef, ...] = ()
    kernels: tuple[KernelDef, ...] = ()
    name: str = ""
    version: str = ""
    _by_name: dict[str, OpDef] = field(
        init=False, repr=False, compare=False, hash=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        self._by_name.update((o.name, o) for o in self.ops)

    @classmethod
    def of(cls, ops: Iterable[OpDef], kernels: Iterable[KernelDef] = (), **meta: str) -> OpSet:
        """An OpSet from iterables of ops and kernels; ``meta`` sets ``name`` and ``version``."""
        return cls(tuple(ops), tuple(kernels), **meta)

    def __getitem__(self, name: str) -> OpDef:
        return self._by_name[name]

    def get(self, name: str) -> OpDef | None:
        """The op called ``name``, or None (``opset[name]`` raises KeyError instead)."""
        return self._by_name.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[OpDef]:
        return iter(self.ops)

    def __len__(self) -> int:
        return len(self.ops)

    def kernels_for(self, op: str) -> tuple[KernelDef, ...]:
        """The kernels recorded for ``op``; empty if there are none or they are not known."""
        return tuple(k for k in self.kernels if k.op == op)
