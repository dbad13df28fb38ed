"""Checkpoint inspection: full model or LoRA adapter, model family, tool-call parser, chat template.

Reads only JSON files (config.json, adapter_config.json, tokenizer_config.json,
chat_template.jinja); never loads weights and never imports vLLM or torch.
"""

import json
import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.errors import HarnessError
from harness.paths import repo_root

HERMES_TEMPLATE = "chatml-hermes.jinja"

# Parsers we can vouch for; vLLM has more, and any name is accepted by flag.
KNOWN_PARSERS = ("hermes", "qwen3_coder", "llama3_json", "mistral", "pythonic", "granite")

# model_type -> (family label, default tool-call parser).
_FAMILIES: dict[str, tuple[str, str]] = {
    "qwen2": ("qwen2.5", "hermes"),
    "qwen3": ("qwen3", "hermes"),
    "qwen3_moe": ("qwen3-moe", "hermes"),
    "llama": ("llama", "hermes"),
    "mistral": ("mistral", "mistral"),
    "mixtral": ("mistral", "mistral"),
    "granite": ("granite", "granite"),
}

# Markers in a chat template that tell which tool-call format the model was trained on.
_TEMPLATE_MARKERS: tuple[tuple[str, str], ...] = (
    ("<function=", "qwen3_coder"),
    ("<tool_call>", "hermes"),
    ("[TOOL_CALLS]", "mistral"),
    ("<|python_tag|>", "llama3_json"),
)


class Checkpoint(BaseModel):
    """What the harness needs to know to serve a checkpoint."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["full", "lora"] = Field(description="A full model, or a LoRA adapter on a base.")
    path: Path = Field(description="The directory given by the user.")
    base_path: Path = Field(description="The full model vLLM loads (== path for a full model).")
    served_name: str = Field(description="Name of the base model on the server.")
    adapter_name: str | None = Field(None, description="Name the adapter is served under.")
    lora_rank: int | None = Field(None, description="LoRA rank r from adapter_config.json.")
    architecture: str
    model_type: str
    family: str
    tool_call_parser: str
    chat_template: Path | None = Field(
        None, description="Template to pass to vLLM; None: the checkpoint's own."
    )
    template_has_tools: bool = Field(description="Whether the checkpoint's own template renders tools.")
    context_length: int
    dtype: str
    config: dict[str, Any] = Field(repr=False, description="The base model's config.json.")

    @property
    def request_model(self) -> str:
        """The model name requests should use: the adapter when there is one."""
        return self.adapter_name or self.served_name


def read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HarnessError(f"{path}: cannot read {what} ({exc})") from None
    except RecursionError:  # thousands of nested brackets: no config is like that
        raise HarnessError(f"{path}: cannot read {what} (nested too deeply to be a model's config)") from None
    if not isinstance(data, dict):
        raise HarnessError(f"{path}: {what} is not a JSON object")
    return data


def _text_config(config: dict[str, Any]) -> dict[str, Any]:
    """Multimodal configs nest the language model under text_config."""
    nested = config.get("text_config")
    return {**config, **nested} if isinstance(nested, dict) else config


def context_length_of(config: dict[str, Any]) -> int:
    cfg = _text_config(config)
    for key in ("max_position_embeddings", "max_seq_len", "seq_length", "n_positions"):
        value = cfg.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 2**31:
            return int(value)
        if value is not None:  # present but infinite, negative or not a number: say which
            raise HarnessError(
                f"config.json: {key} = {value!r} is not a positive whole number; fix the checkpoint's config.json"
            )
    raise HarnessError("config.json has no max_position_embeddings: pass --max-model-len N")


def dtype_of(config: dict[str, Any]) -> str:
    cfg = _text_config(config)
    return str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16").removeprefix("torch.")


def own_chat_template(model_dir: Path) -> str | None:
    """The checkpoint's own chat template text (chat_template.jinja or tokenizer_config.json)."""
    jinja = model_dir / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(errors="replace")
    tok = model_dir / "tokenizer_config.json"
    if tok.is_file():
        template = read_json(tok, "tokenizer_config.json").get("chat_template")
        if isinstance(template, list):  # named templates: [{"name": "default", "template": ...}, ...]
            template = "\n".join(str(t.get("template", "")) for t in template if isinstance(t, dict))
        if isinstance(template, str):
            return template
    return None


def parser_from_template(template: str | None) -> str | None:
    if not template:
        return None
    for marker, parser in _TEMPLATE_MARKERS:
        if marker in template:
            return parser
    return None


def _find_in_hf_cache(name: str) -> Path | None:
    hub = Path(
        os.environ.get("HF_HUB_CACHE")
        or Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub"
    )
    snapshots = hub / f"models--{name.replace('/', '--')}" / "snapshots"
    found = sorted(snapshots.glob("*/config.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    return found[0].parent if found else None


def _resolve_base(adapter_dir: Path, recorded: str | None, base_flag: str | None) -> Path:
    from harness.server.bundled import BUNDLED, bundled_for_hf_id, ensure_bundled_model

    if base_flag:
        base = Path(base_flag).expanduser()
        if base_flag in BUNDLED:
            return ensure_bundled_model(base_flag)
        if not (base / "config.json").is_file():
            raise HarnessError(
                f"--base-model {base_flag}: no config.json there; give the base model's directory"
            )
        return base
    if recorded:
        if recorded in BUNDLED:
            return ensure_bundled_model(recorded)
        path = Path(recorded).expanduser()
        if not path.is_absolute():
            path = (adapter_dir / path).resolve() if (adapter_dir / path).exists() else path
        if (path / "config.json").is_file():
            return path
        if cached := _find_in_hf_cache(recorded):
            return cached
        # An adapter trained on the Hub weights of a bundled model: the bundled copy is its base.
        if bundled := bundled_for_hf_id(recorded):
            return ensure_bundled_model(bundled)
    raise HarnessError(
        f"{adapter_dir}: LoRA adapter's base model {recorded!r} cannot be found locally; "
        "pass --base-model PATH to its directory"
    )


def _safe_name(path: Path) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", path.resolve().name).strip("-") or "model"


class Located(BaseModel):
    """Where a checkpoint's files are: the model vLLM loads and, for an adapter, the adapter."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["full", "lora"]
    path: Path
    base_path: Path
    lora_rank: int | None
    bundled_name: str | None
    config: dict[str, Any] = Field(repr=False)


def locate_checkpoint(model: str, *, base_model: str | None = None, bundled: str | None = None) -> Located:
    """Resolve ``model`` (directory or bundled name) to its files; errors name the flag to fix.
    ``bundled``: the bundled model that the directory ``model`` holds (a copy of its metadata)."""
    from harness.server.bundled import BUNDLED, ensure_bundled_model

    bundled_name = bundled or (model if model in BUNDLED else None)
    path = ensure_bundled_model(model) if bundled_name and not bundled else Path(model).expanduser()
    if not path.exists():
        names = ", ".join(BUNDLED)
        raise HarnessError(f"--model {model}: no such directory (bundled models: {names})")
    if not path.is_dir():
        raise HarnessError(f"--model {model}: not a directory; give a checkpoint directory")

    adapter_cfg_path = path / "adapter_config.json"
    kind: Literal["full", "lora"] = "full"
    lora_rank = None
    base_path = path
    if adapter_cfg_path.is_file():
        adapter_cfg = read_json(adapter_cfg_path, "adapter_config.json")
        if str(adapter_cfg.get("peft_type", "LORA")).upper() != "LORA":
            raise HarnessError(
                f"{adapter_cfg_path}: peft_type {adapter_cfg.get('peft_type')} is not LoRA; vLLM serves only LoRA adapters"
            )
        kind = "lora"
        lora_rank = int(adapter_cfg.get("r") or 8)
        base_path = _resolve_base(path, adapter_cfg.get("base_model_name_or_path"), base_model)
    elif not (path / "config.json").is_file():
        raise HarnessError(
            f"--model {model}: no config.json (nor adapter_config.json) in {path}; "
            "give a Hugging Face checkpoint directory"
        )
    config = read_json(base_path / "config.json", "config.json")
    return Located(
        kind=kind,
        path=path,
        base_path=base_path,
        lora_rank=lora_rank,
        bundled_name=bundled_name,
        config=config,
    )


def inspect_checkpoint(
    model: str,
    *,
    base_model: str | None = None,
    served_name: str | None = None,
    tool_call_parser: str | None = None,
    chat_template: Path | None = None,
    bundled: str | None = None,
) -> Checkpoint:
    """Inspect ``model`` (a directory or a bundled name) and decide how vLLM should serve it.

    Raises HarnessError with one actionable line for every bad input.
    """
    located = locate_checkpoint(model, base_model=base_model, bundled=bundled)
    kind, path, base_path = located.kind, located.path, located.base_path
    lora_rank, bundled_name, config = located.lora_rank, located.bundled_name, located.config
    adapter_name = (served_name or _safe_name(path)) if kind == "lora" else None
    cfg = _text_config(config)
    architecture = str((config.get("architectures") or ["?"])[0])
    model_type = str(cfg.get("model_type", "?"))

    template_text = own_chat_template(base_path)
    template_parser = parser_from_template(template_text)
    template_has_tools = bool(template_text and "tools" in template_text)

    family, default_parser = _FAMILIES.get(model_type, ("unknown", ""))
    if model_type == "llama" and int(cfg.get("vocab_size", 0)) >= 128000:
        family, default_parser = "llama3", "llama3_json"
    if bundled_name:
        family = bundled_name

    supplied = chat_template
    if (
        supplied is None
        and not template_has_tools
        and (bundled_name or (template_text and "<|im_start|>" in template_text))
    ):
        # ChatML checkpoints without tool support get the scaffold's ChatML+hermes template.
        supplied = repo_root() / "scaffolds" / "chat-templates" / HERMES_TEMPLATE
        template_parser = "hermes"

    parser = tool_call_parser or template_parser or default_parser
    if not parser:
        raise HarnessError(
            f"--model {model}: unknown architecture {architecture} (model_type {model_type}); "
            f"pass --tool-call-parser NAME (e.g. {', '.join(KNOWN_PARSERS)})"
        )
    if supplied is None and not template_has_tools:
        raise HarnessError(
            f"--model {model}: its chat template does not render tools; "
            "pass --chat-template FILE with tool support"
        )
    if supplied is not None and not Path(supplied).is_file():
        raise HarnessError(f"--chat-template {supplied}: no such file")

    return Checkpoint(
        kind=kind,
        path=path,
        base_path=base_path,
        served_name=(served_name if kind == "full" else None) or bundled_name or _base_served_name(base_path),
        adapter_name=adapter_name,
        lora_rank=lora_rank,
        architecture=architecture,
        model_type=model_type,
        family=family,
        tool_call_parser=parser,
        chat_template=supplied,
        template_has_tools=template_has_tools,
        context_length=context_length_of(config),
        dtype=dtype_of(config),
        config=config,
    )


def _base_served_name(base_path: Path) -> str:
    from harness.server.bundled import BUNDLED, bundled_model_path

    for name in BUNDLED:
        if base_path.resolve() == bundled_model_path(name).resolve():
            return name
    return _safe_name(base_path)
