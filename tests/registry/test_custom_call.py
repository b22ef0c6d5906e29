from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest

from opmarket.registry import (
    RegistrationError,
    Registry,
    custom_call,
    register_custom_call_target,
)
from opmarket.sdk import NotFoundError, custom_call_target


@custom_call_target("do_custom_call")
def do_custom_call(out: Any, ins: list[Any], opaque: bytes) -> None:
    # XLA's example: A[i] = B[i % 128] + C[i], with the sizes in the opaque bytes and the
    # second tuple element used as scratch.
    a, scratch = out
    b, c = ins
    (n,) = struct.unpack("<q", opaque)
    scratch[:] = np.arange(n) % 128
    a[:] = b[scratch.astype(np.int64)] + c


def test_tuple_result_and_opaque(registry: Registry) -> None:
    registry.register(do_custom_call)
    b = np.arange(128, dtype=np.float32)
    c = np.ones(2048, dtype=np.float32)
    a, scratch = custom_call(
        "do_custom_call",
        [b, c],
        [((2048,), np.float32), ((2048,), np.float32)],
        opaque=struct.pack("<q", 2048),
        registry=registry,
    )
    np.testing.assert_array_equal(a, b[np.arange(2048) % 128] + 1)
    assert scratch.shape == (2048,)


def test_single_result_and_platforms(registry: Registry) -> None:
    register_custom_call_target(
        "twice", lambda out, ins, opaque: np.multiply(ins[0], 2, out=out), registry=registry
    )
    out = custom_call("twice", [np.arange(3)], ((3,), np.int64), registry=registry)
    assert out.tolist() == [0, 2, 4]
    with pytest.raises(
        NotFoundError,
        match=r"no custom-call target 'twice' on CUDA; registered: "
        r"twice \(Host\)",
    ):
        custom_call("twice", [np.arange(3)], ((3,), np.int64), platform="CUDA", registry=registry)


def test_conflicting_targets(registry: Registry) -> None:
    register_custom_call_target("t", lambda out, ins, opaque: None, registry=registry)
    with pytest.raises(RegistrationError, match="custom-call target 't' on Host"):
        register_custom_call_target("t", lambda out, ins, opaque: None, registry=registry)
