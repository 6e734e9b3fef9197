"""Offloaded gradient checkpointing: blocking reload (`sync_reload`) vs double-buffered prefetch (`double_buffer`).

    # T = packed tokens, H = hidden size, L = decoder layers; c = reload time, g = recompute + backward time

Arms (baseline first):
- `sync_reload`: every decoder layer runs without keeping activations; its input is copied to a pinned host
  buffer on a copy stream while the forward goes on. In backward, layer i's input is reloaded into the one GPU
  buffer when layer i's backward starts, after all queued compute, and compute waits for it: c + g per layer
  (Unsloth's single-buffer path, before unsloth-zoo #534).
- `double_buffer`: two GPU reload buffers. When layer i's backward starts, layer i-1's input is prefetched into
  the other buffer on the copy stream, so it loads while layer i recomputes and back-propagates: max(c, g) per
  layer. An event per buffer (recorded after the compute that last read it) orders its reuse; compute waits on
  the loaded event of its own buffer. No host sync in the steady state. Switches itself to one buffer, with a
  logged reason (kept in `Handle.info["fallbacks"]`), when free GPU memory is below `min_free_mib` plus the
  buffer, or when allocating the second buffer runs out of memory.
- `no_offload`: transformers' checkpointing with torch's non-reentrant checkpoint (the speed limit).
- `none`: no checkpointing (the memory reference).

Under `Trainer(gradient_checkpointing=True)` (TRL's default) the arm keeps its checkpointing: transformers' re-enable
at `train()` is taken over, said once (`_hold_checkpointing`).

The offload arms plug a checkpoint function into transformers (`_set_gradient_checkpointing(
gradient_checkpointing_func=...)`, via `workbench.step.harness.enable_checkpointing`). transformers 5.17 calls it as
`fn(partial(super().__call__, **kwargs), hidden_states)`, 5.23 as `fn(partial(forward, self, **kwargs),
hidden_states)`; the layer is found from the partial either way, and with 5.17's form the layer's module hooks are
moved outside the Function (`Offloader._hooks_outside`), as 5.23 has them: under FSDP2 the Function must see the
unsharded parameters the forward reads, or no LoRA gradient is computed. Each layer is one custom autograd Function
(like reentrant checkpointing, but the saved input lives on the host): its backward reloads the input,
recomputes the layer under `enable_grad` (CPU and device RNG states and autocast restored) and returns the
gradients of the input and of the layer's trainable parameters (LoRA), so they accumulate as usual. The layer's
trainable parameters are inputs of the Function, so a frozen base whose layer-0 input needs no grad works.

Host buffers come from a `HostPool` reused across steps: a buffer goes back to the pool once its reload is
queued on the copy stream (the next write to it, an offload, is queued on the same stream, so it cannot
overtake the read). `Handle.info` reports `pinned_bytes`, `pinned_buffers`, `pinned_allocs`, `device_buffer_bytes`,
`n_buffers` (`pinned_bytes` is the capacity asked for; torch's host caching allocator may round each buffer up to a
power of two). On CPU the same code runs without streams or events (host buffers are not page-locked there), so
the tests cover the bookkeeping and the gradients.

Ranges: `wb/Lxx/offload` (queueing the device-to-host copy), `wb/Lxx/reload` (queueing the host-to-device
copy), `wb/Lxx/recompute` (emitted here unless the layers are instrumented, whose own wrapper emits it).
With `timing=True` every reload and every recompute+backward is bracketed by timing events (copy stream and
compute stream); `layer_times_ms(handle)` reads them (one synchronize) for the savings model.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import time
import weakref

import torch

from workbench.errors import WorkbenchError
from workbench.step.harness import disable_checkpointing, enable_checkpointing
from workbench.instrument.ranges import find_decoder_layers, layer_label, span
from workbench.opts import Handle

SPEC = {"order": 2, "apply_order": 3, "savings": "workbench.opts.offload_savings",
        "help": "sync_reload (baseline), double_buffer (optimized), no_offload (limit), none (memory ref.)",
        "cpu": {"model": "tiny-qwen3"}, "gpu": {"model": "llama-3.1-8b", "layers": 8}, "all_variants": ()}
"""What the CLIs say of this optimization (`workbench.opts.registry`): arms help, default shapes."""

ARMS = ("sync_reload", "double_buffer", "no_offload", "none")
BASELINE = "sync_reload"
OPTIMIZED = "double_buffer"
TRANSFORMERS_DEFAULT = "no_offload"
"""Trainer(gradient_checkpointing=True): torch's checkpoint, nothing offloaded."""
REFERENCE_ARMS = ("none",)
"""No checkpointing: the memory reference, never recommended as a speed lever."""
SLOWER_THAN_DEFAULT = {
    "sync_reload": "offloading frees activation memory at a cost in step time: llama-3.1-8b 8 L 16k, 1414 ms a step "
                   "against no_offload's 1380 on an H100 (profiles/2026-11-23_h100_verdicts/ab_traced)",
    "double_buffer": "offloading frees activation memory at a cost in step time: llama-3.1-8b 8 L 16k, 1397 ms a step "
                     "against no_offload's 1380 on an H100 (profiles/2026-11-23_h100_verdicts/ab_traced)"}
"""Arms measured slower than TRANSFORMERS_DEFAULT: `apply_optimizations` warns once when one is asked for."""

log = logging.getLogger(__name__)

_ALIGN_BYTES = 1 << 16
"""Host and device buffers are rounded up to 64 KiB, so small shape changes reuse a buffer."""


def _round_up(n: int, to: int = _ALIGN_BYTES) -> int:
    return max(to, -(-n // to) * to)


def _as_view(raw_u8: torch.Tensor, dtype: torch.dtype, shape) -> torch.Tensor:
    """A `dtype` tensor of `shape` at the start of a raw uint8 buffer."""
    n = 1
    for s in shape:
        n *= s
    nbytes = n * torch.empty((), dtype=dtype).element_size()
    return raw_u8[:nbytes].view(dtype).view(shape)


# --- host buffers ---------------------------------------------------------------------------------------------

class _Lease:
    __slots__ = ("pool", "buf", "released")

    def __init__(self, pool: "HostPool", buf: torch.Tensor):
        self.pool, self.buf, self.released = pool, buf, False

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.pool._free.append(self.buf)


class HostPool:
    """Host (pinned on CUDA) byte buffers, leased per offloaded layer input and reused across steps.

    A request takes the smallest free buffer that fits; when none fits, a free buffer that is too small is
    dropped and a larger one allocated in its place, so the pool holds at most as many buffers as inputs are
    offloaded at once, each as large as the largest input seen: no growth step after step.
    """

    def __init__(self, pin: bool):
        self.pin = bool(pin)
        self._free: list[torch.Tensor] = []
        self.bytes = 0
        self.buffers = 0
        self.allocs = 0
        """Host allocations made so far (each page-locking call is slow: it should stop growing after step 1)."""

    def lease(self, nbytes: int) -> _Lease:
        best = None
        for j, b in enumerate(self._free):
            if b.numel() >= nbytes and (best is None or b.numel() < self._free[best].numel()):
                best = j
        if best is not None:
            return _Lease(self, self._free.pop(best))
        if self._free:  # replace the largest too-small free buffer instead of adding one
            j = max(range(len(self._free)), key=lambda k: self._free[k].numel())
            old = self._free.pop(j)
            self.bytes -= old.numel()
            self.buffers -= 1
        cap = _round_up(nbytes)
        buf = torch.empty(cap, dtype=torch.uint8, pin_memory=self.pin)
        self.bytes += cap
        self.buffers += 1
        self.allocs += 1
        return _Lease(self, buf)

    def stats(self) -> dict:
        return {"pinned_bytes": self.bytes, "pinned_buffers": self.buffers, "pinned_allocs": self.allocs,
                "pinned": self.pin}


# --- device reload buffers ------------------------------------------------------------------------------------

def _free_device_bytes(device: torch.device) -> int | None:
    """Free device memory, counting what the caching allocator holds unused (None on CPU: not checked)."""
    if device.type != "cuda":
        return None
    free, _ = torch.cuda.mem_get_info(device)
    return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)


def _alloc_device(nbytes: int, device: torch.device) -> torch.Tensor:
    return torch.empty(nbytes, dtype=torch.uint8, device=device)


class _DeviceBuffer:
    __slots__ = ("raw", "free_event")

    def __init__(self):
        self.raw: torch.Tensor | None = None
        self.free_event = None
        """Recorded on the compute stream after the last compute that read this buffer was queued."""


class _Entry:
    """One offloaded layer input of one forward pass."""

    __slots__ = ("layer", "label", "lease", "host", "shape", "dtype", "device", "prev", "dev", "buf_index",
                 "loaded", "consumed", "t", "__weakref__")

    def __init__(self, layer, label, lease, host, x, prev):
        self.layer, self.label, self.lease, self.host = layer, label, lease, host
        self.shape, self.dtype, self.device = tuple(x.shape), x.dtype, x.device
        self.prev = prev
        """The entry offloaded just before this one in the same forward (the layer below), or None."""
        self.dev = None
        self.buf_index = None
        self.loaded = None
        self.consumed = False
        self.t: dict = {}


# --- the checkpoint function ----------------------------------------------------------------------------------

def _layer_of(fn) -> torch.nn.Module | None:
    """The decoder layer a transformers checkpoint partial calls (5.23: partial(forward, self, **kw);
    5.17: partial(super().__call__, **kw), a bound method)."""
    if isinstance(fn, functools.partial):
        if fn.args and isinstance(fn.args[0], torch.nn.Module):
            return fn.args[0]
        owner = getattr(fn.func, "__self__", None)
        if isinstance(owner, torch.nn.Module):
            return owner
    return None


def _runs_module_hooks(fn) -> bool:
    """True for transformers < 5.23's checkpoint partial, `partial(nn.Module.__call__ bound to the layer, **kw)`: the
    layer's module hooks (FSDP2's unshard / reshard among them) run inside the checkpointed call."""
    return isinstance(fn, functools.partial) and getattr(fn.func, "__func__", None) is torch.nn.Module.__call__


def _kw_grad_tensors(fn) -> list[tuple[str, int | None, torch.Tensor]]:
    """Tensors bound in the partial's keywords (top level or in a tuple/list) that require grad."""
    out = []
    if not isinstance(fn, functools.partial):
        return out
    for k, v in fn.keywords.items():
        if isinstance(v, torch.Tensor) and v.requires_grad:
            out.append((k, None, v))
        elif isinstance(v, (tuple, list)):
            out.extend((k, j, t) for j, t in enumerate(v) if isinstance(t, torch.Tensor) and t.requires_grad)
    return out


def _with_keywords(fn, kw_grad, replacements):
    """`fn` with the grad-requiring keyword tensors replaced (detached leaves for the recompute)."""
    if not kw_grad:
        return fn
    kw = dict(fn.keywords)
    for (k, j, _), r in zip(kw_grad, replacements):
        if j is None:
            kw[k] = r
        else:
            seq = list(kw[k])
            seq[j] = r
            kw[k] = type(kw[k])(seq) if isinstance(kw[k], tuple) else seq
    return functools.partial(fn.func, *fn.args, **kw)


def _flatten(out):
    """(tensors, rebuild): the tensors of a layer output (a tensor or a tuple/list) and how to rebuild it."""
    if isinstance(out, torch.Tensor):
        return [out], lambda ts: ts[0]
    if isinstance(out, (tuple, list)):
        idx = [j for j, o in enumerate(out) if isinstance(o, torch.Tensor)]
        kind, items = type(out), list(out)

        def rebuild(ts):
            new = list(items)
            for j, t in zip(idx, ts):
                new[j] = t
            return tuple(new) if kind is tuple else kind(new)

        return [out[j] for j in idx], rebuild
    raise WorkbenchError(f"offload: a decoder layer returned {type(out).__name__}; expected a tensor or a tuple")


class _Call:
    """One layer call: the bound forward, what it is differentiated with respect to, how to rebuild its output."""
    __slots__ = ("fn", "kw_grad", "params", "n_params", "entry_label", "rebuild", "layer_index")

    def __init__(self, fn, kw_grad, params, label, layer_index):
        self.fn, self.kw_grad, self.params, self.n_params = fn, kw_grad, params, len(params)
        self.entry_label, self.layer_index = label, layer_index
        self.rebuild = None


class _OffloadedLayer(torch.autograd.Function):
    """One checkpointed layer whose input is kept on the host; backward reloads, recomputes, back-propagates."""

    @staticmethod
    def forward(ctx, ctl: "Offloader", call: _Call, x: torch.Tensor, *extra: torch.Tensor):
        ctx.ctl, ctx.call = ctl, call
        ctx.rng = ctl.stash_rng(x)
        ctx.autocast = ctl.autocast_state(x)
        # queue the copy to the host first, so that it overlaps this layer's own compute
        ctx.entry = ctl.offload(call, x)
        out = call.fn(x)  # grad is off inside Function.forward: no activations kept
        tensors, call.rebuild = _flatten(out)
        nondiff = [t for t in tensors if not (t.is_floating_point() or t.is_complex())]
        if nondiff:
            ctx.mark_non_differentiable(*nondiff)
        ctx.set_materialize_grads(False)
        return tuple(tensors)

    @staticmethod
    def backward(ctx, *grads):
        ctl, call, entry = ctx.ctl, ctx.call, ctx.entry
        n_kw = len(call.kw_grad)
        if all(g is None for g in grads):
            ctl.skip(entry)
            return (None, None, None) + (None,) * (n_kw + call.n_params)
        x_dev = ctl.begin_backward(entry)
        need_x = ctx.needs_input_grad[2]
        x = x_dev.detach().requires_grad_(need_x)
        kw_leaves = [t.detach().requires_grad_(True) for (_, _, t) in call.kw_grad]
        fn = _with_keywords(call.fn, call.kw_grad, kw_leaves)
        with ctl.restore_rng(ctx.rng, x), ctl.autocast_ctx(ctx.autocast, x), torch.enable_grad():
            with ctl.recompute_span(call):
                out = fn(x)
            outs, _ = _flatten(out)
            pairs = [(o, g) for o, g in zip(outs, grads) if g is not None and o.requires_grad]
            wrt = ([x] if need_x else []) + kw_leaves + call.params
            got = torch.autograd.grad([o for o, _ in pairs], wrt, [g for _, g in pairs], allow_unused=True) \
                if pairs and wrt else [None] * len(wrt)
        ctl.end_backward(entry)
        got = list(got)
        dx = got.pop(0) if need_x else None
        return (None, None, dx) + tuple(got)


class Offloader:
    """The checkpoint function of the offload arms, and the state it keeps across layers and steps.

    `Offloader(layers, n_buffers=2)(partial_forward, hidden_states)` is what transformers calls for each
    decoder layer. `n_buffers=1` is the blocking reload; 2 prefetches layer i-1 during layer i's backward.
    """

    def __init__(self, layers, *, n_buffers: int, device: torch.device, host_pool: HostPool | None = None,
                 min_free_mib: float = 512.0, timing: bool = False, preserve_rng_state: bool = True,
                 info: dict | None = None):
        if n_buffers not in (1, 2):
            raise WorkbenchError(f"offload: n_buffers must be 1 or 2, got {n_buffers}")
        self.layers = list(layers)
        self.index = {id(m): i for i, m in enumerate(self.layers)}
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.pool = host_pool or HostPool(pin=self.cuda)
        self.n_buffers = n_buffers
        self.min_free_bytes = int(min_free_mib * 2**20)
        self.timing = timing
        self.preserve_rng_state = preserve_rng_state
        self.info = info if info is not None else {}
        self.info.setdefault("fallbacks", [])
        self.copy_stream = torch.cuda.Stream(self.device) if self.cuda else None
        self.bufs = [_DeviceBuffer() for _ in range(2)]
        self._next_buf = 0
        self._last_entry = None  # weakref to the entry offloaded last (the forward chain)
        self.timings: list[dict] = []
        self._update_info()

    # -- transformers' checkpoint function ------------------------------------------------------------------
    def __call__(self, fn, hidden_states, *args):
        if args:
            raise WorkbenchError("offload: the checkpointed layer got more than one positional argument; "
                                 "transformers passes only hidden_states positionally")
        if not torch.is_grad_enabled():
            return fn(hidden_states)
        layer = _layer_of(fn)
        if layer is None:
            raise WorkbenchError("offload: cannot find the decoder layer in the checkpointed function "
                                 f"({fn!r}); expected transformers' partial(forward, self, ...) or "
                                 "partial(layer.__call__, ...)")
        if _runs_module_hooks(fn):
            return self._hooks_outside(fn, layer, hidden_states)
        i = self.index.get(id(layer))
        label = getattr(layer, "_wb_label", None) or (layer_label(i) if i is not None else "Lxx")
        kw_grad = _kw_grad_tensors(fn)
        params = [p for p in layer.parameters() if p.requires_grad]
        if not (hidden_states.requires_grad or kw_grad or params):
            return fn(hidden_states)  # nothing to back-propagate into: plain no-grad-free forward
        call = _Call(fn, kw_grad, params, label, i)
        outs = _OffloadedLayer.apply(self, call, hidden_states, *[t for (_, _, t) in kw_grad], *params)
        out = call.rebuild(list(outs))
        call.rebuild = None
        if getattr(layer, "_wb_label", None) is not None and outs and outs[0].requires_grad:
            # instrumented layers open wb/Lxx/bwd from a hook on their output; inside this Function their forward
            # ran without grad, so the hook goes on the Function's output instead
            from workbench.instrument import ranges as _ranges
            hook = getattr(_ranges, "_bwd_hook", None)  # ranges.py's private helper: skip it if it goes away
            if hook is not None:
                outs[0].register_hook(hook(label))
        return out

    def _hooks_outside(self, fn, layer, hidden_states):
        """transformers < 5.23 hands over `partial(layer.__call__)`: the layer's module hooks would run inside the
        Function. Under FSDP2 that loses every LoRA gradient: the parameters read here are the sharded DTensors
        (FSDP2's pre-forward hook has not unsharded them yet), the recompute differentiates the unsharded ones FSDP2
        swaps in, and `autograd.grad` with respect to the sharded ones returns None (the 2-rank `all` and
        offload runs computed no LoRA gradient and no expert weight gradient). Run the hooks outside, as transformers
        >= 5.23 does: the call goes through `nn.Module.__call__` (hooks) and its forward, replaced for this one call,
        checkpoints `partial(forward, **kw)` (no hooks), with the parameters the forward reads."""
        inner, own = layer.forward, vars(layer).get("forward")

        def forward(x, *args, **kw):
            if args:
                raise WorkbenchError("offload: the checkpointed layer got more than one positional argument; "
                                     "transformers passes only hidden_states positionally")
            return self(functools.partial(inner, **kw), x)

        layer.forward = forward
        try:
            return fn(hidden_states)
        finally:
            if own is not None:
                layer.forward = own
            else:
                vars(layer).pop("forward", None)

    # -- forward: offload --------------------------------------------------------------------------------------
    def offload(self, call: _Call, x: torch.Tensor) -> _Entry:
        nbytes = x.numel() * x.element_size()
        lease = self.pool.lease(nbytes)
        host = _as_view(lease.buf, x.dtype, x.shape)
        with span(f"wb/{call.entry_label}/offload"):
            if self.cuda:
                compute = torch.cuda.current_stream(x.device)
                self.copy_stream.wait_stream(compute)  # x is ready once the compute queued so far is done
                with torch.cuda.stream(self.copy_stream):
                    host.copy_(x, non_blocking=True)
                # the caching allocator reuses x's memory only after the copy stream has passed this copy
                x.record_stream(self.copy_stream)
            else:
                host.copy_(x)
        prev = self._last_entry() if self._last_entry is not None else None
        if prev is not None and not (prev.layer is not None and call.layer_index is not None
                                     and prev.layer < call.layer_index and not prev.consumed):
            prev = None  # a new forward pass started: this is the first layer of its chain
        entry = _Entry(call.layer_index, call.entry_label, lease, host, x, prev)
        weakref.finalize(entry, lease.release)  # a graph dropped without backward returns its buffers too
        self._last_entry = weakref.ref(entry)
        self._update_info()
        return entry

    # -- backward: reload, prefetch, compute -------------------------------------------------------------------
    def _device_buffer(self, b: int, nbytes: int) -> _DeviceBuffer:
        buf = self.bufs[b]
        if buf.raw is None or buf.raw.numel() < nbytes:
            cap = _round_up(nbytes)
            buf.raw = None  # the old one goes back to the allocator (stream-ordered; copy-stream use recorded)
            buf.raw = _alloc_device(cap, self.device)
            if self.cuda:
                buf.raw.record_stream(self.copy_stream)
                # fresh memory may still be read by compute queued before its allocation (the caching allocator
                # orders reuse on the compute stream only): the first copy into it waits for that compute
                buf.free_event = torch.cuda.Event()
                buf.free_event.record(torch.cuda.current_stream(self.device))
            self._update_info()
        return buf

    def _fallback(self, reason: str) -> None:
        self.n_buffers = 1
        self.bufs[1] = _DeviceBuffer()
        msg = f"double buffering off, one reload buffer from now on: {reason}"
        log.warning("offload: %s", msg)
        self.info["fallbacks"].append(msg)
        self._update_info()

    def _second_buffer_ok(self, nbytes: int) -> bool:
        """Whether buffer 1 can be (re)allocated for nbytes; switches to one buffer (logged) when not."""
        buf = self.bufs[1]
        if buf.raw is not None and buf.raw.numel() >= nbytes:
            return True
        cap = _round_up(nbytes)
        free = _free_device_bytes(self.device)
        if free is not None and free - cap < self.min_free_bytes:
            self._fallback(f"free GPU memory {free / 2**20:.0f} MiB < reload buffer {cap / 2**20:.0f} MiB "
                           f"+ threshold {self.min_free_bytes / 2**20:.0f} MiB")
            return False
        try:
            self._device_buffer(1, nbytes)
        except torch.OutOfMemoryError as e:
            self._fallback(f"out of memory allocating the second reload buffer ({cap / 2**20:.0f} MiB): "
                           f"{str(e).splitlines()[0]}")
            return False
        return True

    def _issue_reload(self, entry: _Entry, prefetch: bool) -> bool:
        """Queue entry's host-to-device copy into the next buffer; False when it cannot be prefetched now."""
        if entry.dev is not None:
            return True
        if entry.lease.released:
            raise WorkbenchError(f"offload: layer {entry.label}'s input was already reloaded and released "
                                 "(backward through the same graph twice is not supported)")
        with span(f"wb/{entry.label}/reload"):
            return self._queue_reload(entry, prefetch)

    def _queue_reload(self, entry: _Entry, prefetch: bool) -> bool:
        nbytes = _nbytes(entry)
        b = self._next_buf % self.n_buffers
        if b == 1 and not self._second_buffer_ok(nbytes):
            if prefetch:
                return False
            b = 0
        buf = self._device_buffer(b, nbytes)
        dev = _as_view(buf.raw, entry.dtype, entry.shape)
        if self.cuda:
            cs = self.copy_stream
            if self.n_buffers == 1:  # the blocking baseline: the reload waits for all queued compute
                cs.wait_stream(torch.cuda.current_stream(self.device))
            elif buf.free_event is not None:  # only for the compute that last read this buffer
                cs.wait_event(buf.free_event)
            if self.timing:
                entry.t["c0"] = _event(cs)
            with torch.cuda.stream(cs):
                dev.copy_(entry.host, non_blocking=True)
            if self.timing:
                entry.t["c1"] = _event(cs)
            entry.loaded = torch.cuda.Event()
            entry.loaded.record(cs)
        else:
            t0 = time.perf_counter()
            dev.copy_(entry.host)
            if self.timing:
                entry.t["c_ms"] = (time.perf_counter() - t0) * 1e3
        entry.dev, entry.buf_index = dev, b
        self._next_buf = b + 1
        # the host buffer may go back to the pool: its next write (an offload) is queued on the same copy stream
        entry.lease.release()
        return True

    def begin_backward(self, entry: _Entry) -> torch.Tensor:
        """Layer i's backward starts: its input is (re)loaded, layer i-1's prefetched; compute waits for i's."""
        self._issue_reload(entry, prefetch=False)
        prev = entry.prev
        if self.n_buffers == 2 and prev is not None and not prev.consumed:
            self._issue_reload(prev, prefetch=True)
        if self.cuda:
            compute = torch.cuda.current_stream(self.device)
            compute.wait_event(entry.loaded)
            if self.timing:
                entry.t["g0"] = _event(compute)
        elif self.timing:
            entry.t["g0"] = time.perf_counter()
        return entry.dev

    def end_backward(self, entry: _Entry) -> None:
        """Layer i's recompute and backward are queued: its buffer is free once the compute stream passes here."""
        entry.consumed = True
        buf = self.bufs[entry.buf_index] if entry.buf_index < len(self.bufs) else None
        if self.cuda:
            compute = torch.cuda.current_stream(self.device)
            if self.timing:
                entry.t["g1"] = _event(compute)
            ev = torch.cuda.Event()
            ev.record(compute)
            if buf is not None:
                buf.free_event = ev
        elif self.timing:
            entry.t["g_ms"] = (time.perf_counter() - entry.t["g0"]) * 1e3
        if self.timing:
            self.timings.append({"layer": entry.layer, "label": entry.label, **entry.t})
        entry.dev = None
        entry.host = None

    def skip(self, entry: _Entry) -> None:
        """No gradient reached this layer: nothing to reload."""
        entry.consumed = True
        entry.lease.release()

    # -- RNG and autocast, as torch.utils.checkpoint keeps them -------------------------------------------------
    def stash_rng(self, x: torch.Tensor):
        if not self.preserve_rng_state:
            return None
        from torch.utils.checkpoint import get_device_states
        return torch.get_rng_state(), (get_device_states(x) if self.cuda else None)

    @contextlib.contextmanager
    def restore_rng(self, rng, x: torch.Tensor):
        if rng is None:
            yield
            return
        from torch.utils.checkpoint import set_device_states
        cpu_state, dev = rng
        devices = dev[0] if dev is not None else []
        with torch.random.fork_rng(devices=devices, enabled=True, device_type=self.device.type):
            torch.set_rng_state(cpu_state)
            if dev is not None:
                set_device_states(*dev, device_type=self.device.type)
            yield

    @staticmethod
    def autocast_state(x: torch.Tensor):
        dt = x.device.type
        if not torch.is_autocast_enabled(dt):
            return None
        return dt, torch.get_autocast_dtype(dt), torch.is_autocast_cache_enabled()

    @staticmethod
    def autocast_ctx(state, x):
        if state is None:
            return contextlib.nullcontext()
        dt, dtype, cache = state
        return torch.autocast(dt, dtype=dtype, cache_enabled=cache)

    @staticmethod
    def recompute_span(call: _Call):
        # instrumented layers emit wb/Lxx/recompute from their own forward wrapper
        if call.layer_index is not None and call.entry_label and _is_instrumented(call.fn):
            return contextlib.nullcontext()
        return span(f"wb/{call.entry_label}/recompute")

    # -- reporting ---------------------------------------------------------------------------------------------
    def _update_info(self) -> None:
        self.info.update(self.pool.stats())
        self.info["n_buffers"] = self.n_buffers
        self.info["device_buffer_bytes"] = sum(b.raw.numel() for b in self.bufs if b.raw is not None)

    def layer_times_ms(self) -> list[dict]:
        """Per-layer reload (`reload_ms`, c) and recompute+backward (`compute_ms`, g) times of the backward
        passes since the last call (needs `timing=True`); synchronizes once on CUDA."""
        rows, self.timings = self.timings, []
        if self.cuda and rows:
            torch.cuda.synchronize(self.device)
        out = []
        for r in rows:
            if self.cuda:
                c = r["c0"].elapsed_time(r["c1"]) if "c0" in r else float("nan")
                g = r["g0"].elapsed_time(r["g1"]) if "g0" in r else float("nan")
            else:
                c, g = r.get("c_ms", float("nan")), r.get("g_ms", float("nan"))
            out.append({"layer": r["layer"], "label": r["label"], "reload_ms": c, "compute_ms": g})
        return out


def _nbytes(entry: _Entry) -> int:
    n = 1
    for s in entry.shape:
        n *= s
    return n * torch.empty((), dtype=entry.dtype).element_size()


def _event(stream) -> "torch.cuda.Event":
    ev = torch.cuda.Event(enable_timing=True)
    ev.record(stream)
    return ev


def _is_instrumented(fn) -> bool:
    layer = _layer_of(fn)
    return layer is not None and getattr(layer, "_wb_label", None) is not None


# --- the opt module contract ----------------------------------------------------------------------------------

def unsupported(arm: str, model, device) -> str | None:
    """Why this device/model cannot run `arm` (None: it can)."""
    device = torch.device(device)
    if arm in ("sync_reload", "double_buffer") and device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        if getattr(props, "is_integrated", False):
            return "unified-memory GPU: host and device memory are the same, offloading saves nothing"
    return None


def _checkpoint_state(model):
    from workbench.step.models import base_model_of
    base = base_model_of(model)
    missing = object()
    saved = [(m, m.__dict__.get("gradient_checkpointing", missing), m.__dict__.get("_gradient_checkpointing_func",
                                                                                    missing))
             for m in base.modules() if hasattr(m, "gradient_checkpointing")]

    def restore():
        for m, flag, fn in saved:
            for name, v in (("gradient_checkpointing", flag), ("_gradient_checkpointing_func", fn)):
                if v is missing:
                    m.__dict__.pop(name, None)
                else:
                    setattr(m, name, v)

    return restore


def _hold_checkpointing(model, arm: str, fn, info: dict):
    """Keep `arm`'s checkpointing when transformers re-enables its own: `Trainer.train()` with
    `gradient_checkpointing=True` (TRL's `SFTConfig` default) calls the model's `activation_checkpointing_enable`
    (`gradient_checkpointing_enable`), which installs torch's checkpoint through `_set_gradient_checkpointing` over
    the arm's function. The model's `_set_gradient_checkpointing` is wrapped (an instance attribute; the returned
    callable removes it): an enable installs `fn` instead (`none`: keeps checkpointing off), said once in a log
    line and counted in `info["checkpointing_taken_over"]`; a disable passes through (the user turned it off)."""
    from workbench.step.models import base_model_of
    base = base_model_of(model)
    original = base._set_gradient_checkpointing

    @functools.wraps(original)
    def set_gradient_checkpointing(enable: bool = True, gradient_checkpointing_func=None, every_n_layers: int = 1):
        if not enable:
            return original(enable=False)
        if gradient_checkpointing_func is not fn:
            if not info.get("checkpointing_taken_over"):
                log.warning(f"offload={arm!r}: transformers enabled gradient checkpointing with its own function "
                            f"(Trainer's gradient_checkpointing=True); the {arm!r} arm's checkpointing stays "
                            + ("off" if fn is None else "installed, every layer") + " (its checkpoint kwargs are not "
                            "used)")
            info["checkpointing_taken_over"] = info.get("checkpointing_taken_over", 0) + 1
        if fn is None:
            return original(enable=False)
        return original(enable=True, gradient_checkpointing_func=fn)

    base._set_gradient_checkpointing = set_gradient_checkpointing
    return lambda: base.__dict__.pop("_set_gradient_checkpointing", None)


def apply(model, arm: str, *, min_free_mib: float = 512.0, timing: bool = False, host_pool: HostPool | None = None,
          preserve_rng_state: bool = True) -> Handle:
    """Set the model's checkpointing for `arm`; `handle.revert()` restores what was there before.

    min_free_mib: `double_buffer` uses one buffer when free GPU memory would fall below this after allocating
    the second. timing: bracket reloads and recomputes with timing events (read by `layer_times_ms(handle)`;
    for a separate measuring pass, not for timed runs). host_pool: share pinned buffers between applications
    (a benchmark applying arms repeatedly pins once). `handle.offloader` is the `Offloader` (offload arms).
    """
    if arm not in ARMS:
        raise WorkbenchError(f"unknown arm {arm!r} for --opt offload; arms: {', '.join(ARMS)}")
    handle = Handle(opt="offload", arm=arm)
    handle.undo.append(_checkpoint_state(model))
    handle.offloader = None
    if arm == "none":
        fn = None
        disable_checkpointing(model)
    elif arm == "no_offload":
        from torch.utils.checkpoint import checkpoint
        fn = functools.partial(checkpoint, use_reentrant=False)
        enable_checkpointing(model, fn)
    else:
        device = next(model.parameters()).device
        fn = Offloader(find_decoder_layers(model), n_buffers=2 if arm == "double_buffer" else 1, device=device,
                       host_pool=host_pool, min_free_mib=min_free_mib, timing=timing,
                       preserve_rng_state=preserve_rng_state, info=handle.info)
        enable_checkpointing(model, fn)
        handle.offloader = fn
    handle.undo.append(_hold_checkpointing(model, arm, fn, handle.info))
    return handle


def layer_times_ms(handle: Handle) -> list[dict]:
    """Per-layer c (`reload_ms`) and g (`compute_ms`) recorded by an offload arm applied with `timing=True`."""
    ctl = getattr(handle, "offloader", None)
    if ctl is None:
        raise WorkbenchError(f"offload arm {handle.arm!r} keeps no per-layer times (only the offload arms do)")
    return ctl.layer_times_ms()


def comparison_options(cmp, device, state: dict) -> dict:
    """This optimization's apply / unsupported keyword arguments for one comparison: one pinned host pool per
    comparison (pinned once, not once per repetition), kept in the comparison's `state`."""
    if "host_pool" not in state:
        state["host_pool"] = HostPool(pin=torch.device(device).type == "cuda")
    return {"host_pool": state["host_pool"]}
