"""The frameworks' own custom ops that bench/bridges.py measures opmarket's bridges against:
the same computations (``kernels.h``) as a TensorFlow C++ op, a PyTorch ``TORCH_LIBRARY`` op,
XLA FFI handlers and LiteRT custom-op kernels, built once into a cache folder, and the rows of
each framework (``*_rows.py``)."""
