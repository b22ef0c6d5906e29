"""SavedModels with opmarket ops and their gradients, saved here and loaded in a new process,
in the form of TensorFlow's own SavedModel tests.

Origin: tensorflow/tensorflow ``tensorflow/python/saved_model/load_test.py``: ``LoadTest``
saves a ``tf.Module`` whose ``tf.function``s capture variables, loads it (its ``cycle``),
and compares the loaded functions' results with the original's (``test_capture_variables``,
``test_explicit_input_signature``, ``test_nested_functions``); and its checks that a
gradient taken with a ``GradientTape`` through a loaded function is the original's. Here
the load happens in a fresh Python process, where only ``import opmarket.tensorflow`` makes
the ops known: no Python callback of the saving process exists there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="needs the tensorflow extra")

import opmarket.tensorflow as otf  # noqa: E402 (after the skip)
from tests.first_party import needs_first_party  # noqa: E402

pytestmark = needs_first_party

X = [0.5, -1.0, 2.0, 3.5]
POOL = {"ksize": [1, 2, 2, 1], "strides": [1, 1, 1, 1], "padding": "SAME"}


class Model(tf.Module):
    """A forward pass over four first-party ops, its gradient, and a train step on a
    variable the functions capture."""

    def __init__(self) -> None:
        self.w = tf.Variable([1.0, 2.0, -1.0, 0.5])

    def _loss(self, x: Any) -> Any:
        h = otf.ops.atan(x * self.w) + otf.ops.time_two(self.w)
        h = otf.ops.zero_out(h, preserve_index=2) + h
        image = tf.reshape(h, [1, 2, 2, 1])
        return tf.reduce_sum(otf.ops.median_pool(image, **POOL))

    @tf.function(input_signature=[tf.TensorSpec([4], tf.float32)])
    def forward(self, x: Any) -> Any:
        return self._loss(x)

    @tf.function(input_signature=[tf.TensorSpec([4], tf.float32)])
    def gradient(self, x: Any) -> Any:
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = self._loss(x)
        dx, dw = tape.gradient(loss, [x, self.w])
        return {"dx": dx, "dw": dw}

    @tf.function(input_signature=[tf.TensorSpec([4], tf.float32)])
    def train(self, x: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = self._loss(x)
        (dw,) = tape.gradient(loss, [self.w])
        self.w.assign_sub(0.1 * dw)
        return self.w.read_value()

    @tf.function(input_signature=[tf.TensorSpec([3], tf.float32)])
    def bits(self, x: Any) -> Any:
        return otf.ops.bitcast(x, type=tf.int32)


LOAD = """
import json, sys
import numpy as np
import tensorflow as tf
import opmarket.tensorflow

loaded = tf.saved_model.load(sys.argv[1])
x = tf.constant(json.loads(sys.argv[2]), tf.float32)
out = {"forward": float(loaded.forward(x).numpy())}
grads = loaded.gradient(x)
out["dx"] = grads["dx"].numpy().tolist()
out["dw"] = grads["dw"].numpy().tolist()
# A new gradient through the loaded forward function, taken in this process.
with tf.GradientTape() as tape:
    tape.watch(x)
    loss = loaded.forward(x)
out["tape_dx"] = tape.gradient(loss, x).numpy().tolist()
out["train"] = loaded.train(x).numpy().tolist()
out["w"] = loaded.w.numpy().tolist()
out["bits"] = loaded.bits(tf.constant([1.0, -2.0, 0.5])).numpy().tolist()
print("RESULT " + json.dumps(out))
"""


def _load_in_a_new_process(path: Path) -> dict[str, Any]:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(LOAD), str(path), json.dumps(X)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    found: dict[str, Any] = json.loads(line.removeprefix("RESULT "))
    return found


@pytest.mark.slow
def test_forward_and_gradient_functions_reload_in_a_new_process(tmp_path: Path) -> None:
    model = Model()
    x = tf.constant(X)
    want_forward = float(model.forward(x).numpy())
    grads = model.gradient(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = model.forward(x)
    want_tape_dx = tape.gradient(loss, x).numpy()
    want_bits = model.bits(tf.constant([1.0, -2.0, 0.5])).numpy()
    tf.saved_model.save(model, str(tmp_path / "model"))
    want_train = model.train(x).numpy()  # after saving: the saved variable is the old one

    got = _load_in_a_new_process(tmp_path / "model")

    assert got["forward"] == want_forward
    np.testing.assert_array_equal(got["dx"], grads["dx"].numpy())
    np.testing.assert_array_equal(got["dw"], grads["dw"].numpy())
    np.testing.assert_array_equal(got["tape_dx"], want_tape_dx)
    np.testing.assert_array_equal(got["train"], want_train)
    np.testing.assert_array_equal(got["w"], want_train)
    np.testing.assert_array_equal(got["bits"], want_bits)
    assert np.abs(got["dx"]).sum() > 0 and np.abs(got["dw"]).sum() > 0
