"""ZeroOut's C-ABI kernel: ``libopm_zero_out_c.so``, which the entry point names, built on
opmarket's header-only C++ layer (``opmarket/c_api.hpp``). Its kernels carry the label
``c_abi``; the shape function, gradient and reference are opmarket-zero-out's."""
