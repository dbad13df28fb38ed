"""Memory planning before launch: weights, KV cache per token, and how many sequences fit.

Weight bytes come from safetensors headers (no tensor is loaded) or, when only config.json is
present, from a parameter count computed from the config. The KV budget follows vLLM's own
arithmetic: total x gpu_memory_utilization - weights - activation peak. vLLM measures the
activation peak by a profiling run; this module estimates it (documented below), so the plan
keeps a margin rather than promising the last block.
"""

import json
import math
import struct
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from harness.errors import HarnessError
from harness.server.checkpoint import _text_config, context_length_of, dtype_of

GiB = 2**30
# Usable memory as NVML reports it for the common 80 GB / 141 GB parts.
GPU_PRESETS: dict[str, int] = {"h100": 81559 * 2**20, "h200": 143771 * 2**20, "a100": 81920 * 2**20}
DTYPE_BYTES = {
    "float32": 4,
    "float": 4,
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "F64": 8,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U8": 1,
    "BOOL": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
}
# vLLM on CUDA: non-torch memory (CUDA context, cuBLAS/NCCL workspaces) and CUDA graphs.
_FIXED_OVERHEAD = int(1.5 * GiB)
_DEFAULT_BATCHED_TOKENS = 8192
_MAX_NUM_SEQS_CAP = 256
# No single accelerator comes near this; a larger --gpu is a typo (1e30) or a unit mix-up.
_MAX_GPU_GIB = 4096
# Shape fields the plan multiplies; each must be a positive whole number when present.
_SHAPE_KEYS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "intermediate_size",
    "moe_intermediate_size",
    "num_experts",
    "num_local_experts",
    "shared_expert_intermediate_size",
)
# Above this a "size" is no real model (the largest published ones are ~1e5 wide).
_MAX_SHAPE = 2**31


def check_shapes(config: dict[str, Any], source: str = "config.json") -> None:
    """Refuse shape fields that are zero, negative, fractional, infinite or absurd, naming the field.

    Without this a 0-layer config divides by zero and a negative width plans a negative KV cache.
    Zero is allowed only where it means "none" (expert counts, a shared expert's width).
    """
    c = _text_config(config)
    may_be_zero = {"num_experts", "num_local_experts", "shared_expert_intermediate_size"}
    for key in _SHAPE_KEYS:
        value = c.get(key)
        if value is None:
            continue
        whole = isinstance(value, int) and not isinstance(value, bool)
        if not whole or value > _MAX_SHAPE or value < 0 or (value == 0 and key not in may_be_zero):
            raise HarnessError(
                f"{source}: {key} = {value!r} is not a positive whole number; fix the checkpoint's config"
            )


class MemoryPlan(BaseModel):
    """A memory plan for serving one checkpoint on one device."""

    model_config = ConfigDict(frozen=True)

    device: str = Field(description="h100, h200, a GiB figure, a detected GPU name, or cpu")
    total_bytes: int
    gpu_memory_utilization: float
    param_count: int
    weight_bytes: int
    weight_source: str = Field(description="'safetensors headers' or 'config.json parameter count'")
    kv_bytes_per_token: int
    activation_bytes: int = Field(description="estimated activation peak (vLLM profiles it at start)")
    kv_budget_bytes: int
    context_length: int = Field(description="the model's own maximum context")
    max_model_len: int = Field(description="the context length planned for")
    concurrency: int | None
    full_sequences: int = Field(description="how many max_model_len sequences the KV budget holds")
    recommended_max_model_len: int
    recommended_max_num_seqs: int
    fits: bool
    advice: str
    free_bytes: int | None = Field(
        None, description="Free memory of the detected GPU now (NVML); None for presets and the CPU"
    )
    held_by: str | None = Field(None, description="Who holds the detected GPU's memory, when someone does")

    @property
    def kv_tokens(self) -> int:
        return self.kv_budget_bytes // self.kv_bytes_per_token


_MAX_HEADER_BYTES = 100_000_000  # the safetensors format's own limit


def safetensors_weight_bytes(model_dir: Path) -> tuple[int, int] | None:
    """(bytes, parameters) summed over the safetensors headers in ``model_dir``; None if none."""
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        return None
    total_bytes = total_params = 0
    for f in files:
        try:
            with f.open("rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                if n > _MAX_HEADER_BYTES:  # read(n) would allocate n bytes first
                    raise ValueError(f"a header of {n} bytes, over the format's {_MAX_HEADER_BYTES}")
                header: dict[str, Any] = json.loads(fh.read(n))
            for name, info in header.items():
                if name == "__metadata__":
                    continue
                numel = 1
                for d in info["shape"]:
                    numel *= int(d)
                start, end = info["data_offsets"]
                total_bytes += int(end) - int(start)
                total_params += numel
        except (
            OSError,
            struct.error,
            ValueError,
            RecursionError,
            KeyError,
            TypeError,
            AttributeError,
        ) as exc:
            # ValueError: JSON and UTF-8 errors too; the others: a header that is not tensors
            raise HarnessError(f"{f}: unreadable safetensors header ({type(exc).__name__}: {exc})") from None
    return total_bytes, total_params


def param_count_from_config(config: dict[str, Any]) -> int:
    """Parameter count of a decoder-only transformer (Llama / Qwen / Mistral shapes, MoE aware)."""
    c = _text_config(config)
    try:
        hidden = int(c["hidden_size"])
        layers = int(c["num_hidden_layers"])
        heads = int(c["num_attention_heads"])
        vocab = int(c["vocab_size"])
        inter = int(c.get("intermediate_size") or 4 * hidden)
    except (KeyError, TypeError, ValueError) as exc:
        raise HarnessError(f"config.json lacks {exc} needed to count parameters") from None
    kv_heads = int(c.get("num_key_value_heads") or heads)
    head_dim = int(c.get("head_dim") or hidden // heads)
    qkv_bias = c.get("model_type") in ("qwen2", "qwen2_moe") or bool(c.get("attention_bias"))
    attn = hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim + heads * head_dim * hidden
    if qkv_bias:
        attn += heads * head_dim + 2 * kv_heads * head_dim
    experts = int(c.get("num_experts") or c.get("num_local_experts") or 0)
    if experts:
        moe_inter = int(c.get("moe_intermediate_size") or inter)
        mlp = experts * 3 * hidden * moe_inter + hidden * experts  # experts + router
        if shared := int(c.get("shared_expert_intermediate_size") or 0):
            mlp += 3 * hidden * shared + hidden  # shared expert + its gate
    else:
        mlp = 3 * hidden * inter
    per_layer = attn + mlp + 2 * hidden  # two RMSNorms
    embed = vocab * hidden
    lm_head = 0 if c.get("tie_word_embeddings") else vocab * hidden
    return embed + layers * per_layer + hidden + lm_head


def kv_bytes_per_token(config: dict[str, Any], kv_dtype_bytes: int | None = None) -> int:
    """2 (K and V) x layers x kv_heads x head_dim x dtype bytes."""
    c = _text_config(config)
    heads = int(c["num_attention_heads"])
    kv_heads = int(c.get("num_key_value_heads") or heads)
    head_dim = int(c.get("head_dim") or int(c["hidden_size"]) // heads)
    nbytes = kv_dtype_bytes or DTYPE_BYTES.get(dtype_of(config), 2)
    return 2 * int(c["num_hidden_layers"]) * kv_heads * head_dim * nbytes


def activation_estimate(config: dict[str, Any], batched_tokens: int = _DEFAULT_BATCHED_TOKENS) -> int:
    """Peak activation memory of vLLM's profiling run, estimated.

    One forward pass over ``batched_tokens`` tokens holds roughly the residual stream, the
    attention projections and the MLP's gate/up outputs of one layer at a time, plus the
    sampler's fp32 logits for up to 256 sequences, plus a fixed non-torch overhead.
    """
    c = _text_config(config)
    hidden = int(c["hidden_size"])
    inter = int(c.get("moe_intermediate_size") or c.get("intermediate_size") or 4 * hidden)
    nbytes = DTYPE_BYTES.get(dtype_of(config), 2)
    per_token = (4 * hidden + 2 * inter) * nbytes
    logits = _MAX_NUM_SEQS_CAP * int(c["vocab_size"]) * 4
    return batched_tokens * per_token + logits + _FIXED_OVERHEAD


def parse_device(gpu: str | None) -> tuple[str, int | None]:
    """'h100' / 'h200' / '80' (GiB) / 'cpu' / None (detect) -> (label, total bytes or None for cpu)."""
    from harness.server.gpu import gpu_info, selected_gpu_indices

    if gpu is None:
        indices = selected_gpu_indices()  # refuses a CUDA_VISIBLE_DEVICES that hides the GPUs
        info = gpu_info(indices[0]) if indices else None
        return (info.name, info.cuda_total_bytes) if info else ("cpu", None)  # vLLM plans on CUDA's
    key = gpu.strip().lower()
    if key == "cpu":
        return "cpu", None
    if key in GPU_PRESETS:
        return key, GPU_PRESETS[key]
    try:
        gib = float(key.removesuffix("gib").removesuffix("g"))
    except ValueError:
        raise HarnessError(
            f"--gpu {gpu}: expected h100, h200, a100, cpu or a size in GiB such as 80"
        ) from None
    if not math.isfinite(gib) or gib <= 0 or gib > _MAX_GPU_GIB:
        raise HarnessError(
            f"--gpu {gpu}: the size must be a number of GiB between 0 and {_MAX_GPU_GIB} (one device), such as 80"
        )
    return f"{gib:g} GiB", int(gib * GiB)


def _in_use() -> tuple[int | None, str | None]:
    """Free bytes of the detected GPU now, and who holds memory there (None when nobody does)."""
    from harness.server.gpu import gpu_info, selected_gpu_indices
    from harness.server.preflight import held_by

    indices = selected_gpu_indices()
    info = gpu_info(indices[0]) if indices else None
    if info is None:
        return None, None
    return info.free_bytes, (held_by(info) if info.processes else None)


def _round_down(n: int, to: int = 1024) -> int:
    return n // to * to if n >= to else n


def plan_memory(
    config: dict[str, Any],
    *,
    model_dir: Path | None = None,
    gpu: str | None = None,
    gpu_memory_utilization: float = 0.90,
    max_model_len: int | None = None,
    concurrency: int | None = None,
    cpu_kv_cache_gib: float = 2.0,
    adapter_bytes: int = 0,
) -> MemoryPlan:
    """Plan KV cache and sequence limits; ``fits`` is False when one full sequence cannot fit."""
    if not 0 < gpu_memory_utilization < 1:  # also False for NaN
        raise HarnessError(
            f"--gpu-memory-utilization {gpu_memory_utilization}: must be a fraction between 0 and 1, such as 0.9"
        )
    for flag, value in (("--max-model-len", max_model_len), ("--concurrency", concurrency)):
        if value is not None and value < 1:
            raise HarnessError(f"{flag} {value}: must be at least 1")
    check_shapes(config)
    device, total = parse_device(gpu)
    context = context_length_of(config)
    want_len = max_model_len or context
    if max_model_len and max_model_len > context:
        raise HarnessError(f"--max-model-len {max_model_len} exceeds the model's context length {context}")
    counted = safetensors_weight_bytes(model_dir) if model_dir else None
    if counted:
        weight_bytes, params = counted
        source = "safetensors headers"
    else:
        params = param_count_from_config(config)
        weight_bytes = params * DTYPE_BYTES.get(dtype_of(config), 2)
        source = "config.json parameter count"
    weight_bytes += adapter_bytes
    per_token = kv_bytes_per_token(config)

    if total is None:  # CPU: vLLM takes a fixed KV space (VLLM_CPU_KVCACHE_SPACE)
        activation = 0
        budget = int(cpu_kv_cache_gib * GiB)
        total_bytes = budget
    else:
        activation = activation_estimate(config, max(_DEFAULT_BATCHED_TOKENS, 0))
        budget = int(total * gpu_memory_utilization) - weight_bytes - activation
        total_bytes = total

    full = max(budget, 0) // (per_token * want_len)
    max_len_fit = _round_down(max(budget, 0) // per_token)
    fits = full >= 1
    if concurrency:
        rec_len = min(want_len, _round_down(max(budget, 0) // (per_token * concurrency)))
        rec_seqs = concurrency
    else:
        rec_len = min(want_len, max_len_fit)
        rec_seqs = max(1, min(_MAX_NUM_SEQS_CAP, full))

    if budget <= 0:
        fits = False
        need = weight_bytes + activation
        advice = (
            f"weights ({weight_bytes / GiB:.1f} GiB) and activations (~{activation / GiB:.1f} GiB) "
            f"leave no KV cache within {gpu_memory_utilization:.2f} x {total_bytes / GiB:.1f} GiB; "
            f"needs a device with more than {need / gpu_memory_utilization / GiB:.0f} GiB, or quantized weights"
        )
    elif not fits:
        need_util = (
            math.ceil((weight_bytes + activation + per_token * want_len) / total_bytes * 100) / 100
            if total
            else None
        )
        util_hint = f", or --gpu-memory-utilization {need_util:.2f}" if need_util and need_util < 0.99 else ""
        advice = (
            f"one {want_len}-token sequence needs {per_token * want_len / GiB:.1f} GiB of KV cache but only "
            f"{budget / GiB:.1f} GiB is left; would fit: --max-model-len {max_len_fit}{util_hint}"
        )
    elif concurrency and full < concurrency:
        advice = (
            f"{concurrency} concurrent full-length sequences need {concurrency * per_token * want_len / GiB:.1f} GiB; "
            f"only {full} fit: use --max-model-len {rec_len} or --concurrency {full} (vLLM would preempt otherwise)"
        )
    else:
        advice = f"{full} full-length sequences of {want_len} tokens fit in the KV budget"

    free, held = _in_use() if gpu is None and total is not None else (None, None)
    return MemoryPlan(
        free_bytes=free,
        held_by=held,
        device=device,
        total_bytes=total_bytes,
        gpu_memory_utilization=gpu_memory_utilization,
        param_count=params,
        weight_bytes=weight_bytes,
        weight_source=source,
        kv_bytes_per_token=per_token,
        activation_bytes=activation,
        kv_budget_bytes=budget,
        context_length=context,
        max_model_len=want_len,
        concurrency=concurrency,
        full_sequences=int(full),
        recommended_max_model_len=int(rec_len),
        recommended_max_num_seqs=int(rec_seqs),
        fits=fits,
        advice=advice,
    )
