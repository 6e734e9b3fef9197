"""Model presets (published shapes and tiny CPU ones), model building with LoRA, and model inputs.

    # T = packed tokens, L = layers, E = experts, k = experts per token

Presets carry the published configs (the models' Hugging Face config.json values); weights are random and seeded, bf16 on a GPU and float32
on CPU. A local Hugging Face checkpoint directory works too (no hub access). LoRA goes on the attention and
MLP linears, and on fused expert parameters through peft's `target_parameters`; the base is frozen and
`use_cache=False` always.
"""
from __future__ import annotations

import copy
import glob
import json
import os
import warnings

import torch

from workbench.errors import WorkbenchError


from workbench.step.presets import (  # noqa: F401 - re-exported (models.PRESETS etc. as before)
    ATTN_CHOICES, EXPERTS_CHOICES, FAMILY_DEFAULT_ATTN, LORA_TARGET_EXPERT_PARAMETERS, LORA_TARGET_MODULES,
    MOE_FAMILIES, PRESETS, WEIGHT_PATTERNS, Preset, _MODEL_TYPES,
)



def _config_class(family: str):
    import transformers
    return {"llama": transformers.LlamaConfig, "qwen3": transformers.Qwen3Config,
            "qwen3_moe": transformers.Qwen3MoeConfig, "gpt_oss": transformers.GptOssConfig}[family]


def is_checkpoint_path(model: str) -> bool:
    return model not in PRESETS and (os.sep in model or model.startswith(".") or os.path.exists(model))


def _one_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[0].rstrip(" .") if lines else type(e).__name__


def check_checkpoint(path: str) -> dict:
    """Cheap checks of a local checkpoint directory, before transformers reads it or a model is built.

    Returns the parsed config.json. Raises WorkbenchError (one line: the problem and the fix) for a missing or empty
    directory, a config.json that is not JSON or not an object, a missing or unsupported `model_type`, and a directory
    without weight files (`*.safetensors`, `pytorch_model*.bin`).
    """
    supported = ", ".join(_MODEL_TYPES.values())
    if not os.path.exists(path):
        raise WorkbenchError(f"checkpoint directory not found: {path} does not exist; pass a local Hugging Face "
                             "checkpoint directory (config.json and weights; hub ids are not downloaded) or a preset "
                             "name (see --help)")
    if not os.path.isdir(path):
        raise WorkbenchError(f"checkpoint directory not found: {path} is a file, not a directory; pass the directory "
                             "that holds config.json and the weights")
    cfg_path = os.path.join(path, "config.json")
    if not os.path.isfile(cfg_path):
        raise WorkbenchError(f"{path} is a directory but not a Hugging Face checkpoint: it has no config.json; pass "
                             "the directory that holds config.json and the weights, or a preset name (see --help)")
    try:
        with open(cfg_path, encoding="utf-8") as f:
            raw = json.load(f)
    except json.JSONDecodeError as e:
        raise WorkbenchError(f"{cfg_path} is not valid JSON ({e.msg} at line {e.lineno}, column {e.colno}): the "
                             "file is corrupted; re-download or re-save the checkpoint") from None
    except (OSError, UnicodeDecodeError) as e:
        raise WorkbenchError(f"cannot read {cfg_path} ({_one_line(e)}); check the file, or re-download or re-save "
                             "the checkpoint") from None
    if not isinstance(raw, dict):
        raise WorkbenchError(f"{cfg_path} must hold a JSON object, got a {type(raw).__name__}; re-download or re-save "
                             "the checkpoint")
    model_type = raw.get("model_type")
    if not model_type:
        raise WorkbenchError(f"{cfg_path} has no model_type; add \"model_type\" (one of {supported}) or re-save the "
                             "checkpoint with transformers")
    if not isinstance(model_type, str) or model_type not in _MODEL_TYPES.values():
        raise WorkbenchError(f"unsupported model_type {model_type!r} in {cfg_path}; the workbench supports {supported} "
                             "(or pass a preset name, see --help)")
    if not any(glob.glob(os.path.join(glob.escape(path), pat)) for pat in WEIGHT_PATTERNS):
        raise WorkbenchError(f"checkpoint directory {path} has a config.json but no weights ("
                             f"{' or '.join(WEIGHT_PATTERNS)}); put the weights there, or pass a preset name (e.g. "
                             "tiny-llama) to build a model with random weights from a config")
    for f in sorted(glob.glob(os.path.join(glob.escape(path), "*.safetensors"))):
        why = safetensors_problem(f)
        if why:
            raise WorkbenchError(f"{f} is not a whole safetensors file ({why}): the checkpoint is corrupted or was cut "
                                 "short; re-download or re-save it")
    return raw


def safetensors_problem(path: str) -> str | None:
    """Why `path` is not a whole safetensors file (its header unreadable, or the file shorter or longer than the
    tensors its header lists), or None; reads the header only."""
    import struct
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                return f"{size} bytes, shorter than its header"
            (n,) = struct.unpack("<Q", head)
            if n > size - 8 or n > 100 * 2**20:
                return f"a header of {n} bytes in a file of {size}"
            header = json.loads(f.read(n).decode("utf-8"))
    except OSError as e:
        return _one_line(e)
    except (ValueError, UnicodeDecodeError):
        return "its header is not JSON"
    if not isinstance(header, dict):
        return "its header is not a JSON object"
    try:
        end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
    except (KeyError, TypeError, ValueError, IndexError):
        return "its header lists a tensor without data offsets"
    if 8 + n + end != size:
        return f"{size} bytes where its header lists {8 + n + end}"
    return None


def _interface_names(get_interface) -> list[str]:
    """Keys of a transformers GeneralInterface (empty when this transformers lacks it)."""
    try:
        return [str(k) for k in get_interface()()]
    except Exception:  # ImportError on an older transformers, or an interface whose API changed
        return []


WORKBENCH_EXPERTS: dict = {}
"""The workbench's own experts implementations: wb_* name -> a function that registers it in transformers'
ExpertsInterface. `workbench.opts.moe` fills it when imported (the rooms that take --experts names import it), so
this room knows no optimization."""


def _workbench_experts() -> dict:
    return WORKBENCH_EXPERTS


def _attention_interface():
    from transformers import AttentionInterface
    return AttentionInterface


def _experts_interface():
    from transformers.integrations.moe import ExpertsInterface
    return ExpertsInterface


def attn_choices() -> tuple[str, ...]:
    """Accepted `attn` names: ATTN_CHOICES plus those registered in transformers' AttentionInterface."""
    return tuple(dict.fromkeys([*ATTN_CHOICES, *_interface_names(_attention_interface)]))


def experts_choices() -> tuple[str, ...]:
    """Accepted `experts_implementation` names: EXPERTS_CHOICES, transformers' ExpertsInterface, the workbench's."""
    return tuple(dict.fromkeys([*EXPERTS_CHOICES, *_interface_names(_experts_interface), *_workbench_experts()]))


def check_attn(name: str) -> None:
    """Raise WorkbenchError unless `name` is an HF attention implementation this transformers knows."""
    choices = attn_choices()
    if name not in choices:
        raise WorkbenchError(f"unknown attention implementation {name!r}; choose from {', '.join(choices)}")


def check_experts(name: str) -> None:
    """Raise WorkbenchError unless `name` is an experts implementation (HF's, registered, or the workbench's)."""
    choices = experts_choices()
    if name not in choices:
        raise WorkbenchError(f"unknown experts implementation {name!r}; choose from {', '.join(choices)}")


def _ensure_experts_registered(name: str) -> None:
    """A workbench experts name (wb_*) is registered in ExpertsInterface on first use, so HF can dispatch to it."""
    if name in _interface_names(_experts_interface):
        return
    if name in WORKBENCH_EXPERTS:
        WORKBENCH_EXPERTS[name]()


def resolve_device(device: str) -> torch.device:
    """auto -> cuda when available, else cpu."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise WorkbenchError("--device cuda asked for, but torch sees no CUDA device")
    return torch.device(device)


def default_dtype(device: torch.device) -> torch.dtype:
    return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32


def load_config(model: str, layers: int | None = None, attn: str | None = None,
                experts_implementation: str | None = None):
    """The HF config of a preset or a local checkpoint directory, with the layer count overridden.

    Cheap (no model is built), so CLIs call it to validate their arguments: an unknown preset, a bad checkpoint
    directory (`check_checkpoint`), an unknown `attn` (`check_attn`) or `experts_implementation` (`check_experts`)
    raise WorkbenchError with a one-line message.
    """
    if attn is not None:
        check_attn(attn)
    if experts_implementation is not None:
        check_experts(experts_implementation)
    if model in PRESETS:
        p = PRESETS[model]
        config = _config_class(p.family)(**copy.deepcopy(p.config))
    elif is_checkpoint_path(model):
        check_checkpoint(model)
        from transformers import AutoConfig
        try:
            config = AutoConfig.from_pretrained(model, local_files_only=True)
        except (OSError, ValueError, TypeError, KeyError) as e:
            raise WorkbenchError(f"cannot load the config of checkpoint {model}: {_one_line(e)}; fix or re-save its "
                                 "config.json") from None
    else:
        raise WorkbenchError(f"unknown model preset {model!r}; presets: {', '.join(PRESETS)} (or a checkpoint dir)")
    fam = family_of(config)
    if layers is not None:
        if layers <= 0:
            raise WorkbenchError(f"--layers must be positive, got {layers}")
        full = config.num_hidden_layers
        types = getattr(config, "layer_types", None)
        config.num_hidden_layers = layers
        if types is not None:  # keep the published pattern (GPT-OSS alternates sliding / full)
            config.layer_types = [types[i % len(types)] for i in range(layers)] if layers > full else list(types[:layers])
    config.use_cache = False
    config._attn_implementation = attn or FAMILY_DEFAULT_ATTN[fam]
    if fam in MOE_FAMILIES and experts_implementation is not None:
        _ensure_experts_registered(experts_implementation)
        config._experts_implementation = experts_implementation
    return config


def family_of(config) -> str:
    for fam, mt in _MODEL_TYPES.items():
        if config.model_type == mt:
            return fam
    raise WorkbenchError(f"unsupported model type {config.model_type!r}; supported: {', '.join(_MODEL_TYPES)}")


def build_model(model: str, *, layers: int | None = None, attn: str | None = None, device: str | torch.device = "cpu",
                dtype: torch.dtype | None = None, seed: int = 0, lora_rank: int = 16, lora: bool = True,
                experts_implementation: str | None = None, precision: str = "auto"):
    """Build a causal LM (random seeded weights for a preset, or a local checkpoint), with LoRA via peft.

    `precision` (workbench.step.precision_mode: autocast | bf16 | fp32-adapters, as a run's `StepConfig.resolved` gives it;
    `auto` resolves for `device`, for a caller outside a run) picks the base dtype when `dtype` is None
    (`precision.model_dtype`) and the adapters' dtype; it is not stored on the model: pass the same precision to
    `harness.train_step`. Returns the (peft-wrapped) model in train
    mode, base frozen, on `device`.
    """
    from transformers import AutoModelForCausalLM

    from workbench.step import precision_mode as prec

    device = torch.device(device)
    dtype = dtype or prec.model_dtype(precision, device)
    config = load_config(model, layers, attn, experts_implementation)
    torch.manual_seed(seed)
    try:
        if model in PRESETS:
            with torch.device(device):
                m = AutoModelForCausalLM.from_config(config, dtype=dtype)
        else:
            try:
                m = AutoModelForCausalLM.from_pretrained(model, config=config, dtype=dtype, local_files_only=True)
            except _weight_errors() as e:
                raise WorkbenchError(f"cannot load the weights of checkpoint {model}: {_one_line(e)}; re-download or "
                                     "re-save the checkpoint") from None
            m = m.to(device)
    except ImportError as e:  # e.g. flash_attention_2 asked for without the flash-attn package
        raise WorkbenchError(f"{_one_line(e)}; install it, or choose another attention implementation "
                             f"({', '.join(ATTN_CHOICES[:3])})") from None
    m.config.use_cache = False
    if lora:
        m = add_lora(m, rank=lora_rank, seed=seed, precision=precision)
    m.train()
    return m


def _weight_errors() -> tuple[type[BaseException], ...]:
    """Exceptions of reading a damaged or mismatched checkpoint (truncated safetensors, wrong shapes, bad pickle)."""
    errs: list[type[BaseException]] = [OSError, ValueError, RuntimeError, EOFError]
    try:
        from safetensors import SafetensorError
        errs.append(SafetensorError)
    except ImportError:
        pass
    return tuple(errs)


def lora_config(model, rank: int = 16):
    """The peft LoraConfig the workbench uses: rank r, alpha 2r, no dropout, on the attention/MLP linears present
    (and the fused expert parameters of MoE families)."""
    from peft import LoraConfig

    if rank <= 0:
        raise WorkbenchError(f"LoRA rank must be positive, got {rank}")
    fam = family_of(model.config)
    names = {n.rsplit(".", 1)[-1] for n, _ in model.named_modules()}
    kwargs = dict(r=rank, lora_alpha=2 * rank, lora_dropout=0.0,
                  target_modules=[t for t in LORA_TARGET_MODULES if t in names])
    if fam in MOE_FAMILIES:
        kwargs["target_parameters"] = LORA_TARGET_EXPERT_PARAMETERS
    return LoraConfig(**kwargs)


def add_lora(model, rank: int = 16, seed: int = 0, precision: str = "fp32-adapters"):
    """peft LoRA on the attention/MLP linears (and fused experts); everything else frozen.

    `precision` (resolved; workbench.step.precision_mode) sets the adapters' dtype: fp32 (peft's `autocast_adapter_dtype`)
    for autocast, fp32-adapters (and auto, which resolves to one of them), the base dtype for bf16. Nothing is
    recorded on the model: the step is passed its precision (`harness.train_step`)."""
    from peft import get_peft_model

    from workbench.step import precision_mode as prec

    config = lora_config(model, rank)
    torch.manual_seed(seed + 1)
    with warnings.catch_warnings():  # peft's own getattr(model, "is_gradient_checkpointing"), once per build: not ours
        warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        pm = get_peft_model(model, config, **prec.lora_kwargs(precision))
    # LoRA B starts at zero in peft; give it small random values so LoRA gradients flow through every path
    # and A/B equivalence checks compare non-trivial gradients.
    g = torch.Generator(device="cpu").manual_seed(seed + 2)
    with torch.no_grad():
        for n, p in pm.named_parameters():
            if p.requires_grad and "lora_B" in n:
                p.copy_((torch.randn(p.shape, generator=g) * 1e-3).to(p.dtype))
    return pm


def lora_parameters(model) -> list[tuple[str, torch.nn.Parameter]]:
    return [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def lora_resetter(model):
    """Snapshot the trainable (LoRA) weights now; returns `reset()`, which copies them back and clears their grads:
    every arm (and Trainer, in `workbench.fidelity`) starts from the same weights."""
    init = {n: p.detach().clone() for n, p in lora_parameters(model)}

    def reset():
        with torch.no_grad():
            for n, p in lora_parameters(model):
                p.copy_(init[n])
                p.grad = None
    return reset


def base_model_of(model):
    """The HF *ForCausalLM under a peft wrapper (or the model itself)."""
    get = getattr(model, "get_base_model", None)
    return get() if get is not None else model


def model_inputs(model, batch) -> dict:
    """Keyword arguments of `model(...)` for a packed batch: ids, positions, labels, `use_cache=False`.

    GPT-OSS's forward never passes `position_ids` to its mask builders, so packed documents would see each other
    (transformers 5.17 and 5.23); for it the masks are built here from `position_ids` and passed as a dict.
    """
    kw = dict(input_ids=batch.input_ids, position_ids=batch.position_ids, labels=batch.labels, use_cache=False)
    base = base_model_of(model)
    if family_of(base.config) == "gpt_oss":
        kw["attention_mask"] = gpt_oss_packed_masks(base, batch.position_ids)
    return kw


def gpt_oss_packed_masks(hf_model, position_ids: torch.Tensor) -> dict:
    from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask

    T = position_ids.shape[1]
    dtype = next(hf_model.parameters()).dtype
    # only shape, dtype and device of the embeddings are read by the mask builders
    probe = torch.empty((1, T, 1), dtype=dtype, device=position_ids.device)
    # config, embeddings, attention mask, cache: positional, as the fourth is `past_key_values` in older 5.x and
    # `cache` in 5.24 (where the old keyword warns; it goes in 5.40)
    args = (hf_model.config, probe, None, None)
    return {"full_attention": create_causal_mask(*args, position_ids=position_ids),
            "sliding_attention": create_sliding_window_causal_mask(*args, position_ids=position_ids)}
