"""The Triton grouped GEMM under TRITON_INTERPRET=1 (CPU tensors) against a float64 reference, forward and backward,
and the `grouped` MoE arm with gemm="triton" against transformers' eager experts loop.

`@triton.jit` reads TRITON_INTERPRET when a kernel is defined, so the variable is set before the kernel module is
imported (and the module reloaded if another test imported it first); both are undone when this module's tests end.
If triton itself was already imported without the variable (triton.language's own `@jit` helpers are then compiled
functions), the tests run in a fresh subprocess instead.
"""
import importlib
import importlib.util
import os
import sys

import pytest
import torch

if importlib.util.find_spec("triton") is None:
    pytest.skip("triton is not installed", allow_module_level=True)
_PREV_INTERPRET = os.environ.get("TRITON_INTERPRET")
_TRITON_WAS_IMPORTED = "triton" in sys.modules
if not torch.cuda.is_available():  # on a GPU the process's other tests compile real Triton kernels (inductor's flex):
    # the interpreter there would run them too (the H100, 2026-11-26), so a GPU runs these in a fresh process
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: triton.language's own @jit helpers read it then
import triton.language.standard  # noqa: E402
from triton.runtime.interpreter import InterpretedFunction  # noqa: E402

IN_PROCESS = isinstance(triton.language.standard.cumsum, InterpretedFunction)
"""False when triton was imported earlier in this process without the interpreter, or on a GPU machine: the tests then
run in a fresh subprocess (`test_in_a_fresh_process`, with TRITON_INTERPRET=1)."""
_MOD = "workbench.kernels.grouped_gemm"
if IN_PROCESS:
    gg = importlib.reload(sys.modules[_MOD]) if _MOD in sys.modules else importlib.import_module(_MOD)
in_process = pytest.mark.skipif(not IN_PROCESS, reason="triton was imported without TRITON_INTERPRET=1; "
                                                       "see test_in_a_fresh_process")


@pytest.fixture(scope="module", autouse=True)
def _restore_env():
    yield
    if _PREV_INTERPRET is None:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = _PREV_INTERPRET
    if IN_PROCESS:
        sys.modules.pop(_MOD, None)  # the next importer defines the kernels for its own environment


@pytest.mark.skipif(IN_PROCESS, reason="the tests run in this process")
def test_in_a_fresh_process():
    import subprocess
    env = dict(os.environ, TRITON_INTERPRET="1")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__], env=env,
                       capture_output=True, text=True, timeout=600,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


TOL = {torch.float32: dict(atol=2e-5, rtol=2e-5), torch.bfloat16: dict(atol=2e-2, rtol=2e-2)}

# (name, counts per expert): empty experts, all rows on one expert, a single expert, E > 16 (padded expert vector),
# row counts that are not multiples of the block size
ROUTINGS = [
    ("mixed_with_empty", [10, 0, 21, 0, 7]),
    ("all_on_one", [0, 0, 33, 0]),
    ("single_expert", [19]),
    ("many_experts", [3, 0, 1, 0, 0, 5, 2, 0, 0, 1, 0, 4, 0, 0, 2, 0, 1, 3, 0, 1]),
    ("first_and_last", [17, 0, 0, 16]),
]


def _ref_grouped(x, w, counts):
    ends = torch.tensor(counts).cumsum(0).tolist()
    starts = [0] + ends[:-1]
    return torch.cat([x[s:e] @ w[i] for i, (s, e) in enumerate(zip(starts, ends))])


def _operands(counts, K, N, dtype, transposed_w, seed=0):
    g = torch.Generator().manual_seed(seed)
    S, E = sum(counts), len(counts)
    x = torch.randn(S, K, generator=g).to(dtype)
    if transposed_w:  # a transposed view, as for Qwen3-MoE's (E, out, in) experts
        w = torch.randn(E, N, K, generator=g).to(dtype).transpose(1, 2)
    else:
        w = torch.randn(E, K, N, generator=g).to(dtype)
    offs = torch.tensor(counts).cumsum(0).to(torch.int32)
    dy = torch.randn(S, N, generator=g).to(dtype)
    return x, w, offs, dy


@in_process
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name, counts", ROUTINGS, ids=[r[0] for r in ROUTINGS])
def test_triton_grouped_mm_matches_float64_forward_and_backward(name, counts, dtype):
    K, N = (24, 40) if name == "mixed_with_empty" else (20, 16)  # K, N not multiples of the 16-wide blocks
    x, w, offs, dy = _operands(counts, K, N, dtype, transposed_w=(name == "mixed_with_empty"))
    xt, wt = x.clone().requires_grad_(), w.detach().clone().requires_grad_()
    y = gg.grouped_mm(xt, wt, offs)
    y.backward(dy)
    xd, wd = x.double().requires_grad_(), w.double().requires_grad_()
    yd = _ref_grouped(xd, wd, counts)
    yd.backward(dy.double())
    assert y.dtype == dtype and xt.grad.dtype == dtype and wt.grad.dtype == dtype
    torch.testing.assert_close(y.double(), yd.detach(), **TOL[dtype])
    torch.testing.assert_close(xt.grad.double(), xd.grad, **TOL[dtype])
    torch.testing.assert_close(wt.grad.double(), wd.grad, **TOL[dtype])
    for e, c in enumerate(counts):  # experts with no rows get an exact zero weight gradient
        if c == 0:
            assert torch.equal(wt.grad[e], torch.zeros_like(wt.grad[e]))


@in_process
def test_stride_zero_gradient_and_no_weight_grad():
    counts = [5, 0, 11]
    x, w, offs, _ = _operands(counts, 16, 32, torch.float32, transposed_w=False, seed=1)
    xt = x.clone().requires_grad_()
    gg.grouped_mm(xt, w, offs).sum().backward()  # sum's backward hands over a stride-0 gradient
    xd = x.double().requires_grad_()
    _ref_grouped(xd, w.double(), counts).sum().backward()
    torch.testing.assert_close(xt.grad.double(), xd.grad, **TOL[torch.float32])


@in_process
def test_matches_torch_grouped_mm_on_cpu():
    counts = [7, 0, 9, 16]
    x, w, offs, _ = _operands(counts, 32, 48, torch.float32, transposed_w=False, seed=2)
    ref = torch._grouped_mm(x, w, offs=offs)
    torch.testing.assert_close(gg.grouped_mm(x, w, offs), ref, **TOL[torch.float32])


@in_process
def test_bad_operands_are_rejected():
    x, w, offs, _ = _operands([4, 4], 16, 16, torch.float32, transposed_w=False)
    with pytest.raises(ValueError):
        gg.grouped_mm(x, w.to(torch.bfloat16), offs)
    with pytest.raises(ValueError):
        gg.grouped_mm(x[:, :8], w, offs)
    with pytest.raises(ValueError):
        gg.grouped_mm(x, w, offs.float())


@in_process
@pytest.mark.parametrize("preset", ["tiny-gpt-oss", "tiny-qwen3-moe"])
def test_grouped_arm_with_triton_gemm_matches_eager(preset):
    from tests.test_moe import experts_module, routing, run_experts

    mod = experts_module(preset, torch.float32, num_experts=5, hidden=32, inter=16)
    idx, wts = routing("random_with_empty", N=12, E=5, k=2, seed=5)
    ref = run_experts(mod, "eager", idx, wts, seed=5)
    out = run_experts(mod, "grouped", idx, wts, seed=5, gemm="triton")
    for name in ref:
        torch.testing.assert_close(out[name], ref[name], **TOL[torch.float32], msg=f"{preset} {name}")
