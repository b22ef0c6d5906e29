"""The C++ kernel, one translation unit, built against opmarket's header with pybind11.

No -march flags: the wheel runs on any x86-64 CPU; the SIMD variants inside carry their own
target attributes and are chosen at run time.
"""

from pathlib import Path

from pybind11.setup_helpers import Pybind11Extension
from setuptools import setup

import opmarket.sdk

# Rebuilt when opmarket's header changes too, not only the plugin's own sources.
HEADER = str(Path(opmarket.sdk.get_include(), "opmarket", "kernel.h"))

setup(
    ext_modules=[
        Pybind11Extension(
            "opmarket_median_pool._median_pool",
            ["src/opmarket_median_pool/median_pool.cc"],
            include_dirs=[opmarket.sdk.get_include()],
            depends=["src/opmarket_median_pool/median3x3.inc", HEADER],
            cxx_std=17,
        )
    ]
)
