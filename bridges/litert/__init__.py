"""opmarket ops in LiteRT models: ``opmarket.litert.interpreter(...)`` runs a ``.tflite``
model whose custom ops are opmarket ops (as ``tf.lite.TFLiteConverter`` with
``allow_custom_ops=True`` writes them) with LiteRT, each custom op resolved by name and
version to opmarket's kernels (see docs/frameworks.md). C-ABI kernels run natively (C
callbacks on LiteRT's buffers); ``native_path`` and ``native_reason`` say which path an op
takes and why."""

from __future__ import annotations

import os
from typing import Any

try:
    import ai_edge_litert as _litert  # noqa: F401 (the framework must be there)
except ImportError as _exc:  # pragma: no cover - exercised in a venv without LiteRT
    raise ImportError("opmarket.litert needs LiteRT: pip install 'opmarket[litert]'") from _exc

from opmarket.litert._interpreter import Interpreter, custom_ops_of, interpreter_from
from opmarket.litert._native import native_path, native_reason

__all__ = ["Interpreter", "custom_ops_of", "interpreter", "native_path", "native_reason"]


def interpreter(
    model_path: str | os.PathLike[str] | None = None,
    model_content: bytes | None = None,
    **kwargs: Any,
) -> Interpreter:
    """A ready interpreter for the model at ``model_path`` or in ``model_content``, with
    opmarket's ops registered as its custom ops. The model is scanned first: a custom op that
    no installed opmarket op (and version) provides raises ``NotFoundError`` naming it."""
    return interpreter_from(model_path, model_content, kwargs)
