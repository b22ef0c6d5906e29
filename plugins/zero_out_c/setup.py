"""Build step: zero_out.cc compiled into a plain shared library (no Python) inside the
package, in a py3-none-<platform> wheel that fits every Python version. Only the C API
crosses into opmarket; the C++ layer (opmarket/c_api.hpp) is compiled in."""

from setuptools import setup

from opmarket.sdk.build import library_setup

setup(
    **library_setup(
        "opmarket_zero_out_c", "libopm_zero_out_c.so", ["src/opmarket_zero_out_c/zero_out.cc"]
    )
)
