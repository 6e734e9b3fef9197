"""Regional `torch.compile` of every decoder layer, after PEFT wrapping, as a lever.

    # T = packed tokens, L = layers

Arms (module contract in `workbench.opts`):
- `eager` (baseline): the layers as built (transformers' eager modules, peft's LoRA linears).
- `regional` (optimized): each decoder layer's forward compiled in place with `torch.compile(fullgraph=True,
  dynamic=False)` (inductor): its norms, rotary, SwiGLU, residual adds and LoRA matmuls fused where inductor can, the
  attention kernel called from the compiled graph. The layer objects stay where they are (the same modules, parameter
  names and LoRA parameters; the compiled callable is the layer's instance-level `forward`), so checkpointing
  (transformers' `GradientCheckpointingLayer`) and the workbench's per-layer ranges (`instrument_layers`) wrap the
  compiled body from outside. The instance-level range wrappers of `self_attn` / `mlp` are lifted while the arm is
  on (they would put range pushes inside the graph); `revert` puts them and the layers' forwards back.

Static shapes across batches, or the arm fails:
- fixed tokens: `prepare_batch` pads every batch to the comparison's `tokens` with one document of pad tokens whose
  labels are all ignored (-100), so the loss and the gradients are those of the real documents (packed documents
  attend only within themselves); a batch already at `tokens` is left alone;
- the layer's other inputs (the packed mask transformers builds outside the layers, rotary cos / sin, position ids)
  then have the same shapes in every batch. An attention whose per-batch metadata reaches the layer as Python values
  that change from batch to batch (document lengths, a cu_seqlens of the document count, a max length) makes dynamo
  specialise on them and compile again: that is caught below, not hidden. Where that is certain it is refused before
  anything compiles (`specialising_attention`, checked at the layer's first call, one line): the attention lever's
  and packing's `varlen` (cu_seqlens with one entry per document, a Python-int max length), and on a CPU the attention
  lever's `flex` (flex has no CPU backward: its training path loops over the document lengths). The attention
  lever's `dense` (a T x T mask from the document ids, fixed shapes once padded) compiles once and runs every batch
  (tests/test_opt_compile.py); its `flex` on a GPU (BlockMask tables of fixed shape once padded, built before the
  layers: `attention._prime_flex`) is left to the guards below. Liger's RoPE cannot run inside the compiled layer
  (`liger.path_conflict`).

A decoder layer that holds peft's LoRA on bare parameters (the MoE models' experts: `ParamWrapper`, whose forward
registers a parametrization, a `Parameter.set_`, at every call: a graph break in a fullgraph layer) is compiled by
region instead (`regions`): every submodule of the layer that holds no `ParamWrapper` is compiled in place, fullgraph
each (the attention block with its norms, rotary and LoRA linears, the two RMSNorms, the MoE block's router), and the
experts module runs eagerly under whatever experts implementation is switched on (the expert_lora lever's `split`,
transformers' `grouped_mm`, ...), as do the glue between the regions (the residual adds, the MoE block's reshapes).
The same function: each region's compiled forward is its eager forward (tests/test_opt_compile_moe.py). The graph
breaks and recompiles of a region fail the arm as a layer's do; the layer's own forward stays eager, so the
workbench's layer ranges and the step count wrap it from outside, and a region that had the instrumentation's range
wrapper (`self_attn`) gets it back around its compiled forward. `info["regions"]` names the regions compiled. The
experts' own pointwise work (their activation, the routing's gathers) stays eager, so SAVED_FRACTION, fixed for a
dense layer, overstates the saving on a MoE layer.

Failures, each one line (`WorkbenchError`):
- a graph break (fullgraph=True: dynamo raises instead of splitting the layer and running the rest eagerly);
- a recompile: a graph compiled after the handle's first step (counted by the compile backend, which is inductor
  behind a counter). Every graph is compiled in the first step a handle runs (the warm-up's first step); later steps
  only run them. The backend is one object per process (`shared_backend`), so a later apply of the arm (the next
  rep) runs the graphs the first apply compiled instead of compiling again;
- dynamo's recompile limit, counted per handle: more graphs of one compiled code object (a layer's forward, a
  region's) in one handle's first step than `torch._dynamo.config.recompile_limit` (read at apply). Dynamo keeps a
  code object's graphs for the process and counts all of them against its limit, but the levers' path applies the arm
  at several points whose other arms change the graph's guards (the precision lever's autocast, the attention
  implementation, lora_fusion's fused projections): each point compiles graphs of its own, and the earlier points'
  graphs stay cached for their next reps (a path whose compile point comes before precision's, as gpt-oss-20b's by
  predicted saving, compiles the attention's code at least twice a point, layer 0's input needing no gradient, and
  reached dynamo's 8 at its third compiled point). So in its first step a handle runs the compiled code with the limit
  raised by the graphs the shared backend compiled of that code before the handle began (`_Backend.graphs_of`, the
  earlier points', at most those dynamo still holds): each point gets the limit for its own graphs, as a process
  running one configuration would. Past the first step the limit is dynamo's own (any compile there fails anyway).

Under a TorchDispatchMode (the runner's counted pass: the sync counter) dynamo traces nothing, so there the layers run
their eager forward: the counted pass counts the eager layer's syncs (a compiled graph adds none of its own).

Compile time is kept apart from step time: `info["compile_s"]` is the first step's wall time less the second's (what
the warm-up's first step cost beyond a step), `info["graphs"]` the graphs compiled (layers that differ, e.g. layer 0
whose input needs no gradient, or sliding vs full attention layers, get their own).

CUDA graphs, the opt-in arm `regional_cudagraphs` (`--arms regional_cudagraphs`; never on the levers' path,
`OFF_PATH_ARMS`): `regional` with inductor's CUDA graphs (`triton.cudagraphs`, CUDA Graph Trees, what
mode="reduce-overhead" switches on): each compiled layer's forward and backward replay as recorded graphs, one
launch each instead of one per kernel. Refused in one line on a CPU (no CUDA graphs), without `tokens` (dynamic
shapes: a graph is recorded for one shape), and beside a checkpointed or offloaded layer (`path_conflict`; at the
layer's first call where the layer is checkpointed): CUDA Graph Trees record a compiled function nested in
`torch.utils.checkpoint(use_reentrant=False)` with another tensor liveness than they replay and fail (torch issue
154306, still open in torch 2.11), and offload's saved-tensor hooks copy the graphs' pool memory out on a side stream
while later replays overwrite it. Its predicted saving, from a traced `regional` step (`cudagraphs_prediction`):
    predicted_ms = launch_gap_ms                       (the GPU idle waiting for launches, `workbench.traces.decompose`)
an upper bound: the launches outside the layers (loss, optimizer) stay.

Use: `handle = workbench.opts.apply(model, "compile", "regional", tokens=16384)`; `handle.revert()` restores the
eager layers. On a CPU inductor needs a C compiler (gcc / cc on PATH); on CUDA it needs triton (CUDA builds of torch
bring it).
"""
from __future__ import annotations

import dataclasses
import shutil
import time
import types

import torch

from workbench.errors import UnsupportedArm, WorkbenchError
from workbench.opts import Handle

SPEC = {"order": 13, "apply_order": 0, "lever": "norm_elementwise", "in_all": False,
        "help": "eager (baseline: the decoder layers as built), regional (optimized: torch.compile of each decoder "
                "layer in place, fullgraph, static shapes: batches padded to --tokens; a MoE layer by region, its "
                "experts eager; a recompile or a graph break fails the arm; compile time reported apart), "
                "regional_cudagraphs (opt-in, CUDA only, no checkpointing: regional with inductor's CUDA graphs)",
        "cpu": {"model": "tiny-llama", "layers": 1}, "gpu": {"model": "llama-3.1-8b", "layers": 8, "tokens": 16384},
        "all_variants": ()}
"""What the CLIs say of this optimization (`workbench.opts.registry`); a lever (`lever`), not part of `--opt all`.
`apply_order` 0: its padding (prepare_batch) runs before any other arm's collate-time metadata is built."""

ARMS = ("eager", "regional", "regional_cudagraphs")
BASELINE = "eager"
OPTIMIZED = "regional"
CUDAGRAPHS = "regional_cudagraphs"
OPT_IN_ARMS = (CUDAGRAPHS,)
CUDAGRAPHS_CONFLICT = ("CUDA graphs fail inside a checkpointed layer (CUDA Graph Trees under torch.utils.checkpoint: "
                       "torch issue 154306) and beside offload's saved-tensor hooks")
OFF_PATH_ARMS = {CUDAGRAPHS: f"{CUDAGRAPHS_CONFLICT}, and no CUDA graph can be recorded or tested on the CPU this code "
                             "is built on: opt-in (--opt compile --arms regional_cudagraphs, beside --no-checkpointing) "
                             "until a GPU run shows it equivalent"}
"""{arm: why the levers' path never takes it} (`workbench.opts.protocol` OFF_PATH_ARMS)."""
SAVED_FRACTION = 0.5
"""Share of the traced baseline's `norm_elementwise` time (norms, activations, pointwise ops) the compiled layers
remove: inductor fuses each chain of pointwise ops into one kernel that reads and writes each tensor once instead of
once per op; half is the prediction fixed before the run (a chain of two or more ops per tensor; the matmuls and the
attention kernel stay as they are)."""
PAD_TOKEN = 0


def _layers(model):
    from workbench.instrument.ranges import find_decoder_layers
    return find_decoder_layers(model)


def _has_c_compiler() -> bool:
    return any(shutil.which(c) for c in ("gcc", "cc", "clang"))


def unsupported(arm: str, model, device) -> str | None:
    if arm not in ARMS:
        return f"unknown compile arm {arm!r}; arms: {', '.join(ARMS)}"
    if arm == "eager":
        return None
    if arm == CUDAGRAPHS:
        dev = torch.device(device) if device is not None else next(model.parameters()).device
        if dev.type != "cuda":
            return f"CUDA graphs need a CUDA device (this one is {dev.type})"
    if not hasattr(torch, "compile"):
        return "torch.compile needs torch 2.0+"
    dev = torch.device(device) if device is not None else next(model.parameters()).device
    if dev.type == "cpu" and not _has_c_compiler():
        return "regional compile on a CPU needs a C compiler on PATH (gcc, cc or clang) for inductor"
    if dev.type == "cuda":
        import importlib.util
        if importlib.util.find_spec("triton") is None:
            return "regional compile on CUDA needs triton (CUDA builds of torch bring it)"
    return None


def _param_wrapper_class():
    try:
        from peft.tuners.lora.layer import ParamWrapper
    except ImportError:
        return None
    return ParamWrapper


def parameter_lora(model) -> str | None:
    """The first module name of `model` that is peft's LoRA on a bare parameter (`peft.tuners.lora.layer.ParamWrapper`,
    `target_parameters`: the MoE presets' experts), or None."""
    cls = _param_wrapper_class()
    if cls is None:
        return None
    return next((name for name, mod in model.named_modules() if isinstance(mod, cls)), None)


def regions(layer) -> list[tuple[str, torch.nn.Module]] | None:
    """[(name, submodule)] compiled in place of decoder layer `layer` when it holds peft's LoRA on parameters: the
    largest submodules holding no `ParamWrapper` (and with a forward of their own), found by descending into the
    children that hold one; a `ParamWrapper` itself (the experts) is left out, to run eagerly. None for a layer
    without one (the whole layer is compiled)."""
    cls = _param_wrapper_class()
    if cls is None or not any(isinstance(m, cls) for m in layer.modules()):
        return None
    out = []

    def walk(module, prefix):
        for name, child in module.named_children():
            if isinstance(child, cls):
                continue
            if any(isinstance(m, cls) for m in child.modules()):
                walk(child, f"{prefix}{name}.")
            elif type(child).forward is not torch.nn.Module.forward:
                out.append((f"{prefix}{name}", child))
    walk(layer, "")
    return out


def comparison_options(cmp, device, state: dict) -> dict:
    """The tokens every batch is padded to (the comparison's `tokens`: fixed shapes across batches)."""
    return {"tokens": cmp.tokens}


def pad_batch(batch, tokens: int):
    """`batch` with one extra document of `tokens - T` pad tokens at the end (positions from 0, labels ignored), so
    that every batch has exactly `tokens` tokens; unchanged when T == tokens. More than `tokens` is an error."""
    from workbench.step.data import IGNORE_INDEX

    T = batch.tokens
    if T > tokens:
        raise WorkbenchError(f"compile: a batch of {T} tokens exceeds the fixed {tokens} it is padded to")
    n = tokens - T
    if n == 0:
        return batch
    ids = torch.full((1, n), PAD_TOKEN, dtype=batch.input_ids.dtype)
    pos = torch.arange(n, dtype=batch.position_ids.dtype).view(1, n)
    lab = torch.full((1, n), IGNORE_INDEX, dtype=batch.labels.dtype)
    return dataclasses.replace(batch, input_ids=torch.cat([batch.input_ids, ids], 1),
                               position_ids=torch.cat([batch.position_ids, pos], 1),
                               labels=torch.cat([batch.labels, lab], 1), doc_lens=[*batch.doc_lens, n])


class _Backend:
    """The compile backend, one object per compiler for the whole process (`shared_backend`). Dynamo caches a layer's
    compiled graphs on the layer class's code object and guards them with the backend's identity: the engine applies
    the arm anew in every rep (and in its equivalence check), and a backend made per apply failed that guard and
    compiled again each time, until dynamo's recompile limit (8) failed the arm (at 2 graphs an
    apply, in rep 3). With one backend every later apply runs the graphs an earlier one compiled.
    `guard` is the handle being run (it decides whether a compile is allowed); `compiled_by` the last handle that
    compiled graphs (its graph count and compile time describe the graphs later applies run)."""

    def __init__(self, compiler: str):
        self.compiler = compiler
        self.guard: _Guard | None = None
        self.compiled_by: _Guard | None = None
        self.graphs = 0
        self.graphs_of: dict = {}
        """{code object: graphs this backend compiled of it} (`_Guard.run_compiling`), whatever handle ran them."""

    def __call__(self, gm, example_inputs):
        if self.guard is not None:
            self.guard.compiling()  # raises where the handle allows no compile
        self.graphs += 1
        if self.compiler == "aot_eager":  # the plumbing's tests: the same graphs and guards, no code generation
            from torch._dynamo.backends.debugging import aot_eager
            return aot_eager(gm, example_inputs)
        from torch._inductor.compile_fx import compile_fx
        if self.compiler == "inductor_cudagraphs":
            return compile_fx(gm, example_inputs, config_patches={"triton.cudagraphs": True})
        return compile_fx(gm, example_inputs)


_BACKENDS: dict[str, _Backend] = {}


def shared_backend(compiler: str) -> _Backend:
    """The process's one backend object for `compiler` (inductor, aot_eager)."""
    return _BACKENDS.setdefault(compiler, _Backend(compiler))


class _Guard:
    """What the compiled layers did under one handle: steps begun (first layer's forward, outside the recompute),
    graphs compiled here (`graphs_here`: 0 when an earlier apply's graphs serve this one), the first two steps' start
    times. `info["graphs"]`, `compile_s` and `first_step_s` describe the compile that made the graphs this handle runs
    (here, or in the earlier apply that compiled them)."""

    def __init__(self, info: dict, backend: _Backend):
        self.info = info
        self.backend = backend
        self.steps = 0
        self.graphs = 0
        self.starts: list[float] = []
        self.timing: dict = {}
        self.recompile_limit = int(torch._dynamo.config.recompile_limit)
        self.graphs_before: dict = {}
        """{code object: graphs the backend had compiled of it when this handle first ran it}."""
        self._sync_info()

    def _sync_info(self) -> None:
        src = self if self.graphs or self.backend.compiled_by is None else self.backend.compiled_by
        self.info["graphs_here"] = self.graphs
        self.info["graphs"] = src.graphs
        self.info.update(src.timing)

    def recompiled(self) -> str:
        return (f"compile: recompiled in step {self.steps} (graph {self.graphs + 1}): an input of the layer changed "
                "shape or a specialised value across batches (fixed --tokens, static attention metadata needed)")

    def compiling(self) -> None:
        if self.steps > 1:
            raise WorkbenchError(self.recompiled())
        self.graphs += 1
        self.backend.compiled_by = self
        self._sync_info()

    def run_compiling(self, code, compiled, args, kwargs):
        """`compiled(*args, **kwargs)` in a step that may compile: dynamo's recompile limit for `code` raised by the
        graphs the backend compiled of it before this handle first ran it (so the limit counts this handle's graphs
        only); the graphs compiled here are added to the backend's count of `code`."""
        backend = self.backend
        before = backend.graphs_of.get(code, 0)
        cached = _cached_graphs(code)
        if cached is not None:  # a torch._dynamo.reset() (`step_guard`, after a failed step) dropped them
            before = min(before, cached)
        limit = self.graphs_before.setdefault(code, before) + self.recompile_limit
        start = backend.graphs
        try:
            with torch._dynamo.config.patch(recompile_limit=limit):
                return compiled(*args, **kwargs)
        finally:
            backend.graphs_of[code] = before + backend.graphs - start

    def step_begins(self) -> None:
        self.steps += 1
        if len(self.starts) < 3:
            self.starts.append(time.perf_counter())
            if len(self.starts) == 3 and self.graphs:  # the apply that compiled: its first step carried the compile
                first, second = self.starts[1] - self.starts[0], self.starts[2] - self.starts[1]
                self.timing = {"first_step_s": round(first, 3), "compile_s": round(max(0.0, first - second), 3)}
        self._sync_info()


def _cached_graphs(code) -> int | None:
    """The graphs dynamo holds cached on `code` (any backend's), or None where this torch does not say (its debug
    accessor, `torch._dynamo.eval_frame._debug_get_cache_entry_list`, is private)."""
    get = getattr(torch._dynamo.eval_frame, "_debug_get_cache_entry_list", None)
    return len(get(code)) if get is not None else None


def specialising_attention(impl: str | None, device_type: str) -> str | None:
    """Why attention implementation `impl` would recompile a fullgraph, static-shape layer on every batch (its
    per-batch metadata reaches the layer as Python values or tensors whose shape follows the document count); None
    where nothing is known against it."""
    from workbench.opts import attention, packing

    if impl in (attention.impl_name("varlen"), packing.impl_name("varlen")):
        return ("varlen attention takes cu_seqlens (one entry per document) and a Python-int max length, both "
                "changing from batch to batch")
    if impl == attention.impl_name("flex") and device_type == "cpu":
        return ("flex has no CPU backward: its CPU training path runs one attention per document, a Python loop over "
                "the batch's document lengths")
    return None


def path_conflict(arms: dict, device_type: str) -> str | None:
    """Why `regional` cannot run at a levers' path point `arms` ({opt: arm}): the attention lever's arm there installs
    an implementation `specialising_attention` refuses (the rule the arm applies at the layer's first call, said
    before the path runs). None for the baseline arm, or where nothing is known against it."""
    from workbench.opts import attention

    if arms.get("compile") == CUDAGRAPHS and arms.get("activations", "none") != "none":
        return (f"CUDA graphs cannot run beside activations={arms['activations']}: "
                f"{CUDAGRAPHS_CONFLICT}")
    if arms.get("compile", BASELINE) == BASELINE or "attention" not in arms:
        return None
    why = specialising_attention(attention.impl_name(arms["attention"]), device_type)
    return f"regional compile cannot run beside attention={arms['attention']}: {why}" if why else None


def _attention_impl(layer) -> str | None:
    cfg = getattr(getattr(layer, "self_attn", None), "config", None)
    return getattr(cfg, "_attn_implementation", None)


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).strip().splitlines()[:1])[:300]


def _compiled_body(fn, layer, guard: _Guard, cudagraphs: bool = False):
    """`fn` (a forward of decoder layer `layer` or of one of its regions) compiled fullgraph with the shared backend,
    as a callable whose compiler failures are one-line WorkbenchErrors; under a dispatch mode it runs `fn` eagerly."""
    from torch._dynamo import exc as dynamo_exc
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    compiled = torch.compile(fn, backend=guard.backend, fullgraph=True, dynamic=False)
    code = getattr(fn, "__code__", None)  # the code object dynamo caches the graphs on

    def body(*args, **kwargs):
        impl = _attention_impl(layer)
        why = specialising_attention(impl, next(layer.parameters()).device.type)
        if why is not None:  # a recompile on every batch: refused before anything compiles
            raise WorkbenchError(f"compile: regional compile cannot run with the {impl} attention: {why}")
        if cudagraphs and getattr(layer, "gradient_checkpointing", False) and torch.is_grad_enabled():
            raise WorkbenchError(f"compile: {CUDAGRAPHS} cannot run in a checkpointed layer: "
                                 f"{CUDAGRAPHS_CONFLICT}")
        if _get_current_dispatch_mode() is not None:  # the sync counter's pass: dynamo traces nothing under a mode
            return fn(*args, **kwargs)
        try:
            if guard.steps > 1 or code is None:  # no compile is allowed here: dynamo's own limit
                return compiled(*args, **kwargs)
            return guard.run_compiling(code, compiled, args, kwargs)
        except dynamo_exc.BackendCompilerFailed as e:
            inner = getattr(e, "inner_exception", None) or e.__cause__
            if isinstance(inner, WorkbenchError):
                raise WorkbenchError(str(inner)) from None
            raise WorkbenchError(f"compile: the backend failed: {_one_line(inner or e)}") from None
        except dynamo_exc.FailOnRecompileLimitHit as e:
            if guard.steps > 1:  # past the compiling step: a recompile, whichever limit caught it
                raise WorkbenchError(guard.recompiled()) from None
            raise WorkbenchError(f"compile: dynamo's recompile limit hit in step {guard.steps} (more than "
                                 f"{guard.recompile_limit} graphs of one compiled code in this configuration: "
                                 f"{getattr(code, 'co_name', '?')}): {_one_line(e)}") from None
        except (dynamo_exc.Unsupported, dynamo_exc.UserError) as e:
            raise WorkbenchError(f"compile: graph break in the decoder layer (fullgraph): {_one_line(e)}") from e
    return body


def _counting(forward, guard: _Guard):
    """`forward` that first counts a step begun (`guard.step_begins`) outside the backward's recompute."""
    from workbench.instrument import state

    def counted(*args, **kwargs):
        if state.pass_name != state.BACKWARD:
            guard.step_begins()
        return forward(*args, **kwargs)
    return counted


def _compiled_forward(layer, guard: _Guard, first: bool, cudagraphs: bool = False):
    """The layer's compiled forward (its class's own, below the workbench's instrumentation), as an instance-level
    forward; failures of the compiler become one-line WorkbenchErrors."""
    base = getattr(type(layer), "_wb_base_class", type(layer))
    body = _compiled_body(types.MethodType(base.forward, layer), layer, guard, cudagraphs)
    if getattr(type(layer), "_wb_base_class", None) is not None:  # instrumented: ranges outside the graph
        from workbench.instrument.ranges import _layer_forward

        def forward(*args, **kwargs):
            return _layer_forward(layer, body, args, kwargs)
    else:
        forward = body
    return _counting(forward, guard) if first else forward


def _compile_regions(layer, parts, guard: _Guard, first: bool, cudagraphs: bool = False) -> list:
    """Compile each region of `layer` (`regions`) in place; the layer's forward stays eager (counting steps at the
    first layer). Returns the undo callables."""
    from workbench.instrument.ranges import range_name_of, wrap_in_range

    undos = []
    for _name, mod in parts:
        had = vars(mod).get("forward")
        label = range_name_of(had) if had is not None else None
        fn = had if had is not None and label is None else types.MethodType(type(mod).forward, mod)
        undos.append(_restorer(mod))
        mod.forward = _compiled_body(fn, layer, guard, cudagraphs)
        if label is not None:  # the instrumentation's range, outside the compiled region as around the layer
            wrap_in_range(mod, label)
    if first:
        had = vars(layer).get("forward")
        undos.append(_restorer(layer))
        layer.forward = _counting(had if had is not None else types.MethodType(type(layer).forward, layer), guard)
    return undos


def _restorer(mod):
    """An undo that puts `mod`'s instance-level forward back as it is now (removing one set later where it had none)."""
    had = vars(mod).get("forward")

    def undo():
        if had is None:
            vars(mod).pop("forward", None)
        else:
            mod.forward = had
    return undo


BACKENDS_COMPILE = ("inductor", "aot_eager")


def cudagraphs_prediction(breakdown: dict) -> float | None:
    """The predicted saving (ms per step) of `regional_cudagraphs` over `regional`, from a traced `regional` step's
    breakdown (`workbench.ab.levers.breakdown_of`): its launch_gap, the GPU idle while the host launches (an upper
    bound: the launches outside the compiled layers stay). None without that component."""
    return next((r["ms"] for r in (breakdown or {}).get("components", []) if r.get("component") == "launch_gap"),
                None)


def apply(model, arm: str, tokens: int | None = None, backend: str = "inductor", **options) -> Handle:
    """Compile every decoder layer in place (`regional`), batches padded to `tokens`; `eager` changes nothing.
    `backend`: inductor (the arm), or aot_eager (the same graphs and guards without code generation: the CPU tests of
    the plumbing). Returns a Handle whose revert() restores the eager layers."""
    if options:
        raise WorkbenchError(f"compile: unknown options {', '.join(sorted(options))}")
    if backend not in BACKENDS_COMPILE:
        raise WorkbenchError(f"compile: backend must be one of {', '.join(BACKENDS_COMPILE)}, got {backend!r}")
    why = unsupported(arm, model, None)
    if why is not None:
        raise UnsupportedArm(why)
    if arm == CUDAGRAPHS and tokens is None:
        raise UnsupportedArm("CUDA graphs need static shapes: pass tokens (every batch padded to it)")
    if arm == CUDAGRAPHS and backend == "inductor":
        backend = "inductor_cudagraphs"
    h = Handle(opt="compile", arm=arm)
    if arm == "eager":
        return h
    layers = list(_layers(model))
    h.info.update(layers=len(layers), fullgraph=True, dynamic=False, padded_to=tokens, backend=backend)
    shared = shared_backend(backend)
    guard = _Guard(h.info, shared)
    shared.guard = guard  # the handle being run decides whether a compile is allowed

    def release(shared=shared, guard=guard):
        if shared.guard is guard:
            shared.guard = None
    h.undo.append(release)
    for i, layer in enumerate(layers):
        parts = regions(layer)
        if parts is not None:
            h.undo.extend(_compile_regions(layer, parts, guard, first=i == 0, cudagraphs=arm == CUDAGRAPHS))
            h.info["regions"] = [name for name, _ in parts]
            continue
        lifted = {}
        for name in ("self_attn", "mlp"):
            sub = getattr(layer, name, None)
            if sub is not None and "forward" in vars(sub):  # the instrumentation's range wrapper
                lifted[name] = vars(sub)["forward"]
                del sub.forward
        restore = _restorer(layer)
        layer.forward = _compiled_forward(layer, guard, first=i == 0, cudagraphs=arm == CUDAGRAPHS)

        def undo(layer=layer, lifted=lifted, restore=restore):
            restore()
            for name, fwd in lifted.items():
                getattr(layer, name).forward = fwd
        h.undo.append(undo)
    if tokens is not None:
        h.prepare_batch = lambda b: pad_batch(b, int(tokens))
    return h
