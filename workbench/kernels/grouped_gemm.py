"""Grouped GEMM over expert-sorted rows in Triton: forward, grad input and grad weight, sync-free.

    # S = routed rows (tokens x k, sorted by expert), E = experts, K = input features, N = output features

`grouped_mm(x_SK, w_EKN, offs_E)` computes, for every expert e, `y[offs[e-1]:offs[e]] = x[offs[e-1]:offs[e]] @ w[e]`
(offs[-1] of expert -1 is 0): the contract of `torch._grouped_mm(x, w, offs=offs)`. `offs_E` is the int32 (or
int64) cumulative row count per expert and stays on the device. Nothing is read back to the host: the launch
grid is sized from S and E alone (at most cdiv(S, BLOCK_M) + E row tiles, whatever the routing), and each
program finds its expert and rows from `offs` inside the kernel; programs past the last tile run no K loop.
Rows at or past offs[-1] of the output (and of grad input) are left unwritten, as in torch._grouped_mm.

Backward: grad input is the same kernel on w[e]^T (a stride swap, no copy); grad weight is a second kernel with
one program per (expert, K tile, N tile) looping over that expert's rows (zeros for experts with no rows).
Any strides work (torch's transposed expert views, stride-0 gradients). bf16, fp16 and fp32; accumulation in
fp32; fp32 inputs use IEEE fp32 dot products unless `torch.backends.cuda.matmul.allow_tf32` is set.

On a GPU the block sizes are autotuned per (K, N, dtype); under TRITON_INTERPRET=1 (CPU tensors, tests) fixed
small blocks are used, and bf16/fp16 tiles are widened to fp32 before `tl.dot` (the interpreter of triton 3.9
computes garbage for a bf16 `tl.dot`; the widening is exact, so results equal bf16 products accumulated in fp32). Run: `python -m workbench.bench.moe --out DIR` benchmarks it against torch._grouped_mm.
"""
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
"""Whether these kernels were defined for the interpreter (fixed at import, like `@triton.jit` itself)."""

LAUNCHES = 0
"""Kernel launches so far (benchmarks count launches; Triton's are not aten ops)."""


@triton.jit
def _expert_tile(offs_ptr, pid_m, E, BLOCK_M: tl.constexpr, E_PAD: tl.constexpr):
    """Expert index and row range [row0, row_end) of row tile `pid_m`; e == E (empty range) past the last tile."""
    idx = tl.arange(0, E_PAD)
    in_e = idx < E
    ends = tl.load(offs_ptr + idx, mask=in_e, other=0).to(tl.int32)
    starts = tl.load(offs_ptr + idx - 1, mask=in_e & (idx > 0), other=0).to(tl.int32)
    counts = tl.where(in_e, ends - starts, 0)
    tiles = (counts + BLOCK_M - 1) // BLOCK_M
    tile_end = tl.cumsum(tiles, 0)
    e = tl.sum((tile_end <= pid_m).to(tl.int32), 0)  # experts whose tiles all lie before this one
    sel = idx == e
    tile0 = tl.sum(tl.where(sel, tile_end - tiles, 0), 0)
    row_start = tl.sum(tl.where(sel, starts, 0), 0)
    row_end = tl.sum(tl.where(sel, ends, 0), 0)
    row0 = row_start + (pid_m - tile0) * BLOCK_M
    return e, row0, row_end


@triton.jit
def _grouped_mm_kernel(x_ptr, w_ptr, y_ptr, offs_ptr, K, N, E,
                       s_xs, s_xk, s_we, s_wk, s_wn, s_ys, s_yn,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                       E_PAD: tl.constexpr, IEEE: tl.constexpr, DOT_F32: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    e, row0, row_end = _expert_tile(offs_ptr, pid_m, E, BLOCK_M, E_PAD)
    e_safe = tl.minimum(e, E - 1).to(tl.int64)
    rows = row0 + tl.arange(0, BLOCK_M)
    row_ok = rows < row_end
    rows64 = rows.to(tl.int64)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    k_tiles = tl.where(row0 < row_end, tl.cdiv(K, BLOCK_K), 0)
    for kt in range(0, k_tiles):
        k = kt * BLOCK_K + ks
        k_ok = k < K
        a = tl.load(x_ptr + rows64[:, None] * s_xs + k[None, :] * s_xk, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(w_ptr + e_safe * s_we + k[:, None] * s_wk + cols[None, :] * s_wn,
                    mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        if DOT_F32:
            a, b = a.to(tl.float32), b.to(tl.float32)
        if IEEE:
            acc += tl.dot(a, b, input_precision="ieee")
        else:
            acc += tl.dot(a, b)
    tl.store(y_ptr + rows64[:, None] * s_ys + cols[None, :] * s_yn, acc.to(y_ptr.dtype.element_ty),
             mask=row_ok[:, None] & col_ok[None, :])


@triton.jit
def _grouped_dw_kernel(x_ptr, dy_ptr, dw_ptr, offs_ptr, K, N,
                       s_xs, s_xk, s_ds, s_dn, s_we, s_wk, s_wn,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, IEEE: tl.constexpr,
                       DOT_F32: tl.constexpr):
    pid = tl.program_id(0)
    tiles_k = tl.cdiv(K, BLOCK_K)
    tiles_n = tl.cdiv(N, BLOCK_N)
    e = pid // (tiles_k * tiles_n)
    r = pid % (tiles_k * tiles_n)
    k = (r // tiles_n) * BLOCK_K + tl.arange(0, BLOCK_K)
    cols = (r % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    k_ok = k < K
    col_ok = cols < N
    row_end = tl.load(offs_ptr + e).to(tl.int32)
    row_start = tl.load(offs_ptr + e - 1, mask=e > 0, other=0).to(tl.int32)
    ms = tl.arange(0, BLOCK_M)
    acc = tl.zeros((BLOCK_K, BLOCK_N), dtype=tl.float32)
    for m0 in range(row_start, row_end, BLOCK_M):
        rows = m0 + ms
        row_ok = rows < row_end
        rows64 = rows.to(tl.int64)
        xt = tl.load(x_ptr + rows64[None, :] * s_xs + k[:, None] * s_xk, mask=k_ok[:, None] & row_ok[None, :],
                     other=0.0)
        dy = tl.load(dy_ptr + rows64[:, None] * s_ds + cols[None, :] * s_dn, mask=row_ok[:, None] & col_ok[None, :],
                     other=0.0)
        if DOT_F32:
            xt, dy = xt.to(tl.float32), dy.to(tl.float32)
        if IEEE:
            acc += tl.dot(xt, dy, input_precision="ieee")
        else:
            acc += tl.dot(xt, dy)
    tl.store(dw_ptr + e.to(tl.int64) * s_we + k[:, None] * s_wk + cols[None, :] * s_wn,
             acc.to(dw_ptr.dtype.element_ty), mask=k_ok[:, None] & col_ok[None, :])


def _configs(dw: bool):
    if dw:
        shapes = [(64, 128, 128, 8, 3), (128, 128, 64, 8, 3), (64, 64, 64, 4, 4)]  # BLOCK_M (rows), N, K
    else:
        shapes = [(128, 128, 64, 8, 3), (128, 256, 64, 8, 3), (64, 128, 64, 4, 4), (128, 64, 64, 4, 4)]
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k}, num_warps=w, num_stages=s)
            for m, n, k, w, s in shapes]


_INTERPRET_BLOCKS = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16}

if INTERPRET:
    _fwd_kernel, _dw_kernel = _grouped_mm_kernel, _grouped_dw_kernel
else:
    _fwd_kernel = triton.autotune(_configs(False), key=["K", "N"])(_grouped_mm_kernel)
    _dw_kernel = triton.autotune(_configs(True), key=["K", "N"])(_grouped_dw_kernel)


def _ieee(dtype: torch.dtype) -> bool:
    return dtype == torch.float32 and not torch.backends.cuda.matmul.allow_tf32


def _check(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> None:
    if x.dim() != 2 or w.dim() != 3 or offs.dim() != 1:
        raise ValueError(f"grouped_mm wants x (S,K), w (E,K,N), offs (E,); got {tuple(x.shape)}, {tuple(w.shape)}, "
                         f"{tuple(offs.shape)}")
    if x.shape[1] != w.shape[1] or offs.shape[0] != w.shape[0]:
        raise ValueError(f"grouped_mm shape mismatch: x {tuple(x.shape)}, w {tuple(w.shape)}, offs {tuple(offs.shape)}")
    if x.dtype != w.dtype or x.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"grouped_mm wants x and w of one dtype among bf16/fp16/fp32, got {x.dtype}, {w.dtype}")
    if offs.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"offs must be int32 or int64, got {offs.dtype}")
    if x.device.type == "cpu" and not INTERPRET:
        raise RuntimeError("the Triton grouped GEMM runs on CPU tensors only under TRITON_INTERPRET=1 "
                           "(set it before workbench.kernels.grouped_gemm is first imported)")


def grouped_mm_fwd(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """y (S,N) with y[rows of e] = x[rows of e] @ w[e]; no autograd (see `grouped_mm`)."""
    _check(x, w, offs)
    S, K = x.shape
    E, _, N = w.shape
    y = torch.empty((S, N), dtype=x.dtype, device=x.device)
    if S == 0 or N == 0:
        return y
    global LAUNCHES
    LAUNCHES += 1
    e_pad = max(16, triton.next_power_of_2(E))
    args = (x, w, y, offs, K, N, E, x.stride(0), x.stride(1), w.stride(0), w.stride(1), w.stride(2),
            y.stride(0), y.stride(1))
    if INTERPRET:
        b = _INTERPRET_BLOCKS
        grid = (triton.cdiv(S, b["BLOCK_M"]) + E, triton.cdiv(N, b["BLOCK_N"]))
        _fwd_kernel[grid](*args, E_PAD=e_pad, IEEE=_ieee(x.dtype), DOT_F32=True, **b)
    else:
        def grid(meta):
            return (triton.cdiv(S, meta["BLOCK_M"]) + E, triton.cdiv(N, meta["BLOCK_N"]))
        _fwd_kernel[grid](*args, E_PAD=e_pad, IEEE=_ieee(x.dtype), DOT_F32=False)
    return y


def grouped_mm_dw(x: torch.Tensor, dy: torch.Tensor, offs: torch.Tensor, E: int) -> torch.Tensor:
    """dw (E,K,N) with dw[e] = x[rows of e]^T @ dy[rows of e] (zeros for experts without rows)."""
    S, K = x.shape
    N = dy.shape[1]
    dw = torch.empty((E, K, N), dtype=x.dtype, device=x.device)
    if E == 0 or K == 0 or N == 0:
        return dw
    global LAUNCHES
    LAUNCHES += 1
    args = (x, dy, dw, offs, K, N, x.stride(0), x.stride(1), dy.stride(0), dy.stride(1),
            dw.stride(0), dw.stride(1), dw.stride(2))
    if INTERPRET:
        b = _INTERPRET_BLOCKS
        grid = (E * triton.cdiv(K, b["BLOCK_K"]) * triton.cdiv(N, b["BLOCK_N"]),)
        _dw_kernel[grid](*args, IEEE=_ieee(x.dtype), DOT_F32=True, **b)
    else:
        def grid(meta):
            return (E * triton.cdiv(K, meta["BLOCK_K"]) * triton.cdiv(N, meta["BLOCK_N"]),)
        _dw_kernel[grid](*args, IEEE=_ieee(x.dtype), DOT_F32=False)
    return dw


class _GroupedMM(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, offs):
        ctx.save_for_backward(x, w, offs)
        return grouped_mm_fwd(x, w, offs)

    @staticmethod
    def backward(ctx, dy):
        x, w, offs = ctx.saved_tensors
        dy = dy.to(x.dtype)
        dx = grouped_mm_fwd(dy, w.transpose(1, 2), offs) if ctx.needs_input_grad[0] else None
        dw = grouped_mm_dw(x, dy, offs, w.shape[0]) if ctx.needs_input_grad[1] else None
        return dx, dw, None


def grouped_mm(x_SK: torch.Tensor, w_EKN: torch.Tensor, offs_E: torch.Tensor) -> torch.Tensor:
    """Differentiable grouped GEMM over expert-sorted rows (the contract of `torch._grouped_mm(x, w, offs=offs)`).

    x_SK: rows sorted by expert; w_EKN: one (K,N) matrix per expert, any strides; offs_E: cumulative rows per expert
    (int32/int64, on the device). Returns y_SN. Sync-free: no host read in forward or backward.
    """
    return _GroupedMM.apply(x_SK, w_EKN, offs_E)
