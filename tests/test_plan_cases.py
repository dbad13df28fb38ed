"""`harness plan --gpus N [--nodes M]` against hand-computed plans (tests/data/plan_cases.toml holds
the arithmetic), and refusals that say what would fit and never recommend a 0."""

import json
import re
import tomllib
from typing import Any

import pytest

from harness.server.memory import plan_memory
from harness.server.replicas import plan_replicas
from tests.conftest import DATA, run_harness

CONFIGS = DATA / "configs"
CASES: list[dict[str, Any]] = tomllib.loads((DATA / "plan_cases.toml").read_text())["case"]
# "--max-model-len 0", "--concurrency 0", a table row ending in 0 for a recommendation
ZERO = re.compile(r"(--[a-z-]+ 0\b(?!\.))|(recommended[^\n]*?\b0\s*(│|\n))")


def _config(name: str) -> dict[str, Any]:
    return dict(json.loads((CONFIGS / name / "config.json").read_text()))


def _id(case: dict[str, Any]) -> str:
    nodes = f"x{case['nodes']}nodes" if case.get("nodes") else ""
    return f"{case['model'].removesuffix('-instruct')}-{case['gpu']}x{case['gpus']}{nodes}-{case['max_model_len']}"


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_replica_plan_matches_the_hand_computed_case(case: dict[str, Any]) -> None:
    plan = plan_replicas(
        _config(case["model"]),
        gpus=case["gpus"],
        nodes=case.get("nodes", 1),
        gpu=case["gpu"],
        max_model_len=case["max_model_len"],
    )
    assert plan.tensor_parallel == case["tensor_parallel"], plan.advice
    assert plan.kv_budget_per_gpu_bytes == case["kv_budget_per_gpu"]
    assert plan.kv_tokens_per_replica == case["kv_tokens"]
    if case.get("refused"):
        assert not plan.fits and plan.replicas == 0
        for hint in case["suggests"]:
            assert hint in plan.advice, (hint, plan.advice)
        assert not ZERO.search(plan.advice), plan.advice
    else:
        assert plan.fits, plan.advice
        assert (plan.replicas, plan.sequences_per_replica) == (case["replicas"], case["sequences"])
        assert plan.expected_concurrency == case["replicas"] * case["sequences"]


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_one_replica_plan_is_the_same_arithmetic(case: dict[str, Any]) -> None:
    """`harness serve` with --tensor-parallel-size t plans its one replica by the same numbers."""
    plan = plan_memory(
        _config(case["model"]),
        gpu=case["gpu"],
        max_model_len=case["max_model_len"],
        tensor_parallel=case["tensor_parallel"],
    )
    assert plan.kv_budget_per_gpu_bytes == case["kv_budget_per_gpu"]
    assert plan.kv_tokens == case["kv_tokens"]
    assert plan.fits == (not case.get("refused"))
    assert not ZERO.search(plan.advice), plan.advice


def test_70b_on_one_gpu_is_refused_with_the_gpus_that_fit_and_no_zero() -> None:
    for gpu, gpus in (("h100", "4"), ("h200", "2")):
        done = run_harness(
            "plan",
            "--model",
            str(CONFIGS / "llama-3.1-70b-instruct"),
            "--gpu",
            gpu,
            "--max-model-len",
            "32768",
        )
        text = " ".join(done.stdout.split())
        assert done.returncode == 2, done.stderr
        assert f"would fit: --gpus {gpus} (tensor parallel {gpus})" in text
        assert not ZERO.search(done.stdout), done.stdout
        as_json = run_harness(
            "plan", "--model", str(CONFIGS / "llama-3.1-70b-instruct"), "--gpu", gpu, "--json"
        )
        assert as_json.returncode == 2
        assert json.loads(as_json.stdout)["recommended_max_model_len"] is None
        assert f"--gpus {gpus}" in as_json.stderr and not ZERO.search(as_json.stderr)
        # ... and the suggestion is a plan that fits
        follow = run_harness(
            "plan",
            "--model",
            str(CONFIGS / "llama-3.1-70b-instruct"),
            "--gpu",
            gpu,
            "--gpus",
            gpus,
            "--max-model-len",
            "32768",
        )
        assert follow.returncode == 0, follow.stdout


def test_replica_refusal_names_the_node_size_and_the_context_that_fit() -> None:
    done = run_harness(
        "plan",
        "--model",
        str(CONFIGS / "llama-3.1-70b-instruct"),
        "--gpu",
        "h100",
        "--gpus",
        "4",
        "--nodes",
        "2",
        "--max-model-len",
        "32768",
    )
    text = " ".join(done.stdout.split())
    assert done.returncode == 2
    assert "nodes of 4 GPUs (--gpus 8 --nodes 2: tensor parallel 4)" in text
    assert "--max-model-len 19456" in text and not ZERO.search(done.stdout)


def test_concurrency_past_the_cache_suggests_fewer_sequences_never_a_zero_context() -> None:
    # 7B on an H100 holds 1,030,893 tokens (plan_cases.toml): 2,000,000 sequences leave each
    # less than one token, so only a smaller --concurrency can help.
    plan = plan_memory(_config("qwen2.5-7b-instruct"), gpu="h100", concurrency=2_000_000)
    assert "--concurrency 31" in plan.advice
    assert not ZERO.search(plan.advice), plan.advice
