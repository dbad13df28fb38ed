"""Replicas x tensor parallelism for a model on N GPUs over M nodes (`harness plan --gpus`).

More replicas serve more episodes at once; tensor parallelism is only for a model that does not
fit one GPU (it splits the weights and the KV cache, and costs GPU-to-GPU traffic on every
token). So the plan takes the smallest tensor-parallel size that fits a node (a power of two
that divides the attention heads, as vLLM requires) and fills every node with replicas of it.

The KV cache of a replica is computed once, in memory.replica_kv (vLLM's arithmetic, per GPU):
    KV budget per GPU = total x utilization - weights / t - activation peak
and each GPU holds its kv_heads / t share of every token, so the replica holds
    budget per GPU // (KV bytes per token / t)   tokens (budget x t over bytes per token)
(not t times that: the t GPUs hold the same tokens, each a slice of their heads).
"""

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from harness.errors import HarnessError
from harness.server.checkpoint import context_length_of
from harness.server.config import GPU_MEMORY_UTILIZATION
from harness.server.memory import (
    _MAX_NUM_SEQS_CAP,
    NODE_GPUS,
    GiB,
    ReplicaKV,
    check_shapes,
    model_weights,
    parse_device,
    replica_kv,
    tensor_parallel_sizes,
    what_fits,
)


class ReplicaPlan(BaseModel):
    """How to serve one model on ``gpus`` GPUs spread evenly over ``nodes`` nodes."""

    model_config = ConfigDict(frozen=True)

    device: str
    gpus: int
    nodes: int
    gpus_per_node: int
    tensor_parallel: int = Field(description="GPUs per replica (vLLM --tensor-parallel-size)")
    replicas: int = Field(description="replicas on the whole cluster (per node x nodes)")
    replicas_per_node: int
    gpu_memory_utilization: float
    weight_bytes: int
    weight_bytes_per_gpu: int = Field(description="weights / tensor_parallel")
    activation_bytes: int = Field(description="estimated activation peak per GPU")
    kv_budget_per_gpu_bytes: int = Field(description="total x utilization - weights / TP - activations")
    kv_bytes_per_token_replica: int = Field(description="KV bytes of one token over the replica's GPUs")
    kv_tokens_per_replica: int = Field(description="per-GPU budget x TP // bytes per token per replica")
    max_model_len: int
    sequences_per_replica: int = Field(description="full-length sequences one replica holds at once")
    expected_concurrency: int = Field(description="episodes in flight on the cluster: replicas x sequences")
    idle_gpus: int = Field(description="GPUs of a node left over by the replicas")
    fits: bool
    advice: str


def plan_replicas(
    config: dict[str, Any],
    *,
    gpus: int,
    nodes: int = 1,
    model_dir: Path | None = None,
    gpu: str | None = None,
    gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION,
    max_model_len: int | None = None,
) -> ReplicaPlan:
    """The smallest tensor-parallel size that fits a node, and as many replicas as the GPUs allow;
    ``fits`` is False (the reason in ``advice``) when the model fits no node even across all of its GPUs."""
    if gpus < 1 or nodes < 1:
        raise HarnessError(f"--gpus {gpus} --nodes {nodes}: both must be at least 1")
    if gpus % nodes:
        raise HarnessError(
            f"--gpus {gpus} over --nodes {nodes}: give a multiple of the nodes (the same GPUs on every node)"
        )
    if not 0 < gpu_memory_utilization < 1:
        raise HarnessError(
            f"--gpu-memory-utilization {gpu_memory_utilization}: must be a fraction between 0 and 1, such as 0.9"
        )
    check_shapes(config)
    device, total = parse_device(gpu)
    if total is None:
        raise HarnessError(
            "--gpus plans GPUs: give --gpu h100, h200, a100 or a size in GiB (or run it on a GPU node)"
        )
    per_node = gpus // nodes
    context = context_length_of(config)
    want_len = max_model_len or context
    if want_len > context:
        raise HarnessError(f"--max-model-len {want_len} exceeds the model's context length {context}")
    weights = model_weights(config, model_dir)[0]

    on_gpu: int = total  # narrowed for the closure

    def kv(t: int) -> ReplicaKV:
        return replica_kv(
            config,
            total=on_gpu,
            weight_bytes=weights,
            gpu_memory_utilization=gpu_memory_utilization,
            tensor_parallel=t,
        )

    sizes = tensor_parallel_sizes(config, per_node)
    chosen = next((t for t in sizes if kv(t).tokens >= want_len), None)
    if chosen is None:
        t = sizes[-1]
        biggest = kv(t)
        fit = what_fits(
            config,
            biggest,
            total=total,
            weight_bytes=weights,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=want_len,
            up_to=per_node,
        )
        need = (
            biggest.weight_bytes_per_gpu
            + biggest.activation_bytes
            + want_len * biggest.bytes_per_token_per_gpu
        )
        hints = []
        if fit.tensor_parallel:
            gpus_for = fit.tensor_parallel * nodes
            hints.append(
                f"nodes of {fit.tensor_parallel} GPUs (--gpus {gpus_for}"
                + (f" --nodes {nodes}" if nodes > 1 else "")
                + f": tensor parallel {fit.tensor_parallel})"
            )
        if fit.max_model_len:
            hints.append(f"--max-model-len {fit.max_model_len}")
        if fit.gpu_memory_utilization:
            hints.append(f"--gpu-memory-utilization {fit.gpu_memory_utilization:.2f}")
        if not fit.tensor_parallel:
            hints.append(
                f"no node of up to {max(per_node, NODE_GPUS)} such GPUs holds it: larger GPUs or quantized weights"
            )
        advice = (
            f"does not fit one node: weights ({weights / GiB:.1f} GiB) split over its {t} GPU(s) "
            f"(tensor parallel {t}), the activations (~{biggest.activation_bytes / GiB:.1f} GiB per GPU) and one "
            f"{want_len}-token sequence need {need / GiB:.1f} GiB per GPU, more than "
            f"{gpu_memory_utilization:.2f} x {total / GiB:.1f} GiB; would fit: " + ", or ".join(hints)
        )
        return ReplicaPlan(
            device=device,
            gpus=gpus,
            nodes=nodes,
            gpus_per_node=per_node,
            tensor_parallel=t,
            replicas=0,
            replicas_per_node=0,
            gpu_memory_utilization=gpu_memory_utilization,
            weight_bytes=weights,
            weight_bytes_per_gpu=biggest.weight_bytes_per_gpu,
            activation_bytes=biggest.activation_bytes,
            kv_budget_per_gpu_bytes=biggest.budget_per_gpu,
            kv_bytes_per_token_replica=biggest.bytes_per_token_per_gpu * t,
            kv_tokens_per_replica=biggest.tokens,
            max_model_len=want_len,
            sequences_per_replica=0,
            expected_concurrency=0,
            idle_gpus=per_node,
            fits=False,
            advice=advice,
        )
    plan = kv(chosen)
    seqs = min(_MAX_NUM_SEQS_CAP, plan.tokens // want_len)
    per_node_replicas = per_node // chosen
    replicas = per_node_replicas * nodes
    why = "fits one GPU" if chosen == 1 else f"the model fits no fewer than {chosen} GPUs"
    advice = (
        f"{replicas} replica(s) x tensor parallel {chosen} ({why}): {seqs} full-length sequences of "
        f"{want_len} tokens each, {replicas * seqs} episodes in flight on the cluster"
    )
    return ReplicaPlan(
        device=device,
        gpus=gpus,
        nodes=nodes,
        gpus_per_node=per_node,
        tensor_parallel=chosen,
        replicas=replicas,
        replicas_per_node=per_node_replicas,
        gpu_memory_utilization=gpu_memory_utilization,
        weight_bytes=weights,
        weight_bytes_per_gpu=plan.weight_bytes_per_gpu,
        activation_bytes=plan.activation_bytes,
        kv_budget_per_gpu_bytes=plan.budget_per_gpu,
        kv_bytes_per_token_replica=plan.bytes_per_token_per_gpu * chosen,
        kv_tokens_per_replica=plan.tokens,
        max_model_len=want_len,
        sequences_per_replica=seqs,
        expected_concurrency=replicas * seqs,
        idle_gpus=per_node - per_node_replicas * chosen,
        fits=True,
        advice=advice,
    )
