"""Memory planning from config.json (and safetensors headers), checked against hand-computed values."""

import json
import struct
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.server.memory import (
    GPU_PRESETS,
    activation_estimate,
    kv_bytes_per_token,
    param_count_from_config,
    plan_memory,
    safetensors_weight_bytes,
)
from tests.conftest import DATA, run_harness

CONFIGS = DATA / "configs"


def cfg(name: str) -> dict:
    return json.loads((CONFIGS / name / "config.json").read_text())


@pytest.mark.parametrize(
    ("name", "kv_per_token", "params"),
    [
        # 2 x layers x kv_heads x head_dim x 2 bytes (bf16)
        ("qwen2.5-7b-instruct", 2 * 28 * 4 * 128 * 2, 7_615_616_512),  # 56 KiB
        ("llama-3.1-8b-instruct", 2 * 32 * 8 * 128 * 2, 8_030_261_248),  # 128 KiB
        ("qwen2.5-coder-32b-instruct", 2 * 64 * 8 * 128 * 2, 32_763_876_352),  # 256 KiB
    ],
)
def test_kv_bytes_and_parameter_count_match_published_figures(
    name: str, kv_per_token: int, params: int
) -> None:
    config = cfg(name)
    assert kv_bytes_per_token(config) == kv_per_token
    assert param_count_from_config(config) == params


def test_qwen25_7b_on_h100_numbers() -> None:
    config = cfg("qwen2.5-7b-instruct")
    plan = plan_memory(config, gpu="h100")
    assert plan.kv_bytes_per_token == 56 * 1024
    assert plan.weight_bytes == 7_615_616_512 * 2
    assert plan.weight_source == "config.json parameter count"
    expected_budget = int(GPU_PRESETS["h100"] * 0.90) - plan.weight_bytes - activation_estimate(config)
    assert plan.kv_budget_bytes == expected_budget
    assert plan.full_sequences == expected_budget // (56 * 1024 * 32768)
    assert plan.fits and plan.recommended_max_model_len == 32768


def test_concurrency_that_does_not_fit_recommends_a_shorter_context() -> None:
    plan = plan_memory(cfg("llama-3.1-8b-instruct"), gpu="h100", concurrency=8)
    assert plan.max_model_len == 131072 and plan.full_sequences == 3
    assert plan.recommended_max_num_seqs == 8
    per_seq = plan.kv_budget_bytes // (8 * 128 * 1024)
    assert plan.recommended_max_model_len == per_seq // 1024 * 1024
    assert "--concurrency 3" in plan.advice


def test_32b_full_context_on_h100_is_refused_with_what_fits() -> None:
    plan = plan_memory(cfg("qwen2.5-coder-32b-instruct"), gpu="h100")
    assert not plan.fits and plan.full_sequences == 0
    fit_tokens = plan.kv_budget_bytes // (256 * 1024) // 1024 * 1024
    assert f"--max-model-len {fit_tokens}" in plan.advice
    assert "--gpu-memory-utilization 0.91" in plan.advice
    smaller = plan_memory(cfg("qwen2.5-coder-32b-instruct"), gpu="h100", max_model_len=fit_tokens)
    assert smaller.fits


def test_weights_that_do_not_fit_at_all_are_refused() -> None:
    plan = plan_memory(cfg("qwen2.5-coder-32b-instruct"), gpu="40")
    assert not plan.fits and plan.kv_budget_bytes < 0
    assert "leave no KV cache" in plan.advice


def test_h200_holds_more_than_h100() -> None:
    a = plan_memory(cfg("qwen2.5-7b-instruct"), gpu="h100")
    b = plan_memory(cfg("qwen2.5-7b-instruct"), gpu="h200")
    assert b.full_sequences > a.full_sequences


def _write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> None:
    sizes = {"BF16": 2, "F32": 4}
    header, offset = {}, 0
    for name, (dtype, shape) in tensors.items():
        n = sizes[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)


def test_weight_bytes_come_from_safetensors_headers(tmp_path: Path) -> None:
    _write_safetensors(tmp_path / "model-00001.safetensors", {"a": ("BF16", [4, 8]), "b": ("F32", [3])})
    _write_safetensors(tmp_path / "model-00002.safetensors", {"c": ("BF16", [10])})
    assert safetensors_weight_bytes(tmp_path) == (4 * 8 * 2 + 3 * 4 + 10 * 2, 32 + 3 + 10)
    (tmp_path / "config.json").write_text((CONFIGS / "qwen2.5-7b-instruct" / "config.json").read_text())
    plan = plan_memory(cfg("qwen2.5-7b-instruct"), model_dir=tmp_path, gpu="h100")
    assert plan.weight_source == "safetensors headers" and plan.weight_bytes == 64 + 12 + 20


def test_bad_gpu_and_too_long_context_are_clear_errors() -> None:
    with pytest.raises(HarnessError, match="--gpu v100x"):
        plan_memory(cfg("qwen2.5-7b-instruct"), gpu="v100x")
    with pytest.raises(HarnessError, match="exceeds the model's context length 32768"):
        plan_memory(cfg("qwen2.5-7b-instruct"), gpu="h100", max_model_len=65536)


def test_plan_cli_json_and_refusal_exit_codes() -> None:
    ok = run_harness(
        "plan", "--model", str(CONFIGS / "qwen2.5-7b-instruct" / "config.json"), "--gpu", "h100", "--json"
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["kv_bytes_per_token"] == 57344
    refused = run_harness("plan", "--model", str(CONFIGS / "qwen2.5-coder-32b-instruct"), "--gpu", "h100")
    assert refused.returncode == 2
    assert "would fit: --max-model-len" in refused.stdout.replace("\n", " ")
    assert "Traceback" not in refused.stderr
