"""Triton kernels (testable on CPU tensors under TRITON_INTERPRET=1).

Import the kernel modules lazily (`from workbench.kernels.grouped_gemm import grouped_mm`): `@triton.jit` reads
TRITON_INTERPRET when a kernel is defined, so the variable must be set before the module is first imported.
"""
