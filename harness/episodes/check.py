"""`harness check`: is the scaffold wired right for this model and server, before any GPU hour is spent?

Checks, each pass / warn / fail with the fix:
1. the server lists the model;
2. the chat template renders the scaffold's tools into the prompt;
3. it renders an assistant tool call in a known format (the format the model is taught);
4. a tool result sent back appears in the next rendered prompt;
5. the server's tool-call parser reads that format: the probe's output is constrained to the
   template's own tool-call text (structured outputs), so this checks the parser, not the model;
6. the parsed arguments validate against the scaffold's schema;
7. a free probe: what the model does unconstrained, through the episodes' own format validation
   (monitor.validate_turn): a clean call to a scaffold tool passes; prose, an unknown tool, bad
   arguments or markup left in the text are warnings (what the model will do in episodes, which
   the scaffold cannot fix); markup fails only when the parser was not shown to read the
   template's format (then the parser is the likely cause).
Rendering uses vLLM's /tokenize + /detokenize; where a server lacks them, checks 2-5 are skipped.
"""

import json
import re
from typing import Any, Literal

import httpx
import openai
from pydantic import BaseModel

from harness.episodes.scaffold import Scaffold
from harness.errors import HarnessError
from harness.monitor import FormatCategory, ToolCall, ToolSchemas, Turn, find_markup, validate_turn
from harness.monitor.formats import PARSER_FOR_MARKUP

Outcome = Literal["pass", "warn", "fail", "skip"]
_PROBE_CMD = "PROBE_CMD_7f3a"
# Both probes' system message: one prompt (the scaffold's tools are most of it) that the server
# prefills once; on a CPU server that prefill is a minute.
_SYSTEM = {
    "role": "system",
    "content": "You are a coding agent. Use the tools to act; call exactly one tool.",
}
_MARKER = "TOOL_RESULT_MARKER_5c2e"
_TRAILING_SPECIALS = re.compile(r"(?:\s*(?:<\|[^|>]+\|>|</s>|<eos>|<end_of_turn>))+\s*$")


class CheckResult(BaseModel):
    name: str
    outcome: Outcome
    detail: str
    fix: str | None = None


class CheckReport(BaseModel):
    model: str
    base_url: str
    template_format: str | None
    results: list[CheckResult]

    @property
    def passed(self) -> bool:
        return not any(r.outcome == "fail" for r in self.results)

    @property
    def warnings(self) -> list[CheckResult]:
        return [r for r in self.results if r.outcome == "warn"]


class _Server:
    def __init__(self, base_url: str, api_key: str, model: str) -> None:
        self.root = base_url.rstrip("/").removesuffix("/v1")
        self.model = model
        self.headers = {"Authorization": f"Bearer {api_key}"}
        self.client = openai.OpenAI(base_url=f"{self.root}/v1", api_key=api_key, max_retries=0, timeout=300)
        self.http = httpx.Client(timeout=60)

    def render(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *, generation_prompt: bool
    ) -> str | None:
        """The prompt text the server's chat template makes, or None where the server cannot say."""
        try:
            tok = self.http.post(
                f"{self.root}/tokenize",
                headers=self.headers,
                json={
                    "model": self.model,
                    "messages": messages,
                    "tools": tools,
                    "add_generation_prompt": generation_prompt,
                },
            )
            if tok.status_code != 200:
                return None
            detok = self.http.post(
                f"{self.root}/detokenize",
                headers=self.headers,
                json={"model": self.model, "tokens": tok.json()["tokens"]},
            )
            return str(detok.json()["prompt"]) if detok.status_code == 200 else None
        except (httpx.HTTPError, KeyError, ValueError):
            return None


def _assistant_call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_probe",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }


def _turn_from(completion: Any) -> Turn:
    choice = completion.choices[0]
    calls = tuple(
        ToolCall(name=c.function.name, arguments=c.function.arguments or "")
        for c in (choice.message.tool_calls or [])
    )
    return Turn(
        index=0, text=choice.message.content or "", tool_calls=calls, finish_reason=choice.finish_reason
    )


def shown_call(call: ToolCall) -> str:
    """A parsed call as the scaffold receives it: the name, then the arguments as parsed JSON (the
    raw string when it is not JSON), so what the parser produced reads as data, not as code."""
    try:
        args = json.dumps(json.loads(call.arguments), ensure_ascii=False) if call.arguments.strip() else "{}"
    except (json.JSONDecodeError, RecursionError):
        args = f"unparsable {call.arguments[:60]!r}"
    return f"tool {call.name!r}, arguments {args[:80]}"


def free_probe_result(
    turn: Turn, schemas: ToolSchemas, *, template_format: str | None = None, parser_read: bool = False
) -> CheckResult:
    """The free probe judged by the episodes' own format validation (monitor.validate_turn, the
    same categories an eval counts): a clean call passes; every category an episode would count
    is a warning (the model's habits, not the scaffold's wiring), named with what it would cost;
    markup left in the text fails only when the parser was not shown to read the template's
    format (then it is the likeliest cause, and the fix names the parser)."""
    name = "free probe: model's own tool call"
    check = validate_turn(turn, schemas)
    cats = [e.category for e in check.errors]
    repaired = "; ".join(f"{r.original} -> {r.repaired} (the scaffold repairs it)" for r in check.repairs)
    calls = "; ".join(shown_call(c) for c in turn.tool_calls)
    if FormatCategory.tool_call_in_content in cats and check.markup:
        markup = check.markup
        fix_parser = f"pass --tool-call-parser {PARSER_FOR_MARKUP.get(markup, markup)}"
        where = f"{markup} markup left in the text" + (f" beside {calls}" if calls else "")
        if not parser_read:
            return CheckResult(
                name=name, outcome="fail", detail=f"{where}: {turn.text[:80]!r}", fix=fix_parser
            )
        why = (
            "the parser reads this format (above), so the model's own call is malformed"
            if markup == template_format
            else f"the template teaches {template_format or 'another'} format"
        )
        return CheckResult(
            name=name,
            outcome="warn",
            detail=f"{where} ({why}): {turn.text[:80]!r}",
            fix="episodes count these as tool_call_in_content: the model's calls are lost, not run",
        )
    if not turn.tool_calls:
        return CheckResult(
            name=name,
            outcome="warn",
            detail=f"answered without a tool call: {turn.text[:80]!r}",
            fix="a model that does not call tools scores low in agent episodes; the scaffold is not at fault",
        )
    unknown = [e.tool or "?" for e in check.errors if e.category == FormatCategory.unknown_tool]
    others = sorted({e.category.value for e in check.errors if e.category != FormatCategory.unknown_tool})
    problems = ([f"unknown tool {', '.join(map(repr, unknown))}"] if unknown else []) + others
    detail = f"parsed {calls}" + (f"; {repaired}" if repaired else "")
    if not problems:
        return CheckResult(name=name, outcome="pass", detail=detail)
    known = ", ".join(sorted(schemas.parameters))
    return CheckResult(
        name=name,
        outcome="warn",
        detail=f"{detail}; format errors: {', '.join(problems)}",
        fix=(
            f"the model calls tools the scaffold does not have (it has {known}): episodes count "
            "unknown_tool errors and the calls do nothing"
            if unknown
            else "episodes count these format errors (harness show lists them per turn)"
        ),
    )


def _ask(srv: _Server, what: str, **request: Any) -> Any:
    """A probe's chat completion; a request the server refuses (a prompt longer than its
    --max-model-len, a model it does not serve) is one line naming the probe and the server's
    reason, not a traceback: the scaffold's tools alone can outgrow a small context."""
    try:
        return srv.client.chat.completions.create(**request)
    except openai.APIStatusError as exc:
        reason = _server_reason(exc)
        hint = (
            ": the scaffold's tools and prompt need a longer context (--max-model-len)"
            if "context length" in reason or "maximum" in reason
            else ""
        )
        raise HarnessError(
            f"harness check: the server refused {what} ({exc.status_code}: {reason}){hint}"
        ) from None
    except openai.APIConnectionError as exc:
        raise HarnessError(f"harness check: {what} got no answer from {srv.root}: {exc}") from None


def _server_reason(exc: openai.APIStatusError) -> str:
    body = exc.body
    inner = body.get("error", body) if isinstance(body, dict) else None
    message = inner.get("message") if isinstance(inner, dict) else None
    return " ".join(str(message or exc.message).split())[:300]


def run_checks(
    *,
    base_url: str,
    api_key: str,
    model: str,
    scaffold: Scaffold,
    parser: str | None = None,
    template_hint: str = "--chat-template FILE",
) -> CheckReport:
    """Run every check against a live OpenAI-compatible server; never raises on a failed check."""
    srv = _Server(base_url, api_key, model)
    tools = scaffold.snapshot()["tools"]
    schemas = scaffold.tool_schemas()
    names = [t["function"]["name"] for t in tools]
    results: list[CheckResult] = []

    try:
        served = [m.id for m in srv.client.models.list().data]
    except openai.OpenAIError as exc:
        results.append(
            CheckResult(
                name="server lists the model",
                outcome="fail",
                detail=str(exc)[:200],
                fix="check --base-url and the API key",
            )
        )
        return CheckReport(model=model, base_url=base_url, template_format=None, results=results)
    ok = model in served
    results.append(
        CheckResult(
            name="server lists the model",
            outcome="pass" if ok else "fail",
            detail=f"served: {', '.join(served)}",
            fix=None if ok else f"pass --served-model one of: {', '.join(served)}",
        )
    )
    if not ok:
        return CheckReport(model=model, base_url=base_url, template_format=None, results=results)

    user = {"role": "user", "content": "List the files in the workspace."}
    prompt = srv.render([user], tools, generation_prompt=True)
    fmt: str | None = None
    call_text: str | None = None
    if prompt is None:
        for name in (
            "template renders tools",
            "template renders tool calls",
            "tool result reaches the next prompt",
            "parser reads the template's format",
        ):
            results.append(
                CheckResult(name=name, outcome="skip", detail="the server has no /tokenize to render with")
            )
    else:
        missing = [n for n in names if n not in prompt]
        results.append(
            CheckResult(
                name="template renders tools",
                outcome="fail" if missing else "pass",
                detail=f"missing from the prompt: {', '.join(missing)}"
                if missing
                else f"all {len(names)} tools in the prompt",
                fix=f"the chat template ignores `tools`: pass {template_hint} with tool support"
                if missing
                else None,
            )
        )

        call_msgs = [user, _assistant_call("terminal", {"command": _PROBE_CMD})]
        rendered = srv.render(call_msgs, tools, generation_prompt=False) or ""
        before = srv.render([user], tools, generation_prompt=True) or ""
        suffix = (
            rendered[len(before) :]
            if rendered.startswith(before)
            else rendered[rendered.rfind(_PROBE_CMD) - 200 :]
        )
        call_text = _TRAILING_SPECIALS.sub("", suffix).strip() if _PROBE_CMD in suffix else None
        fmt = find_markup(call_text or "", names)
        results.append(
            CheckResult(
                name="template renders tool calls",
                outcome="pass" if fmt else "fail",
                detail=f"{fmt} format: {call_text[:90]!r}"
                if fmt and call_text
                else f"rendered: {(call_text or suffix)[:90]!r}",
                fix=None
                if fmt
                else f"the template does not render assistant tool calls; pass {template_hint}",
            )
        )

        result_msgs = [*call_msgs, {"role": "tool", "tool_call_id": "call_probe", "content": _MARKER}]
        after = srv.render(result_msgs, tools, generation_prompt=True) or ""
        seen = _MARKER in after
        results.append(
            CheckResult(
                name="tool result reaches the next prompt",
                outcome="pass" if seen else "fail",
                detail="the tool message is rendered"
                if seen
                else "the tool message is missing from the prompt",
                fix=None if seen else f"the template drops role=tool messages; pass {template_hint}",
            )
        )

        if fmt and call_text:
            # Constrain the output to the template's own call text (with a free command) and see
            # whether the server's parser turns it into a tool call.
            escaped = re.escape(call_text).replace(re.escape(_PROBE_CMD), r"[a-z][a-z -]{0,30}")
            forced = _ask(
                srv,
                "the forced tool-call probe",
                model=model,
                messages=[_SYSTEM, user],  # the free probe's prompt: the server's prefix cache holds it
                tools=tools,
                max_tokens=200,
                temperature=0,
                seed=0,
                extra_body={"structured_outputs": {"regex": escaped}},
            )
            turn = _turn_from(forced)
            parsed = bool(turn.tool_calls) and not find_markup(turn.text, names)
            want = PARSER_FOR_MARKUP.get(fmt, fmt)
            results.append(
                CheckResult(
                    name="parser reads the template's format",
                    outcome="pass" if parsed else "fail",
                    detail=(
                        f"parsed {shown_call(turn.tool_calls[0])} (the call's format was forced, its command "
                        "left to the model in letters and spaces: an odd word there is the model's)"
                        if parsed
                        else f"the model emits {fmt} markup but it stayed in the text"
                        + (f" (parser: {parser})" if parser else "")
                    ),
                    fix=None if parsed else f"pass --tool-call-parser {want}",
                )
            )
            if parsed:
                check = validate_turn(turn, schemas)
                wrong = [e for e in check.errors if e.category != FormatCategory.multiple_tool_calls]
                results.append(
                    CheckResult(
                        name="arguments match the scaffold schema",
                        outcome="fail" if wrong else "pass",
                        detail="; ".join(f"{e.category.value}: {e.detail}" for e in wrong)
                        or "valid against tools.schema.json",
                        fix="the tool schema snapshot and the served tools differ: run `harness scaffold export`"
                        if wrong
                        else None,
                    )
                )

    messages: Any = [_SYSTEM, user]
    free = _ask(
        srv,
        "the free probe",
        model=model,
        tools=tools,
        max_tokens=256,
        temperature=0,
        seed=0,
        messages=messages,
    )
    parser_read = any(r.name == "parser reads the template's format" and r.outcome == "pass" for r in results)
    results.append(free_probe_result(_turn_from(free), schemas, template_format=fmt, parser_read=parser_read))
    return CheckReport(model=model, base_url=base_url, template_format=fmt, results=results)
