"""GPU builds: the static checks of device code (cuobjdump, ELF, auditwheel), the tools they run,
what the catalog stores of them, and the GPU conformance worker."""
