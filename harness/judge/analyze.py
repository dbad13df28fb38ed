"""`harness analyze RUN --judge CKPT|URL`: a judge model puts each failed episode of a run in a
rubric's class, beside the harness's deterministic cause; ``--labels`` measures how far it agrees
with human labels, so that no one trusts a judge nobody checked.

The judge is served on demand like ``eval`` (a checkpoint: a vLLM server for the judging, stopped
after it) or is an endpoint (a URL). Each answer must be a JSON object naming a class of the rubric;
a bad one is asked again once, saying what was wrong, then recorded as unjudged.
"""

import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict

from harness.errors import HarnessError
from harness.judge.answer import answer_format, parse_answer
from harness.judge.config import AnalyzeConfig
from harness.judge.digest import digest
from harness.judge.labels import Agreement, agreement, load_labels
from harness.judge.rubric import Rubric, load_rubric
from harness.progress import console, progress_bar
from harness.results.episode_view import episode_id
from harness.results.failures import failure_of
from harness.results.runs import RunData, load_run, read_manifest
from harness.results.store import EpisodeRecord

JUDGMENTS = "analysis/judgments.jsonl"
ANSWER_TOKENS = 200


class Judgment(BaseModel):
    model_config = ConfigDict(frozen=True)

    episode: str
    model: str
    task_id: str
    seed: int
    cause: str | None  # the harness's deterministic cause
    status: Literal["judged", "unjudged"]
    label: str | None = None
    reason: str = ""
    attempts: int = 0
    problem: str = ""  # why it is unjudged: the last answer's fault, or the endpoint's error
    raw: str = ""  # the last answer as the judge wrote it (clipped)


class Analysis(BaseModel):
    model_config = ConfigDict(frozen=True)

    rubric: str
    judge: str
    judgments: list[Judgment]
    agreement: Agreement | None = None
    path: Path


class _Endpoint(BaseModel):
    url: str
    key: str
    model: str


def _is_url(judge: str) -> bool:
    return urlsplit(judge).scheme in ("http", "https")


def _endpoint_model(url: str, key: str) -> str:
    import openai

    try:
        listed = openai.OpenAI(base_url=url, api_key=key, max_retries=2, timeout=30).models.list()
    except openai.OpenAIError as exc:
        raise HarnessError(f"--judge {url}: cannot list its models ({type(exc).__name__}: {exc})") from None
    names = [m.id for m in listed.data]
    if not names:
        raise HarnessError(f"--judge {url}: it serves no model")
    return names[0]


def _ask(endpoint: _Endpoint, rubric: Rubric) -> Callable[[str], tuple[str, str | None, str, int]]:
    """A function from an episode's digest to (raw answer, label or None, reason or the fault),
    asking once more when the first answer is not valid."""
    import openai
    from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_exponential

    client = openai.OpenAI(base_url=endpoint.url, api_key=endpoint.key, max_retries=0, timeout=300)
    classes = "\n".join(f"- {c.name}: {c.description}" for c in rubric.classes)
    system = (
        f"{rubric.instructions.strip()}\n\nThe classes:\n{classes}\n\n"
        f"Answer with only this JSON object: {answer_format(rubric)}"
    )
    # the endpoint's own trouble (refused, reset, overloaded) is tried again; a bad answer is not
    transient = (
        openai.APIConnectionError,
        openai.APITimeoutError,
        openai.InternalServerError,
        openai.RateLimitError,
    )

    @retry(
        retry=retry_if_exception_type(transient),
        stop=stop_after_attempt(3),
        wait=wait_exponential(multiplier=1, max=10),
        reraise=True,
    )
    def complete(messages: list[dict[str, str]]) -> str:
        reply = client.chat.completions.create(
            model=endpoint.model,
            messages=messages,  # type: ignore[arg-type]
            temperature=0,
            max_tokens=ANSWER_TOKENS,
        )
        return reply.choices[0].message.content or ""

    def ask(text: str) -> tuple[str, str | None, str, int]:
        messages = [{"role": "system", "content": system}, {"role": "user", "content": text}]
        raw, fault = "", ""
        for attempt in (1, 2):
            raw = complete(messages)
            try:
                answer = parse_answer(raw, rubric)
            except ValueError as exc:
                fault = f"the answer is not valid: {exc}"
                messages += [
                    {"role": "assistant", "content": raw},
                    {
                        "role": "user",
                        "content": f"That answer is not valid: {exc}. Answer with only the JSON object "
                        f"{answer_format(rubric)}",
                    },
                ]
                continue
            return raw, answer.label, answer.reason, attempt
        return raw, None, fault, 2

    return ask


def _instructions(run: RunData) -> dict[str, str]:
    """Each task's instruction, from the suite the run was made on (none where it is gone)."""
    from harness.tasks.loader import load_tasks

    source = run.manifest.get("tasks_source") or run.manifest.get("suite") or ""
    if not source:
        return {}
    try:
        return {t.id: t.instruction for t in load_tasks(str(source), skip_unsupported=True)}
    except (HarnessError, OSError):
        console.print(
            f"[yellow]note:[/] the run's tasks ({source}) cannot be read: the judge works without instructions"
        )
        return {}


def _judge_one(
    ask: Callable[[str], tuple[str, str | None, str, int]], root: Path, rec: EpisodeRecord, instruction: str
) -> Judgment:
    import openai

    failure = failure_of(rec)
    base: dict[str, Any] = {
        "episode": episode_id(rec),
        "model": rec.model,
        "task_id": rec.task_id,
        "seed": rec.seed,
        "cause": failure.cause if failure else None,
    }
    try:
        raw, label, reason, attempts = ask(digest(root, rec, instruction))
    except openai.OpenAIError as exc:
        return Judgment(**base, status="unjudged", problem=f"{type(exc).__name__}: {exc}"[:300])
    if label is None:
        return Judgment(**base, status="unjudged", attempts=attempts, problem=reason, raw=raw[:2000])
    return Judgment(**base, status="judged", label=label, reason=reason, attempts=attempts, raw=raw[:2000])


def analyze(run_dir: Path, config: AnalyzeConfig) -> Analysis:
    """Judge every failed episode of the run at ``run_dir``; write RUN/analysis/judgments.jsonl."""
    read_manifest(run_dir)  # one line for what is wrong with it
    rubric = load_rubric(config.rubric)
    labels = load_labels(config.labels) if config.labels else None
    run = load_run(run_dir)
    failed = [r for r in run.records() if failure_of(r) is not None]
    if not failed:
        raise HarnessError(f"{run.root}: no failed episode to judge (every scored episode was resolved)")
    instructions = _instructions(run)
    with ExitStack() as stack:
        endpoint = _open_judge(config, run.root, stack)
        ask = _ask(endpoint, rubric)
        done: list[Judgment] = []
        lock = threading.Lock()
        with progress_bar(f"judging {len(failed)} failed episodes", len(failed)) as bar:

            def one(rec: EpisodeRecord) -> Judgment:
                j = _judge_one(ask, run.root, rec, instructions.get(rec.task_id, ""))
                with lock:
                    bar.advance()
                return j

            with ThreadPoolExecutor(max_workers=config.concurrency) as pool:
                done = list(pool.map(one, failed))
    path = run.root / JUDGMENTS
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(j.model_dump_json() + "\n" for j in done))
    measured = None
    if labels is not None:
        judged = {j.episode: j.label for j in done if j.label is not None}
        pairs = [(label, judged[ep]) for ep, label in labels.items() if ep in judged]
        measured = agreement(pairs, sorted(ep for ep in labels if ep not in judged))
    return Analysis(rubric=rubric.name, judge=config.judge, judgments=done, agreement=measured, path=path)


def _open_judge(config: AnalyzeConfig, root: Path, stack: ExitStack) -> _Endpoint:
    """The judge's endpoint: the URL given, or a vLLM server for the checkpoint (stopped with ``stack``)."""
    if _is_url(config.judge):
        url = config.judge.rstrip("/")
        parts = urlsplit(url)
        if parts.query or parts.fragment or not parts.path.endswith("/v1"):
            raise HarnessError(
                f"--judge {config.judge}: an endpoint's base URL ends in /v1 and has no query "
                "(e.g. http://127.0.0.1:8000/v1)"
            )
        key = config.api_key or "EMPTY"
        return _Endpoint(url=url, key=key, model=config.judge_model or _endpoint_model(url, key))
    from harness.server import build_config
    from harness.server.factory import vllm_server

    server = stack.enter_context(vllm_server(build_config(model=config.judge), run_dir=root / "analysis"))
    assert server.checkpoint is not None
    return _Endpoint(url=f"{server.base_url}/v1", key=server.api_key, model=server.checkpoint.request_model)


def judgments_file(run_dir: Path) -> list[Judgment]:
    """The judgments a previous `harness analyze` wrote (none: an empty list)."""
    path = run_dir / JUDGMENTS
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(Judgment.model_validate(json.loads(line)))
        except (json.JSONDecodeError, ValueError):
            continue
    return out
