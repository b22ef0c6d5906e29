"""The plugin hook: one ``register`` callback takes every declaration a plugin makes.

A plugin module names itself in the entry point group ``opmarket`` and implements::

    from opmarket.sdk import hookimpl

    @hookimpl
    def register(register):
        register(ZERO_OUT, zero_out_kernel, zero_out_grad, zero_out_shape)

``register(*items)`` takes OpDefs, and functions or classes decorated with ``@kernel``,
``@shape_fn``, ``@register_gradient``, ``@reference``, ``@input_generator`` or
``@custom_call_target`` (or the declarations themselves); the registry validates them all in
one place and reports a plugin whose declarations conflict.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pluggy

__all__ = ["PROJECT", "hookimpl", "hookspec", "register"]

#: The pluggy project name, also the entry point group.
PROJECT = "opmarket"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def register(register: Callable[..., Any]) -> None:
    """Hand ops, kernels, gradients, shape functions and custom-call targets to ``register``."""
