"""Activation memory as a lever: what each decoder layer keeps for its backward, and what that costs.

    # T = packed tokens, L = decoder layers, h = hidden size, r = LoRA rank

Arms (baseline first; every arm computes the same function: the same loss and gradients, bitwise where the kernels
are the same, `tests/test_activations.py`):
- `full` (baseline): non-reentrant checkpointing of every decoder layer (transformers' hook,
  `harness.enable_checkpointing`): each layer keeps its input (T x h) and runs its forward again in the backward.
- `selective`: torch's selective activation checkpointing (`torch.utils.checkpoint.create_selective_checkpoint_contexts`)
  with `POLICY`: the outputs of the layer's GEMMs (aten mm / addmm / bmm, the base projections q, k, v, o, gate, up,
  down) and of its attention kernel (sdpa's flash / efficient / cudnn / CPU ops, flex) are saved in the forward; the
  recompute in the backward runs only the pointwise work (norms, rotary, SiLU, products, residual adds, casts) and the
  LoRA factors' thin GEMMs (an inner or output dimension at most the LoRA rank: 2 T h r FLOPs each, against the
  base GEMM's 2 T h^2). Under regional compile inductor's own partitioner recomputes the pointwise work inside the
  compiled layer, and SAC's dispatch mode would make that layer run eagerly: the two do not run together
  (`path_conflict`).
- `offload`: no checkpointing; every tensor a decoder layer saves for its backward (at least `min_bytes`, not a
  parameter's storage) is copied to pinned host memory on a copy stream as the forward goes
  (`torch.autograd.graph.saved_tensors_hooks`), and reloaded double-buffered: when the backward first touches layer
  i's tensors, layer i-1's are queued for reload on the copy stream, so they load while layer i back-propagates;
  compute waits on an event of its own layer only. The device holds two layers' saved tensors at a time, the host
  L layers'. On a CPU the same hooks copy to (unpinned) host tensors and back: the same function, the bookkeeping
  tested.
- `none`: no checkpointing: every layer keeps all its saved tensors (the speed limit of the family).

Which arm is fastest is predicted, in this order: none, selective (recomputes the pointwise work only), offload (no
recompute; its copies overlap compute while the copy stream keeps up), full (the whole forward again). Which fits is
`workbench.step.memory_estimate.estimate(..., activations=arm)` against the device with FIT_MARGIN; `lever_arms` takes
the fastest that fits (`--opt levers`), and `workbench.ab.preflight` refuses an arm that cannot fit before anything
runs. The prediction of the saving is the traced baseline's recompute time (`workbench.traces.lever_advice`: the busy time
of the layers' `recompute` pass) x SAVED_FRACTION.

Use: `workbench.apply_optimizations(model, activations="selective")`; under `Trainer(gradient_checkpointing=True)` the
arm stays on (the model's `gradient_checkpointing_enable` keeps the arm's checkpoint function); `none` and `offload`
refuse that flag in one line (it would switch checkpointing back on).
"""
from __future__ import annotations

import functools

import torch

from workbench.errors import WorkbenchError
from workbench.opts import Handle

SPEC = {"order": 16, "apply_order": 4, "lever": "recompute", "in_all": False,
        "help": "full (baseline: checkpoint every decoder layer, recompute its forward), selective (torch's selective "
                "activation checkpointing: GEMM and attention outputs saved, pointwise work recomputed), offload (no "
                "recompute: saved activations to pinned host memory, double-buffered reload), none (keep every "
                "activation); --opt levers takes the fastest that fits the device",
        "cpu": {"model": "tiny-llama"}, "gpu": {"model": "llama-3.1-8b", "layers": 8, "tokens": 8192},
        "all_variants": ()}
"""What the CLIs say of this optimization (`workbench.opts.registry`); a lever (`lever`), not part of `--opt all`."""

ARMS = ("full", "selective", "offload", "none")
BASELINE = "full"
OPTIMIZED = "none"
SPEED_ORDER = ("none", "selective", "offload", "full")
"""The arms from the predicted fastest to the slowest (the module's doc says why), fixed before any run."""
SAVED_FRACTION = 1.0
"""Share of the traced baseline's recompute time the OPTIMIZED arm (`none`) removes: all of it."""
FIT_MARGIN = 0.90
"""An arm fits when its memory estimate is at most this share of the device's memory: the rest for the allocator's
fragmentation, temporaries and the equivalence phase's captured gradients."""
HOST_FIT_MARGIN = 0.5
"""The offload arm fits the host when its pinned bytes are at most this share of the host's RAM: the rest for the
process itself (the model's host copies, the runner's snapshots, the data) and the page cache; pinned pages cannot be
swapped, and a host out of memory kills the run instead of refusing it."""
PATH_LAST = True
"""The levers' path switches this lever on last: which arm fits depends on the levers before it (a compiled layer
saves fewer tensors), so its arm is chosen for the point where every other lever is on."""


# --- the selective policy --------------------------------------------------------------------------------------

def _attention_ops() -> set:
    aten, out = torch.ops.aten, set()
    for name in ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                 "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu",
                 "_flash_attention_forward", "_efficient_attention_forward"):
        op = getattr(aten, name, None)
        if op is not None:
            out.add(op.default)
    flex = getattr(torch.ops.higher_order, "flex_attention", None)
    if flex is not None:
        out.add(flex)
    return out


class Policy:
    """The selective arm's policy (a `torch.utils.checkpoint` policy_fn): MUST_SAVE the output of a GEMM whose inner
    and output dimensions both exceed `rank` (a base projection) and of an attention kernel; PREFER_RECOMPUTE every
    other op (pointwise work, casts, the LoRA factors' thin GEMMs). Counts what it saves in the forward
    (`saved_gemms`: GEMM calls; `saved_bytes`: the bytes of their outputs), so a test can see that the policy ran."""

    def __init__(self, rank: int):
        self.rank = int(rank)
        aten = torch.ops.aten
        self.gemms = {aten.mm.default, aten.addmm.default, aten.bmm.default}
        self.attention = _attention_ops()
        self.saved_gemms = 0
        self.saved_bytes = 0

    def _thin(self, func, args) -> bool:
        a, b = (args[1], args[2]) if func is torch.ops.aten.addmm.default else (args[0], args[1])
        return min(a.shape[-1], b.shape[-1]) <= self.rank

    def __call__(self, ctx, func, *args, **kwargs):
        from torch.utils.checkpoint import CheckpointPolicy

        if func in self.gemms:
            if self._thin(func, args):
                return CheckpointPolicy.PREFER_RECOMPUTE
            if not ctx.is_recompute:
                self.saved_gemms += 1
                a, b = (args[1], args[2]) if func is torch.ops.aten.addmm.default else (args[0], args[1])
                out_dtype = torch.get_autocast_dtype(a.device.type) if torch.is_autocast_enabled(a.device.type) \
                    else a.dtype
                self.saved_bytes += a.numel() // a.shape[-1] * b.shape[-1] * torch.empty((), dtype=out_dtype).element_size()
            return CheckpointPolicy.MUST_SAVE
        if func in self.attention:
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE


def lora_rank_of(model) -> int:
    """The largest LoRA rank of the model's adapters (16 when none is found: no thin GEMM then)."""
    ranks = [m.r[k] for m in model.modules() if isinstance(getattr(m, "r", None), dict) for k in m.r]
    return max(ranks) if ranks else 16


def selective_checkpoint(policy: Policy):
    """The checkpoint function transformers' hook calls (`fn(partial_forward, *args, **kwargs)`): torch's non-reentrant
    checkpoint with the selective contexts of `policy`."""
    from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

    return functools.partial(checkpoint, use_reentrant=False,
                             context_fn=functools.partial(create_selective_checkpoint_contexts, policy))


# --- offload of saved activations ------------------------------------------------------------------------------

class SavedOffload:
    """The offload arm's saved-tensor hooks over the decoder layers: pack copies a layer's saved tensor to the host
    (pinned on CUDA, on `copy_stream`); unpack returns the reloaded device tensor, after queueing the previous layer's
    reload (double buffer). Counters: `offloaded` / `offloaded_bytes` (per step, reset at each forward of layer 0),
    `reloads_prefetched`, `reloads_waited` (a layer reloaded on first touch, nothing prefetched)."""

    def __init__(self, layers, device, min_bytes: int = 1 << 20):
        self.layers = list(layers)
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.min_bytes = int(min_bytes)
        self.copy_stream = torch.cuda.Stream(self.device) if self.cuda else None
        self.stores: dict[int, list] = {}
        """{layer index: [host tensor per saved slot]} of the current step."""
        self.reloaded: dict[int, tuple] = {}
        """{layer index: ([device tensor per slot], event)} queued or done."""
        self.current = None
        self.param_storages: set = set()
        self.offloaded = 0
        self.offloaded_bytes = 0
        self.reloads_prefetched = 0
        self.reloads_waited = 0
        self._ctx = None

    def _refresh_params(self):
        self.param_storages = {p.untyped_storage().data_ptr() for layer in self.layers for p in layer.parameters()}

    def enter(self, index: int):
        if index == 0:
            self._refresh_params()
            self.stores.clear()
            self.reloaded.clear()
            self.offloaded = self.offloaded_bytes = 0
        self.current = index
        self.stores[index] = []
        self._ctx = torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)
        self._ctx.__enter__()

    def exit(self):
        if self._ctx is not None:
            self._ctx.__exit__(None, None, None)
            self._ctx = None
        self.current = None

    def pack(self, t: torch.Tensor):
        if (self.current is None or t.device != self.device or t.untyped_storage().data_ptr() in self.param_storages
                or t.numel() * t.element_size() < self.min_bytes):
            return ("keep", t)
        i = self.current
        if self.cuda:
            host = torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=True)
            self.copy_stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(self.copy_stream):
                host.copy_(t, non_blocking=True)
            t.record_stream(self.copy_stream)  # its memory is not reused before the copy has read it
        else:
            host = t.detach().clone()
        self.stores[i].append(host)
        self.offloaded += 1
        self.offloaded_bytes += t.numel() * t.element_size()
        return ("host", i, len(self.stores[i]) - 1, t.requires_grad)

    def _queue_reload(self, i: int):
        if i in self.reloaded or i not in self.stores:
            return
        hosts = self.stores[i]
        if self.cuda:
            with torch.cuda.stream(self.copy_stream):
                dev = [h.to(self.device, non_blocking=True) for h in hosts]
                ev = torch.cuda.Event()
                ev.record(self.copy_stream)
        else:
            dev, ev = [self._reload(h) for h in hosts], None
        self.reloaded[i] = (dev, ev)

    @staticmethod
    def _reload(host: torch.Tensor) -> torch.Tensor:
        """A host tensor back on the CPU device (a copy, as a device's reload is)."""
        return host.clone()

    def unpack(self, packed):
        if packed[0] == "keep":
            return packed[1]
        _, i, slot, _ = packed
        if i not in self.reloaded:
            self.reloads_waited += 1
            self._queue_reload(i)
        if i + 1 in self.reloaded:  # layer i+1's backward is done: its buffer goes (autograd holds what it still uses)
            self.reloaded.pop(i + 1)
            self.stores.pop(i + 1, None)
        if i - 1 >= 0 and i - 1 not in self.reloaded:
            self.reloads_prefetched += 1
            self._queue_reload(i - 1)  # double buffer: the next layer's backward loads while this one runs
        dev, ev = self.reloaded[i]
        if ev is not None:
            torch.cuda.current_stream(self.device).wait_event(ev)
            dev[slot].record_stream(torch.cuda.current_stream(self.device))
        return dev[slot]


def _offload_hooks(model, ctl: SavedOffload) -> list:
    from workbench.instrument.ranges import find_decoder_layers

    hs = []
    for i, layer in enumerate(find_decoder_layers(model)):
        hs.append(layer.register_forward_pre_hook(lambda m, a, i=i: ctl.enter(i)))
        hs.append(layer.register_forward_hook(lambda m, a, o: ctl.exit(), always_call=True))
    return hs


# --- the opt module contract ----------------------------------------------------------------------------------

def unsupported(arm: str, model, device) -> str | None:
    if arm not in ARMS:
        return f"unknown activations arm {arm!r}; arms: {', '.join(ARMS)}"
    if arm == "selective" and not hasattr(torch.utils.checkpoint, "create_selective_checkpoint_contexts"):
        return "selective activation checkpointing needs torch 2.4+ (create_selective_checkpoint_contexts)"
    return None


def lever_baseline(args, device) -> str:
    """The arm the lever starts from in `--opt levers`: the run's recipe (`full`, or `none` under --no-checkpointing,
    where the lever has nothing to do and is skipped)."""
    return BASELINE if args.step.checkpointing else OPTIMIZED


def path_conflict(arms: dict, device_type: str) -> str | None:
    """Why `selective` cannot run beside regional compile at a levers' path point `arms`: SAC runs the layer's forward
    under a TorchDispatchMode, under which the compiled layer runs its eager forward (`workbench.opts.compile`), and
    inductor's partitioner already recomputes the pointwise work inside a compiled layer."""
    if arms.get("activations") == "selective" and arms.get("compile", "eager") != "eager":
        return ("selective checkpointing runs each layer under a dispatch mode, where the regionally compiled layer "
                "runs eagerly; inside a compiled layer inductor's partitioner recomputes the pointwise work itself")
    return None


def fitting(estimates: dict, limit_bytes: int | None, host_bytes: dict | None = None,
            host_limit: int | None = None) -> tuple[list[str], dict]:
    """(the arms that fit, in SPEED_ORDER; {arm: why not} for the others): an arm fits when its estimate
    (`estimates`: {arm: bytes}) is at most FIT_MARGIN of `limit_bytes` and, for offload, its host bytes at most
    HOST_FIT_MARGIN of `host_limit`. Without a limit every arm fits."""
    ok, why = [], {}
    for arm in SPEED_ORDER:
        need = estimates[arm]
        if limit_bytes and need > FIT_MARGIN * limit_bytes:
            why[arm] = f"needs {need / 2**30:.3g} GiB, over {100 * FIT_MARGIN:.0f}% of {limit_bytes / 2**30:.3g} GiB"
        elif host_bytes and host_limit and host_bytes.get(arm, 0) > HOST_FIT_MARGIN * host_limit:
            why[arm] = (f"needs {host_bytes[arm] / 2**30:.1f} GiB of pinned host memory, over "
                        f"{100 * HOST_FIT_MARGIN:.0f}% of the host's {host_limit / 2**30:.1f} GiB")
        else:
            ok.append(arm)
    return ok, why


def lever_arms(args, device, config, tokens: int, layers: int | None, compiled: bool = False,
               folded_experts: bool | None = None) -> dict:
    """{"optimized": the fastest arm that fits (SPEED_ORDER, `fitting`), "others": the other arms that fit (timed
    beside it, each with its equivalence and peak memory), "why": one line, "estimates_bytes": {arm: bytes},
    "folded_experts"} for one shape; `compiled`: the layer regionally compiled (it saves fewer tensors);
    `folded_experts`: a MoE model's experts read peft's folded weight (None: the run's --experts decides,
    `memory_estimate.folded_experts_of`). `full` is the fallback when nothing else fits (the preflight refuses it
    where even it cannot)."""
    from workbench.step import memory_estimate as me

    if folded_experts is None:
        folded_experts = me.folded_experts_of(args.step.experts)
    est = {a: me.estimate_for(args, device, config, tokens, layers, activations=a, compiled=compiled,
                              folded_experts=folded_experts) for a in ARMS}
    limit, _ = me.device_bytes(device, args.memory_limit_gib)
    host = {"offload": est["offload"].host_bytes}
    ok, why_not = fitting({a: e.total_bytes for a, e in est.items()}, limit, host, me.host_ram_bytes())
    best = next((a for a in ok if a != BASELINE), BASELINE)
    left = "; ".join(f"{a} {w}" for a, w in why_not.items())
    why = (f"{best}: the fastest arm predicted ({' > '.join(SPEED_ORDER)}) whose estimate "
           f"({est[best].total_bytes / 2**30:.3g} GiB) fits {100 * FIT_MARGIN:.0f}% of the device"
           + (f" ({limit / 2**30:.3g} GiB)" if limit else "") + (f"; left out: {left}" if left else ""))
    return {"optimized": best, "others": [a for a in ok if a not in (best, BASELINE)], "why": why,
            "estimates_bytes": {a: e.total_bytes for a, e in est.items()}, "folded_experts": folded_experts}


def _checkpoint_state(model):
    from workbench.opts.offload import _checkpoint_state as state
    return state(model)


def _keep_on_trainer_enable(model, handle: Handle, arm: str, fn) -> None:
    """Make the model's `gradient_checkpointing_enable` (what Trainer(gradient_checkpointing=True) calls before it
    trains) keep this arm: `selective` / `full` re-install the arm's checkpoint function; `none` / `offload` refuse it
    in one line (it would switch checkpointing back on)."""
    from workbench.step.models import base_model_of

    base = base_model_of(model)
    original = base.gradient_checkpointing_enable

    def enable(gradient_checkpointing_kwargs=None, **_):
        kw = dict(gradient_checkpointing_kwargs or {})
        if arm in ("none", "offload"):
            raise WorkbenchError(f"activations={arm!r} keeps the activations (no checkpointing); "
                                 "gradient_checkpointing=True would switch checkpointing back on: leave it False")
        if kw.get("use_reentrant", False):
            raise WorkbenchError(f"activations={arm!r} needs non-reentrant checkpointing; drop use_reentrant=True "
                                 "from gradient_checkpointing_kwargs")
        original(gradient_checkpointing_kwargs={"use_reentrant": False})  # the input-grad hooks transformers adds
        from workbench.step.harness import enable_checkpointing
        enable_checkpointing(model, fn)

    had = "gradient_checkpointing_enable" in vars(base)
    base.gradient_checkpointing_enable = enable

    def undo():
        if had:
            base.gradient_checkpointing_enable = original
        else:
            vars(base).pop("gradient_checkpointing_enable", None)
    handle.undo.append(undo)


def apply(model, arm: str, *, min_bytes: int = 1 << 20) -> Handle:
    """Set what the decoder layers keep for the backward (`arm`); `handle.revert()` restores the model's
    checkpointing as it was. `min_bytes`: the offload arm's smallest saved tensor it moves to the host.
    `handle.info`: the arm's policy (`policy`), and for selective `handle.policy` (its counters), for offload
    `handle.offload` (`SavedOffload`)."""
    from workbench.step.harness import disable_checkpointing, enable_checkpointing

    why = unsupported(arm, model, None)
    if why:
        raise WorkbenchError(why)
    h = Handle(opt="activations", arm=arm)
    h.undo.append(_checkpoint_state(model))
    fn = None
    if arm == "full":
        enable_checkpointing(model)
        h.info["policy"] = "non-reentrant checkpoint of every decoder layer: keeps its input, recomputes its forward"
    elif arm == "selective":
        policy = Policy(lora_rank_of(model))
        fn = selective_checkpoint(policy)
        enable_checkpointing(model, fn)
        h.policy = policy
        h.info["policy"] = (f"selective: save the outputs of GEMMs wider than the LoRA rank ({policy.rank}) and of "
                            "attention kernels; recompute pointwise work and the LoRA factors' GEMMs")
    else:
        disable_checkpointing(model)
        h.info["policy"] = "keep every saved tensor" + (" on the host (double-buffered reload)" if arm == "offload"
                                                        else "")
        if arm == "offload":
            from workbench.instrument.ranges import find_decoder_layers
            ctl = SavedOffload(find_decoder_layers(model), next(model.parameters()).device, min_bytes=min_bytes)
            hooks = _offload_hooks(model, ctl)
            h.offload = ctl
            h.undo.append(lambda: [x.remove() for x in hooks])
    _keep_on_trainer_enable(model, h, arm, fn)
    return h
