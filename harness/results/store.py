"""The run store: one directory per run, append-only and resumable.

results/<run>/
  run.json                 what was asked (models, tasks, seeds, scaffold snapshot hash, sampling sent)
  episodes.jsonl           one EpisodeRecord per line, appended (and fsynced) when an episode ends;
                           verification appends the same key again with the reward: the last line
                           for a (model, task, seed) is authoritative
  trajectories/<model>/<task>/seed<N>.jsonl   Turn records
  episodes/<model>/<task>/seed<N>/            workspace, SDK conversation, raw completions,
                                              verifier.log (the tests' output, capped at 1 MiB)
  server.log
  harness.log              the OpenHands SDK's warnings and errors, each naming its episode
"""

import contextlib
import json
import os
import threading
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.errors import HarnessError
from harness.monitor import LoopFinding, StallFinding, TamperFinding, Turn
from harness.monitor.failure import Failure
from harness.paths import absolute
from harness.results.masking import mask_text
from harness.results.run_files import read_run_file, run_lines
from harness.results.run_lock import lock_run_dir
from harness.tasks.steps import StepResult

VERIFIER_LOG = "verifier.log"  # in an episode's directory

# infra_error: the infrastructure failed (server, connection, disk, container), retries ran out;
# not a score (left out of rates like an unverified episode), and the next eval reruns it.
Status = Literal["resolved", "unresolved", "loop_stopped", "max_iterations", "error", "infra_error"]


class EpisodeError(BaseModel):
    model_config = ConfigDict(frozen=True)

    type: str
    message: str


class EpisodeRecord(BaseModel):
    """One episode (DESIGN.md data contract), plus whether it has been verified yet."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    model: str = Field(description="The model, or MODEL@SCAFFOLD in a run of several scaffolds.")
    model_path: str
    scaffold: str | None = Field(
        None, description="The scaffold it ran under (None: a run before it was kept)."
    )
    task_id: str
    suite: str
    seed: int
    status: Status
    reward: float | None = Field(None, description="0..1 from the task's tests; None until verified.")
    turns: int
    tool_calls: int
    format_errors: dict[str, int]
    repairs: dict[str, int] = {}
    loop: LoopFinding | None
    stall: StallFinding | None = Field(
        None,
        description="Varied attempts that kept getting the same failure back: reported, never a loop "
        "(not in the loop rate, never stopped an episode).",
    )
    tamper: list[TamperFinding] = Field(
        [],
        description="The agent's calls that touched what grading relies on (tests, pytest's configuration, "
        "plugin metadata, bytecode, start-up hooks, reward and verifier paths, PATH shadows): evidence for "
        "the reader, never a score (harness/monitor/tamper.py).",
    )
    last_error: str = Field(
        "",
        description="The last error the agent saw: the telling line of the last observation that failed "
        '(harness/monitor/failure.py), "" when none did; part of its failure\'s signature.',
    )
    failure: Failure | None = Field(
        None,
        description="Why an unresolved episode failed: its cause and the particulars (the failing tests, "
        "the format error, the loop), by the precedence in harness/monitor/failure.py; set when it is "
        "verified, None for a resolved or unscored one.",
    )
    prompt_tokens: int
    completion_tokens: int
    wall_s: float
    llm_s: float
    error: EpisodeError | None
    trajectory: str
    resumed_turns: int = Field(
        0, description="Turns taken from the checkpoint of an interrupted attempt (not paid again)."
    )
    resume_note: str | None = Field(
        None, description="Why a checkpoint on disk was not used (the episode began again from turn 1)."
    )
    checkpoint_s: float = Field(0.0, description="Seconds its last attempt spent saving checkpoints.")
    retried: list[EpisodeError] = Field(
        [],
        description="Why each earlier attempt was retried (an infrastructure failure), oldest first: "
        "the retry starts afresh and its files replace the failed attempt's.",
    )
    verified: bool = False
    steps: list[StepResult] | None = Field(
        None,
        description="A Harbor multi-step task's steps as they ran, each verified after its agent: rewards, "
        "where its turns begin in the trajectory (the episode's reward comes from them: harness/tasks/steps.py).",
    )
    verify_mode: Literal["fresh", "shared"] | None = Field(
        None,
        description="Where the tests ran: a fresh sandbox with only the agent's files, or the agent's own "
        "(Harbor's shared mode, where the agent could have tampered); None until verified.",
    )

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.model, self.task_id, self.seed)


class RunManifest(BaseModel):
    """run.json: what a run asked for and what produced it (harness/provenance.py gathers it,
    harness/results/manifest.py reads and compares it). Written at the start, completed at the end;
    a resumed run must be the same experiment. Every field after ``sampling`` is absent from runs
    made before it was recorded: unknown there, never a difference."""

    model_config = ConfigDict(extra="allow")

    run_id: str
    tasks: list[str]
    suite: str
    tasks_source: str = ""
    models: list[str]
    seeds: list[int]
    scaffold: str
    scaffold_hash: str
    runtime: str = "local"
    # The sampling parameters every request of the run sends (temperature, top_p, max_output_tokens;
    # the seed is the episode's) and where they came from: a resumed run must send the same.
    sampling: dict[str, Any] | None = None
    manifest_version: int = 1
    started_at: str | None = None
    ended_at: str | None = None
    harness: dict[str, Any] | None = Field(None, description="version, git commit, dirty tree")
    packages: dict[str, str | None] | None = Field(None, description="versions of what changes results")
    model_info: dict[str, dict[str, Any]] | None = Field(
        None,
        description="per model: checkpoint fingerprint, served name, vLLM argv (no key), chat template, "
        "tool-call parser, the server environment's vLLM and torch",
    )
    scaffold_info: dict[str, dict[str, Any]] | None = Field(
        None, description="per scaffold: runner, tool schema hash, sampling sent"
    )
    limits: dict[str, Any] | None = None
    task_set: dict[str, Any] | None = Field(None, description="count and content hash")
    machine: dict[str, Any] | None = Field(None, description="CPUs, GPUs, driver, CUDA")
    invocations: list[dict[str, Any]] | None = Field(
        None, description="each eval on this directory: when, which harness, what a forced resume changed"
    )


def _server_envs(manifest: dict[str, Any]) -> dict[str, Any]:
    """Each model's server environment (vLLM, torch) as this invocation found it, read before any
    server starts: what an invocation ran under, whatever the run's first recorded."""
    envs = {
        name: {k: env.get(k) for k in ("vllm", "torch")}
        for name, info in (manifest.get("model_info") or {}).items()
        if isinstance(info, dict) and isinstance(env := info.get("server_env"), dict) and "vllm" in env
    }
    return {"server_env": envs} if envs else {}


class RunStore:
    def __init__(self, root: Path) -> None:
        self.root = absolute(root)  # episode directories are handed to shells that start elsewhere
        self.episodes_path = self.root / "episodes.jsonl"
        self._lock = threading.Lock()

    def init(self, manifest: RunManifest, *, force: bool = False) -> list[str]:
        """Create the run directory, or check that a resumed run is the same experiment; what a
        forced resume changed (``force``: differences in checkpoint, template, parser, the server's
        vLLM or torch, task content or sampling are recorded instead of refused; other tasks or
        another scaffold never are). Each invocation's entry keeps its servers' vLLM and torch.

        Also takes the directory's eval lock (held while this store lives): a second eval on the
        same directory is refused with the first one's PID; a read-only directory is one line.
        """
        self._run_lock = lock_run_dir(self.root)
        path = self.root / "run.json"
        new = manifest.model_dump(mode="json", exclude_none=True)
        invocation = {
            "started_at": new.get("started_at"),
            "harness_commit": (new.get("harness") or {}).get("commit"),
            **_server_envs(new),
        }
        if not path.exists():
            path.write_text(json.dumps({**new, "invocations": [invocation]}, indent=2))
            return []
        try:
            old: dict[str, Any] = json.loads(read_run_file(path))
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            raise HarnessError(f"{path}: not valid JSON ({exc}); use another --run-dir") from None
        for key in ("tasks", "scaffold", "scaffold_hash"):
            if old.get(key) != new.get(key):
                raise HarnessError(
                    f"{self.root}: this run was made with a different {key}; use another --run-dir to start a new run"
                )
        from harness.results.manifest import resume_conflicts

        changed = [str(d) for d in resume_conflicts(old, new)]
        if changed and not force:
            raise HarnessError(
                f"{self.root}: not the same experiment: {'; '.join(changed)}. Use another --run-dir to start "
                "a new run, or --force-resume to go on in this one anyway (run.json records what changed)"
            )
        if not force:
            _check_same_sampling(self.root, old.get("sampling"), new.get("sampling"))
        elif isinstance(old.get("sampling"), dict) and old.get("sampling") != new.get("sampling"):
            changed.append(f"sampling {old.get('sampling')} -> {new.get('sampling')}")
        merged = {
            # what a run made before a fact was recorded lacks is filled in; the rest stays the run's
            **{k: v for k, v in new.items() if k not in old},
            **old,
            # a run made before the full manifest: its facts are known from this resume on
            **({"facts_since": new.get("started_at")} if "harness" not in old else {}),
            **(
                {"sampling": new["sampling"]}
                if new.get("sampling") and (force or not old.get("sampling"))
                else {}
            ),
            "models": sorted(set(old.get("models", [])) | set(manifest.models)),
            "seeds": sorted(set(old.get("seeds", [])) | set(manifest.seeds)),
            "model_info": {
                **(old.get("model_info") or {}),
                **{
                    k: v
                    for k, v in (new.get("model_info") or {}).items()
                    if force or k not in (old.get("model_info") or {})
                },
            },
            "invocations": [
                *(old.get("invocations") or []),
                {**invocation, **({"forced": changed} if changed else {})},
            ],
        }
        path.write_text(json.dumps(merged, indent=2))
        return changed

    def complete_manifest(self, model_info: dict[str, dict[str, Any]], ended_at: str) -> None:
        """The end of an invocation: when, and what only a started server knows (its argv)."""
        path = self.root / "run.json"
        try:
            data: dict[str, Any] = json.loads(read_run_file(path))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError, RecursionError):
            return  # the start's record stays; nothing here is worth failing a finished run for
        known = data.get("model_info") or {}
        for name, facts in model_info.items():
            if name in known and facts.get("vllm_argv_launched"):
                known[name] = {
                    **known[name],
                    **{k: facts[k] for k in ("vllm_argv", "vllm_argv_launched", "vllm_env") if k in facts},
                }
        data["model_info"] = known
        data["ended_at"] = ended_at
        if data.get("invocations"):
            data["invocations"][-1]["ended_at"] = ended_at
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data, indent=2))
        os.replace(tmp, path)

    def append(self, record: EpisodeRecord) -> None:
        """Append one record and fsync: an interrupted machine loses no finished episode."""
        line = mask_text(record.model_dump_json()) + "\n"
        with self._lock, self.episodes_path.open("a+b") as fh:
            # A line torn by a kill or a full disk would swallow this record: start a new line.
            if fh.seek(0, os.SEEK_END):
                fh.seek(-1, os.SEEK_END)
                if fh.read(1) != b"\n":
                    line = "\n" + line
            fh.write(line.encode())
            fh.flush()
            os.fsync(fh.fileno())

    def records(self) -> dict[tuple[str, str, int], EpisodeRecord]:
        """The latest record per (model, task, seed); a torn last line (a kill mid-write) is ignored."""
        latest: dict[tuple[str, str, int], EpisodeRecord] = {}
        if not self.episodes_path.exists():
            return latest
        for _, line in run_lines(self.episodes_path):  # bounded: a planted file is an error, not OOM
            if line is None or not line.strip():
                continue
            try:
                rec = EpisodeRecord.model_validate_json(line)
            except ValidationError:
                continue
            latest[rec.key] = rec
        return latest

    def trajectory_path(self, model: str, task_id: str, seed: int) -> Path:
        return self.root / "trajectories" / _safe(model) / task_id / f"seed{seed}.jsonl"

    def episode_dir(self, model: str, task_id: str, seed: int) -> Path:
        return self.root / "episodes" / _safe(model) / task_id / f"seed{seed}"

    def write_verifier_log(self, model: str, task_id: str, seed: int, text: str) -> None:
        """The episode's verifier output as ``verifier.log`` in its directory (a link or anything else
        the agent may have left at that name is replaced, never written through)."""
        path = self.episode_dir(model, task_id, seed) / VERIFIER_LOG
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            path.unlink()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as fh:
            fh.write(text)

    def write_trajectory(self, path: Path, turns: list[Turn]) -> str:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(mask_text("".join(t.model_dump_json() + "\n" for t in turns)))
        return str(path.relative_to(self.root))


_SAMPLED = ("temperature", "top_p", "max_output_tokens")


def _check_same_sampling(root: Path, old: Any, new: Any) -> None:
    """Episodes sampled two ways in one run would be averaged as one experiment: refuse."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return  # a run made before sampling was recorded: it is recorded from now on
    for key in _SAMPLED:
        if old.get(key) != new.get(key):
            flag = "--temperature" if key == "temperature" else f"the scaffold's {key}"
            raise HarnessError(
                f"{root}: this run sampled with {key} {old.get(key)}, this command with {new.get(key)} "
                f"({flag}); use another --run-dir to start a new run"
            )


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
