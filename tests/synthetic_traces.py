"""Synthetic event tables (the `workbench.traces.events` schema) with known answers, for the decomposition and the
savings models' tests. Times are given in microseconds and stored in ns."""
from __future__ import annotations

import itertools

from workbench.traces.events import _frame

US = 1000


class Trace:
    """Builder: host ranges on thread 1, runtime calls launching GPU work (correlated), GPU work on streams."""

    def __init__(self):
        self.rows: list[dict] = []
        self._corr = itertools.count(1)

    def range(self, name, a, b, tid=1):
        self.rows.append(dict(kind="range", name=name, start_ns=int(a * US), end_ns=int(b * US), tid=tid))
        return self

    def runtime(self, name, a, b, tid=1, corr=None):
        self.rows.append(dict(kind="runtime", name=name, start_ns=int(a * US), end_ns=int(b * US), tid=tid,
                              correlation=corr))
        return self

    def launch(self, at, kind, name, a, b, stream=7, nbytes=None):
        """A runtime call at host time `at` (lasting 1 us) that launches GPU work [a, b] (kernel or memcpy)."""
        c = next(self._corr)
        self.runtime("cudaLaunchKernel" if kind == "kernel" else "cudaMemcpyAsync", at, at + 1, corr=c)
        self.rows.append(dict(kind=kind, name=name, start_ns=int(a * US), end_ns=int(b * US), stream=stream,
                              correlation=c, bytes=nbytes))
        return self

    def events(self):
        rows = [{**{"layer": None, "pass": None, "part": None}, **r} for r in self.rows]
        return _frame(rows, "torch")


def one_step():
    """A 100 us step with known components:

        [0, 10)   launch_gap          nothing queued yet
        [10, 30)  gemm                (an elementwise kernel on stream 8 overlaps [25, 40): the GEMM is charged)
        [30, 40)  norm_elementwise
        [40, 50)  launch_gap
        [50, 60)  exposed_copy        an HtoD copy and no kernel
        [60, 75)  sync_stall          a DtoH readback ended at 60; cudaStreamSynchronize returns at 61
        [75, 90)  attention           flash kernel in L00/fwd
        [90, 100) launch_gap          the host range ends at 100 after the GPU ran dry
    """
    t = Trace()
    t.range("wb/step", 0, 100)
    t.range("wb/fwd", 0, 99)
    t.range("wb/L00/fwd", 2, 98)
    t.launch(3, "kernel", "sm90_xmma_gemm_bf16", 10, 30)
    t.launch(4, "kernel", "vectorized_elementwise_kernel", 25, 40, stream=8)
    t.launch(45, "memcpy", "HtoD", 50, 60, stream=9, nbytes=4 << 20)
    t.launch(58, "memcpy", "DtoH", 59, 60, nbytes=4)
    t.runtime("cudaStreamSynchronize", 47, 61)
    t.launch(70, "kernel", "flash_fwd_kernel", 75, 90)
    return t.events()


EXPECTED_ONE_STEP = {"gemm": 20.0, "norm_elementwise": 10.0, "attention": 15.0, "exposed_copy": 10.0,
                     "sync_stall": 15.0, "launch_gap": 30.0}
"""In us (the DtoH readback [59, 60) lies inside the HtoD copy's [50, 60): the copies' union is 10 us)."""


def offload_trace(c_us, g_us, steps=3, jitter_us=0.0, lead_us=0.0):
    """A sync_reload-like backward per step: for layer i = L-1 .. 0, reload (HtoD copy of c_i in wb/Lxx/reload) then
    the layer's recompute + backward kernels (g_i, in wb/Lxx/bwd). `jitter_us` * step is added to every c and g.
    `lead_us`: a kernel (the LM head's backward) still running for that long when the first reload is launched; the
    blocking copy starts after it (h = lead_us)."""
    t = Trace()
    L = len(c_us)
    now = 0.0
    for s in range(steps):
        j = jitter_us * s
        start = now
        t.range("wb/step", start, start + 1)  # extended below
        step_rows = len(t.rows) - 1
        now += 5
        if lead_us:
            t.launch(now - 2, "kernel", "sm90_xmma_gemm_bf16", now + 0.5, now + 1 + lead_us)
        for i in reversed(range(L)):
            lab = f"L{i:02d}"
            c, g = c_us[i] + j, g_us[i] + j
            if i == L - 1 and lead_us:
                t.range(f"wb/{lab}/reload", now, now + 2)
                t.launch(now + 0.5, "memcpy", "HtoD", now + 1 + lead_us, now + 1 + lead_us + c, stream=9,
                         nbytes=int(c * 1000))
                now += lead_us
                t.range(f"wb/{lab}/bwd", now, now + 3 + c + g)
                t.launch(now + 1.5, "kernel", "sm90_xmma_gemm_bf16", now + 1 + c, now + 1 + c + g)
                now += 3 + c + g
                continue
            t.range(f"wb/{lab}/bwd", now, now + 3 + c + g)
            t.range(f"wb/{lab}/reload", now, now + 2)
            t.launch(now + 0.5, "memcpy", "HtoD", now + 1, now + 1 + c, stream=9, nbytes=int(c * 1000))
            t.launch(now + 1.5, "kernel", "sm90_xmma_gemm_bf16", now + 1 + c, now + 1 + c + g)
            now += 3 + c + g
        t.rows[step_rows]["end_ns"] = int((now + 1) * US)
        now += 10
    return t.events()


def packing_trace(layers, passes=2, steps=3, idle_us=5.0, kernel_us=2.0, other_us=20.0):
    """Per step, L*p builds (`wb/Lxx/attn/meta`), each: its kernel (kernel_us, starting 0.5 us after the build) then a
    0.5 us readback, then the GPU idles idle_us until the next kernel (a GEMM of other_us launched after the build).
    The model's s per build is then idle_us + 0.5 (the launch latency before the build's kernel) + kernel_us."""
    t = Trace()
    now = 0.0
    for s in range(steps):
        start = now
        t.range("wb/step", start, start + 1)
        idx = len(t.rows) - 1
        now += 2
        for p in range(passes):
            for i in range(layers):
                lab = f"L{i:02d}"
                a = now
                t.range(f"wb/{lab}/attn/meta", a, a + kernel_us + 1.2)
                t.launch(a + 0.2, "kernel", "DeviceReduceKernel", a + 0.5, a + 0.5 + kernel_us)
                t.launch(a + 0.3, "memcpy", "DtoH", a + 0.5 + kernel_us, a + 1 + kernel_us, nbytes=8)
                t.runtime("cudaStreamSynchronize", a + 0.4, a + 1.1 + kernel_us)
                k = a + 1 + kernel_us + idle_us
                t.launch(k - 0.5, "kernel", "sm90_xmma_gemm_bf16", k, k + other_us)
                now = k + other_us
        t.rows[idx]["end_ns"] = int((now + 1) * US)
        now += 10
    return t.events()
