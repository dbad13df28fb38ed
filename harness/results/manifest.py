"""A run's manifest (run.json) read for people and compared with another's.

Two uses of one comparison:
- resuming a run directory: what changes results (the task set, the scaffold, a model's checkpoint,
  chat template or tool-call parser, its server's vLLM and torch, the sampling) must be what the run
  was made with (its first invocation, or the last forced one), or the run
  would average two experiments as one (``resume_conflicts``);
- ``harness compare``: two runs are the same experiment only with the same task set, scaffold and
  chat template (refused otherwise unless forced); other differences (vLLM or torch version,
  sampling, limits, harness commit, packages) are listed as warnings (``compare_differences``).

A field one of the manifests lacks (a run made before it was recorded) is unknown, never a
difference.
"""

from dataclasses import dataclass
from typing import Any, Literal

Severity = Literal["refuse", "warn"]

# What a resumed run may not change (sampling has its own check in store.py, with its flag's name).
# The server's vLLM and torch: versions differ in scores by points (issue 26), so one run never mixes two.
RESUME_REFUSES = frozenset(
    {
        "task set",
        "scaffold",
        "checkpoint",
        "chat template",
        "tool-call parser",
        "vLLM version",
        "torch version",
    }
)
# What makes two runs another experiment for ``harness compare``.
COMPARE_REFUSES = frozenset({"task set", "scaffold", "chat template"})


@dataclass(frozen=True)
class Difference:
    what: str  # a category: "checkpoint", "chat template", "vLLM version", ...
    detail: str  # one clause: what it was and is

    def __str__(self) -> str:
        return self.detail


def _get(data: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def model_facts(manifest: dict[str, Any], label: str) -> dict[str, Any] | None:
    """run.json's record of the model a records' label names (MODEL or MODEL@SCAFFOLD)."""
    info = manifest.get("model_info")
    if not isinstance(info, dict):
        return None
    if label in info:
        return info[label] if isinstance(info[label], dict) else None
    model = label.rsplit("@", 1)[0]
    found = info.get(model)
    return found if isinstance(found, dict) else None


def _short(value: Any) -> str:
    text = str(value)
    return text[:12] if len(text) == 64 and all(c in "0123456789abcdef" for c in text) else text


def _model_differences(name: str, old: dict[str, Any], new: dict[str, Any]) -> list[Difference]:
    from harness.server.fingerprint import changed_files

    found: list[Difference] = []
    fa, fb = _get(old, "checkpoint", "fingerprint"), _get(new, "checkpoint", "fingerprint")
    if fa and fb and fa != fb:
        files = changed_files(old.get("checkpoint") or {}, new.get("checkpoint") or {})
        which = f"; changed: {', '.join(files[:4])}{' ...' if len(files) > 4 else ''}" if files else ""
        found.append(
            Difference(
                "checkpoint",
                f"the checkpoint behind {name} ({new.get('path') or old.get('path')}) changed: fingerprint "
                f"{fa} -> {fb}{which}",
            )
        )
    ta, tb = _get(old, "chat_template", "sha256"), _get(new, "chat_template", "sha256")
    if ta and tb and ta != tb:
        sa, sb = _get(old, "chat_template", "source"), _get(new, "chat_template", "source")
        found.append(
            Difference("chat template", f"{name}'s chat template: {sa} ({_short(ta)}) vs {sb} ({_short(tb)})")
        )
    pa, pb = old.get("tool_call_parser"), new.get("tool_call_parser")
    if pa and pb and pa != pb:
        found.append(Difference("tool-call parser", f"{name}'s tool-call parser: {pa} vs {pb}"))
    for package in ("vllm", "torch"):
        va, vb = _get(old, "server_env", package), _get(new, "server_env", package)
        if va and vb and va != vb:
            label = "vLLM" if package == "vllm" else package
            found.append(Difference(f"{label} version", f"{name}'s server: {label} {va} vs {vb}"))
    aa, ab = old.get("vllm_argv"), new.get("vllm_argv")
    if isinstance(aa, list) and isinstance(ab, list):
        only_a, only_b = _flags(aa) - _flags(ab), _flags(ab) - _flags(aa)
        if only_a or only_b:
            found.append(
                Difference(
                    "vLLM flags",
                    f"{name}'s vLLM flags: {' '.join(sorted(only_a)) or '-'} vs {' '.join(sorted(only_b)) or '-'}",
                )
            )
    return found


# Flags whose values differ between any two launches without changing what is served.
_VOLATILE = frozenset({"--port", "--model", "--lora-modules", "--chat-template", "--served-model-name"})


def _flags(argv: list[str]) -> set[str]:
    """A vLLM argv's flags with their values, less the interpreter and what names a place."""
    out: set[str] = set()
    i = 0
    args = [a for a in argv if isinstance(a, str)]
    while i < len(args):
        arg = args[i]
        if arg.startswith("--"):
            value = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else None
            if arg not in _VOLATILE:
                out.add(f"{arg} {value}" if value is not None else arg)
            i += 2 if value is not None else 1
        else:
            i += 1
    return out


def _run_differences(old: dict[str, Any], new: dict[str, Any]) -> list[Difference]:
    found: list[Difference] = []
    ha, hb = _get(old, "task_set", "hash"), _get(new, "task_set", "hash")
    if ha and hb and ha != hb:
        found.append(Difference("task set", f"task set content {ha} vs {hb}"))
    for key in ("scaffold", "scaffold_hash"):
        va, vb = old.get(key), new.get(key)
        if va and vb and va != vb:
            found.append(Difference("scaffold", f"{key} {va} vs {vb}"))
            break
    sa, sb = old.get("sampling"), new.get("sampling")
    if isinstance(sa, dict) and isinstance(sb, dict):
        for key in ("temperature", "top_p", "max_output_tokens"):
            if key in sa and key in sb and sa[key] != sb[key]:
                found.append(Difference("sampling", f"sampling {key} {sa[key]} vs {sb[key]}"))
    la, lb = old.get("limits"), new.get("limits")
    if isinstance(la, dict) and isinstance(lb, dict):
        for key in sorted(set(la) & set(lb)):
            if la[key] != lb[key]:
                found.append(Difference("limits", f"limit {key} {la[key]} vs {lb[key]}"))
    ca, cb = _get(old, "harness", "commit"), _get(new, "harness", "commit")
    if ca and cb and ca != cb:
        found.append(Difference("harness", f"harness commit {ca[:10]} vs {cb[:10]}"))
    pa, pb = old.get("packages"), new.get("packages")
    if isinstance(pa, dict) and isinstance(pb, dict):
        for name in sorted(set(pa) & set(pb)):
            if pa[name] != pb[name]:
                found.append(Difference("packages", f"{name} {pa[name]} vs {pb[name]}"))
    return found


def resume_conflicts(old: dict[str, Any], new: dict[str, Any]) -> list[Difference]:
    """What a resumed run changes of what changes results (models of both runs, by name)."""
    found = [d for d in _run_differences(old, new) if d.what in RESUME_REFUSES]
    for name in new.get("model_info") or {}:
        a, b = model_facts(old, name), model_facts(new, name)
        if a is not None and b is not None:
            found += [d for d in _model_differences(name, a, b) if d.what in RESUME_REFUSES]
    return found


def compare_differences(
    a: dict[str, Any], label_a: str, b: dict[str, Any], label_b: str, *, scaffolds: bool = False
) -> tuple[list[Difference], list[Difference]]:
    """(refused, warned): what makes A and B another experiment, and what else differs.

    The checkpoints differ on purpose (that is the comparison); ``scaffolds``: so do the scaffolds."""
    refused: list[Difference] = []
    warned: list[Difference] = []
    found = _run_differences(a, b)
    ma, mb = model_facts(a, label_a), model_facts(b, label_b)
    if ma is not None and mb is not None:
        found += [d for d in _model_differences(f"{label_a} / {label_b}", ma, mb) if d.what != "checkpoint"]
    for d in found:
        if d.what == "scaffold" and scaffolds:
            continue
        (refused if d.what in COMPARE_REFUSES else warned).append(d)
    return refused, warned


def manifest_lines(manifest: dict[str, Any]) -> list[str]:
    """run.json for people: one line per fact, grouped, unknown facts said as such."""
    lines: list[str] = []
    h = manifest.get("harness") or {}
    if h:
        dirty = {True: " (uncommitted changes)", False: "", None: ""}[h.get("dirty")]
        lines.append(f"harness {h.get('version') or '?'} at commit {h.get('commit') or 'unknown'}{dirty}")
    started, ended = manifest.get("started_at"), manifest.get("ended_at")
    if started:
        lines.append(f"started {started}" + (f", last ended {ended}" if ended else ", not ended"))
    if packages := manifest.get("packages"):
        lines.append("packages: " + ", ".join(f"{k} {v}" for k, v in packages.items() if v) or "none found")
    for name, info in (manifest.get("model_info") or {}).items():
        lines.append(f"model {name}:")
        lines += [f"  {line}" for line in _model_lines(info)]
    scaffolds = manifest.get("scaffold_info") or {}
    if scaffolds:
        for name, info in scaffolds.items():
            lines.append(
                f"scaffold {name}: runner {info.get('runner')}, tool schema {info.get('tool_schema_sha256', '')[:12]}"
            )
    else:
        lines.append(f"scaffold {manifest.get('scaffold')} (schema hash {manifest.get('scaffold_hash')})")
    if isinstance(sampling := manifest.get("sampling"), dict):
        shown = ", ".join(
            f"{k} {sampling[k]}" for k in ("temperature", "top_p", "max_output_tokens") if k in sampling
        )
        lines.append(f"sampling: {shown} ({sampling.get('source', 'source unknown')})")
    if isinstance(limits := manifest.get("limits"), dict):
        lines.append("limits: " + ", ".join(f"{k} {v}" for k, v in limits.items()))
    task_set = manifest.get("task_set") or {}
    lines.append(
        f"tasks: {len(manifest.get('tasks') or [])} of {manifest.get('suite', '?')}"
        + (f", content hash {task_set['hash']}" if task_set.get("hash") else "")
    )
    lines.append(f"seeds: {manifest.get('seeds')}; runtime {manifest.get('runtime', '?')}")
    if machine := manifest.get("machine"):
        gpus = machine.get("gpus") or []
        gpu = (
            f"{len(gpus)} x {gpus[0]['name']}, driver {machine.get('driver')}, CUDA {machine.get('cuda')}"
            if gpus
            else "no GPU"
        )
        lines.append(f"machine: {machine.get('cpus')} CPUs, {gpu}")
    for inv in manifest.get("invocations") or []:
        if forced := inv.get("forced"):
            lines.append(f"resumed {inv.get('started_at')} with --force-resume despite: {'; '.join(forced)}")
    if not manifest.get("harness"):
        lines.append("(a run made before the full manifest was recorded: the facts above are all it kept)")
    elif since := manifest.get("facts_since"):
        lines.append(
            f"(a run made before the full manifest was recorded: these facts are from its resume at {since})"
        )
    return lines


def manifest_markdown(manifest: dict[str, Any]) -> list[str]:
    """``manifest_lines`` as a markdown list (a model's facts nested under it)."""
    return [
        f"  - {line.strip()}" if line.startswith("  ") else f"- {line}" for line in manifest_lines(manifest)
    ]


def _model_lines(info: dict[str, Any]) -> list[str]:
    out: list[str] = []
    ck = info.get("checkpoint") or {}
    out.append(
        f"{info.get('kind')}: {info.get('path')}"
        + (f" ({ck.get('kind')}, fingerprint {ck.get('fingerprint')})" if ck else " (no fingerprint)")
    )
    if info.get("served_name"):
        request = info.get("request_name")
        out.append(
            f"served as {info['served_name']}"
            + (f", requests name {request}" if request and request != info["served_name"] else "")
        )
    if template := info.get("chat_template"):
        out.append(f"chat template: {template.get('source')} ({_short(template.get('sha256'))})")
    if info.get("tool_call_parser"):
        out.append(f"tool-call parser: {info['tool_call_parser']}")
    if env := info.get("server_env"):
        out.append(
            f"server environment: vLLM {env.get('vllm') or 'unknown'}, torch {env.get('torch') or 'unknown'}"
            + (f" ({env['error']})" if env.get("error") else "")
        )
    if argv := info.get("vllm_argv"):
        out.append(f"vLLM argv{'' if info.get('vllm_argv_launched') else ' (planned)'}: {' '.join(argv)}")
    return out
