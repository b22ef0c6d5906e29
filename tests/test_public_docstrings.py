"""Every public name of sdk, registry, compat and web has a docstring (STYLE habit 14), as
datasette tests that every plugin hook is documented. (Each ``__all__`` names what exists:
tests/test_exports.py; its order is ruff's RUF022.)"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import opmarket.compat
import opmarket.registry
import opmarket.sdk
import opmarket.sdk.build
import opmarket.web

MODULES = [opmarket.sdk, opmarket.sdk.build, opmarket.registry, opmarket.compat, opmarket.web]


def _has_doc(obj: Any) -> bool:
    """Whether ``obj`` has a docstring of its own; a dataclass's generated signature is none."""
    doc = (getattr(obj, "__doc__", None) or "").strip()
    if inspect.isclass(obj) and dataclasses.is_dataclass(obj):
        # What dataclasses writes into __doc__ when the class has none.
        generated = obj.__name__ + str(inspect.signature(obj)).replace(" -> None", "")
        return bool(doc) and doc != generated
    return bool(doc)


def _members(cls: type) -> Iterator[tuple[str, Any]]:
    """The public methods and properties ``cls`` itself defines, as the callables that carry
    their docstrings (a property's getter, a classmethod's function)."""
    for name, value in vars(cls).items():
        if name.startswith("_"):
            continue
        if isinstance(value, (classmethod, staticmethod)):
            yield name, value.__func__
        elif isinstance(value, property):
            yield name, value.fget
        elif isinstance(value, functools.cached_property):
            yield name, value.func
        elif inspect.isfunction(value):
            yield name, value


def undocumented(modules: list[ModuleType]) -> list[str]:
    """Every function or class in each module's ``__all__``, and every public method or
    property of those classes, that has no docstring, as ``module.Name.member``."""
    missing: list[str] = []
    seen: set[int] = set()
    for module in modules:
        for name in module.__all__:
            obj = getattr(module, name)
            if not (inspect.isfunction(obj) or inspect.isclass(obj)) or id(obj) in seen:
                continue
            seen.add(id(obj))
            where = f"{module.__name__}.{name}"
            if not _has_doc(obj):
                missing.append(where)
            if inspect.isclass(obj):
                missing.extend(
                    f"{where}.{member}" for member, fn in _members(obj) if not _has_doc(fn)
                )
    return missing


def test_every_public_name_has_a_docstring() -> None:
    missing = undocumented(MODULES)
    assert not missing, (
        f"{len(missing)} public names have no docstring (STYLE habit 14: say what it does for "
        "a caller, one line where one line does):\n  " + "\n  ".join(missing)
    )


def test_the_check_finds_what_is_undocumented() -> None:
    """The check above would fail: it sees each kind of public name that can lack a doc."""

    @dataclasses.dataclass
    class Record:
        size: int

        @property
        def empty(self) -> bool:
            return not self.size

        @classmethod
        def of(cls, size: int) -> Record:
            return cls(size)

        @staticmethod
        def unit() -> int:
            return 1

        @functools.cached_property
        def double(self) -> int:
            return 2 * self.size

        def grow(self) -> None:
            self.size += 1

        def _private(self) -> None:
            pass

    class Documented:
        """Has a docstring."""

        def method(self) -> None:
            """So does this."""

    def function() -> None:
        pass

    module = ModuleType("fake")
    exported = {"CONSTANT": 1, "Documented": Documented, "Record": Record, "function": function}
    # CONSTANT is neither a function nor a class: the check passes over it.
    vars(module).update(exported, __all__=list(exported))
    assert undocumented([module]) == [
        "fake.Record",
        "fake.Record.empty",
        "fake.Record.of",
        "fake.Record.unit",
        "fake.Record.double",
        "fake.Record.grow",
        "fake.function",
    ]
