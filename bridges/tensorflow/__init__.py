"""opmarket ops inside TensorFlow: ``opmarket.tensorflow.ops.<op>(...)`` takes and returns
``tf.Tensor``s, eagerly and in ``tf.function``; every installed opmarket op is a real
TensorFlow op (registered through TensorFlow's C op and kernel API), so graphs and
SavedModels that use it load after ``import opmarket.tensorflow`` (see docs/frameworks.md).
``native_path`` and ``native_reason`` say which path an op's kernel takes on a device, and why.
"""

from __future__ import annotations

# Python's sqlite3 first: TensorFlow bundles an SQLite without FTS5, and a sqlite3 imported
# after it binds to that one (opmarket's catalog search needs FTS5).
import sqlite3 as _sqlite3  # noqa: F401

try:
    import tensorflow as _tf  # noqa: F401 (the framework must be there)
except ImportError as _exc:  # pragma: no cover - exercised in a venv without TensorFlow
    raise ImportError(
        "opmarket.tensorflow needs TensorFlow: pip install 'opmarket[tensorflow]'"
    ) from _exc

from opmarket._bridge import BridgeError
from opmarket.tensorflow._gradients import register_gradients
from opmarket.tensorflow._native import native_path, native_reason
from opmarket.tensorflow._ops import tf_ops
from opmarket.tensorflow._register import register_all

__all__ = ["BridgeError", "native_path", "native_reason", "ops", "register"]

#: Every installed opmarket op as a TensorFlow function (``ops.zero_out``, ``ops.opm.zero_out``,
#: ``ops["Opm>ZeroOut"]``).
ops = tf_ops()


def register() -> None:
    """Register every installed opmarket op with TensorFlow (done at import; call it again
    after installing or registering ops in this process). BridgeError lists the ops that
    clash with TensorFlow's own."""
    problems = register_all()
    register_gradients()
    if problems:
        raise BridgeError(
            "opmarket ops that cannot be bridged to TensorFlow:\n  " + "\n  ".join(problems)
        )


register()
