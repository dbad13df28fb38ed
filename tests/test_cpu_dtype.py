"""The served dtype: a 16-bit checkpoint on a CPU without 16-bit float instructions is served in
float32 (measured ~4x faster prefill on an AVX2 box), planned with twice the bytes, and launched
with --dtype; the user's dtype setting and GPUs are left alone."""

import json
from pathlib import Path

import pytest

from harness.server import cpu_dtype
from harness.server.checkpoint import Checkpoint
from harness.server.config import ServerConfig
from harness.server.cpu_dtype import served_dtype
from harness.server.launch import build_launch
from harness.server.memory import MemoryPlan, plan_memory
from tests.conftest import DATA

AVX2 = frozenset({"sse4_2", "avx", "avx2", "fma"})
SAPPHIRE_RAPIDS = AVX2 | {"avx512f", "avx512_bf16", "amx_bf16", "amx_tile"}
QWEN = json.loads((DATA / "configs" / "qwen2.5-7b-instruct" / "config.json").read_text())


@pytest.mark.parametrize(
    ("requested", "stored", "on_cpu", "flags", "served"),
    [
        (None, "bfloat16", True, AVX2, "float32"),  # emulated bf16: served in float32
        (None, "float16", True, AVX2, "float32"),
        (None, "bfloat16", True, SAPPHIRE_RAPIDS, "bfloat16"),  # native bf16 kept
        (None, "float16", True, AVX2 | {"asimdhp"}, "float16"),  # ARM half precision kept
        (None, "float32", True, AVX2, "float32"),
        (None, "bfloat16", False, AVX2, "bfloat16"),  # a GPU: the checkpoint's
        ("auto", "bfloat16", True, AVX2, "bfloat16"),  # the user asked for the checkpoint's
        ("half", "bfloat16", True, AVX2, "float16"),  # the user's, in vLLM's own name
    ],
)
def test_the_served_dtype(
    requested: str | None, stored: str, on_cpu: bool, flags: frozenset[str], served: str
) -> None:
    assert served_dtype(requested, stored, on_cpu=on_cpu, flags=flags)[0] == served


def test_this_machine_s_flags_are_read() -> None:
    flags = cpu_dtype.cpu_flags()
    if Path("/proc/cpuinfo").is_file():
        assert flags, "no CPU flags read from /proc/cpuinfo"


def test_a_cpu_plan_counts_float32_bytes_and_the_launch_asks_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cpu_dtype, "cpu_flags", lambda: AVX2)
    bf16 = plan_memory(QWEN, gpu="cpu", max_model_len=8192, dtype="bfloat16")
    fp32 = plan_memory(QWEN, gpu="cpu", max_model_len=8192)
    assert (bf16.dtype, fp32.dtype) == ("bfloat16", "float32")
    assert "no bfloat16 instructions" in fp32.dtype_source
    assert fp32.kv_bytes_per_token == 2 * bf16.kv_bytes_per_token
    assert fp32.weight_bytes == 2 * bf16.weight_bytes
    assert fp32.kv_tokens == bf16.kv_tokens // 2
    assert plan_memory(QWEN, gpu="h100", max_model_len=8192).dtype == "bfloat16"

    checkpoint = Checkpoint(
        path=Path("/models/qwen"),
        kind="full",
        base_path=Path("/models/qwen"),
        served_name="qwen",
        config=QWEN,
        dtype="bfloat16",
        architecture="Qwen2ForCausalLM",
        model_type="qwen2",
        family="qwen2.5",
        tool_call_parser="hermes",
        template_has_tools=True,
        context_length=32768,
    )

    def argv(plan: MemoryPlan) -> tuple[str, ...]:
        config = ServerConfig(model="/models/qwen")
        python = Path("/usr/bin/python3")
        return build_launch(
            python=python, checkpoint=checkpoint, config=config, plan=plan, port=1, on_cpu=True
        ).argv

    launched = argv(fp32)
    assert launched[launched.index("--dtype") + 1] == "float32"
    launched = argv(bf16)
    assert "--dtype" not in launched  # the checkpoint's own: vLLM's default


def test_an_unknown_dtype_setting_is_refused() -> None:
    with pytest.raises(ValueError, match="vLLM serves auto, bfloat16"):
        ServerConfig(model="m", dtype="bf16")
