"""The CPU kernel (pybind11, opmarket's header). The CUDA kernel is not built here: it ships
in the GPU companion opmarket-time-two-cuda13 (plugins/time_two_cuda13), the extra cuda13.
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
            "opmarket_time_two._time_two",
            ["src/opmarket_time_two/time_two.cc"],
            include_dirs=[opmarket.sdk.get_include()],
            depends=["src/opmarket_time_two/time_two.h", HEADER],
            cxx_std=17,
        )
    ],
)
