"""Build step: bitcast.c compiled into a plain shared library (no Python, no C++) inside the
package, in a py3-none-<platform> wheel that fits every Python version."""

from setuptools import setup

from opmarket.sdk.build import library_setup

setup(**library_setup("opmarket_bitcast", "libopm_bitcast.so", ["src/opmarket_bitcast/bitcast.c"]))
