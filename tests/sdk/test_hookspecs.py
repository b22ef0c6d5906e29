from __future__ import annotations

import inspect
from types import SimpleNamespace
from typing import Any

import pluggy
import pytest

from opmarket.sdk import _hookspecs, hookimpl


def manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(_hookspecs.PROJECT)
    pm.add_hookspecs(_hookspecs)
    return pm


def test_every_hook_is_documented() -> None:
    hooks = [
        f
        for _, f in inspect.getmembers(_hookspecs, inspect.isfunction)
        if hasattr(f, "opmarket_spec")
    ]
    assert [h.__name__ for h in hooks] == ["register"]
    assert all(h.__doc__ and len(h.__doc__.splitlines()) == 1 for h in hooks)


def test_a_plugin_hands_items_to_the_callback() -> None:
    @hookimpl
    def register(register: Any) -> None:
        register("a", "b")

    pm = manager()
    pm.register(SimpleNamespace(register=register), name="p")
    got: list[Any] = []
    pm.hook.register(register=lambda *items: got.extend(items))
    assert got == ["a", "b"]


def test_a_wrong_hook_signature_is_rejected() -> None:
    @hookimpl
    def register(callback: Any) -> None:
        pass

    with pytest.raises(pluggy.PluginValidationError, match="callback"):
        manager().register(SimpleNamespace(register=register), name="bad")
