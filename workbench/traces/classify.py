"""The busy class of a kernel: one classifier over the normalised name (`workbench.traces.names`), whichever tool traced it.

    from workbench.traces.classify import kernel_class
    kernel_class("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>(...)")   # 'gemm'
    kernel_class("vectorized_elementwise_kernel<8, at::native::bfloat16_copy_kernel_cuda(...)::{lambda(float)#1}, "
                 "std::array<char*, 2ul>>")                                               # 'copy'

A kernel is classed by its function's own name (`base_name`: what Nsight calls the shortName), and by its template
arguments only where the function is a generic wrapper whose arguments say what it does: a CUTLASS launcher
(`cutlass::Kernel2<...sgemm...>`, `cutlass::device_kernel<...GemmUniversal...>`) runs the GEMM or attention its
argument names, and a TensorIterator kernel (`vectorized_elementwise_kernel<..., direct_copy_kernel_cuda...>`) is a
copy when its functor is a copy kernel. Nothing else in the template arguments counts: an elementwise kernel whose
functor mentions a GEMM stays elementwise.

Rules, first match wins (the regexes are data, below):
    optimizer         any kernel launched inside `wb/opt`
    glue              any kernel launched inside `wb/Lxx/attn/meta` or `wb/Lxx/moe/...`
    copy              memsets (both tools), DtoD / PtoP memcpy records
    attention         ATTENTION on the base name (or a launcher's arguments); softmax inside `wb/Lxx/attn`
    gemm              GEMM on the base name (or a launcher's arguments)
    glue              GLUE on the base name (sort, histogram, top-k, nonzero, scan, index, gather / scatter, ...)
    copy              COPY on the base name, or a TensorIterator kernel whose functor is COPY_FUNCTOR
    norm_elementwise  NORM_ELEMENTWISE on the base name, or any other TensorIterator kernel
    other             the rest
Memsets count as copies as HolisticTraceAnalysis counts them (its "memory" kernel type holds memcpy and memset).
"""
from __future__ import annotations

import functools
import re

from workbench.traces.names import MEMSET, base_name, kernel_name, template_args

ATTENTION = re.compile(r"flash|fmha|attention|_attn|sdpa|efficient_attention|dot_do_o|convert_dq", re.I)
GEMM = re.compile(r"gemm|gemv|xmma|nvjet|cutlass|cublas|matmul|splitKreduce|wgmma|_mm_kernel|grouped_mm|grouped_dw|"
                  r"bmm|ampere_.*gemm", re.I)
GLUE = re.compile(r"sort|radix|bincount|histc|histogram|topk|top_k|nonzero|cumsum|scan|index|gather|scatter|"
                  r"compact|select|unique|arange|searchsorted|repeat_interleave|embedding_dense|DeviceReduce|"
                  r"write_indices", re.I)
COPY = re.compile(r"copy|memcpy|CatArray|cat_|contiguous|transpose", re.I)
COPY_FUNCTOR = re.compile(r"copy_kernel")
"""The functor of a TensorIterator copy (`direct_copy_kernel_cuda`, `bfloat16_copy_kernel_cuda`, ...); not
`copysign_kernel`, an arithmetic op."""
NORM_ELEMENTWISE = re.compile(r"norm|elementwise|reduce|vectorized|unrolled|activation|softmax|loss|pointwise|"
                              r"triton_poi|triton_red|triton_per|silu|gelu|rms", re.I)
LAUNCHERS = frozenset({"Kernel", "Kernel2", "device_kernel"})
"""CUTLASS's generic launchers: the kernel they run is named in their template argument."""
TENSOR_ITERATOR = frozenset({"elementwise_kernel", "vectorized_elementwise_kernel", "unrolled_elementwise_kernel",
                             "reduce_kernel", "vectorized_templated_elementwise_kernel"})
"""PyTorch's generic elementwise / reduction kernels: what they compute is their functor (a template argument)."""
COPY_RECORDS = ("DtoD", "PtoP")
"""memcpy records that move data on the device (the `copy` class); host<->device copies are idle-time causes."""


def kernel_class(name, part: str | None = None, pass_: str | None = None) -> str:
    """The busy class of a kernel (see the module docstring), from its name in any form either tool writes
    (libstdc++- or Nsight-demangled, mangled, short) and the range it was launched in."""
    name = name if isinstance(name, str) else ""
    part = part if isinstance(part, str) else None
    pass_ = pass_ if isinstance(pass_, str) else None
    return _kernel_class(kernel_name(name), part, pass_)


@functools.lru_cache(maxsize=None)
def _kernel_class(name: str, part: str | None, pass_: str | None) -> str:
    if pass_ == "opt":
        return "optimizer"
    if part and (part == "attn/meta" or part.startswith("moe/")):
        return "glue"
    if name == MEMSET or name in COPY_RECORDS:
        return "copy"
    base, targs = base_name(name), template_args(name)
    launcher_args = targs if base in LAUNCHERS else ""
    if ATTENTION.search(base) or ATTENTION.search(launcher_args) or (part == "attn" and "softmax" in base.lower()):
        return "attention"
    if GEMM.search(base) or GEMM.search(launcher_args):
        return "gemm"
    if GLUE.search(base):
        return "glue"
    if COPY.search(base) or (base in TENSOR_ITERATOR and COPY_FUNCTOR.search(targs)):
        return "copy"
    if NORM_ELEMENTWISE.search(base) or base in TENSOR_ITERATOR:
        return "norm_elementwise"
    return "other"
