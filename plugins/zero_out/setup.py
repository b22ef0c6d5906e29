"""The C++ kernel, one translation unit, built against opmarket's header with pybind11."""

import opmarket.sdk
from pybind11.setup_helpers import Pybind11Extension
from setuptools import setup

setup(
    ext_modules=[
        Pybind11Extension(
            "opmarket_zero_out._zero_out",
            ["src/opmarket_zero_out/zero_out.cc"],
            include_dirs=[opmarket.sdk.get_include()],
            cxx_std=17,
        )
    ]
)
