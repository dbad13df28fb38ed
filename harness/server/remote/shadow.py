"""A checkpoint on a GPU host, inspected and planned here from a shadow copy of its metadata.

The shadow holds every small file of the checkpoint whole (configs, tokenizer, templates, a LoRA
adapter's config) and each safetensors file as its header in a sparse file of the real size: the
inspection, the memory plan and the fingerprint read exactly what they read of a local
checkpoint, and no weight crosses the network. The Checkpoint handed to the launch names the
host's paths.
"""

import base64
import hashlib
import os
import shutil
from pathlib import Path

from harness.errors import HarnessError
from harness.server.bundled import BUNDLED, bundled_for_hf_id
from harness.server.checkpoint import Checkpoint, inspect_checkpoint, read_json
from harness.server.config import ServerConfig
from harness.server.remote.ssh import SSHHost


def _fetch(ssh: SSHHost, remote: str, into: Path, flag: str) -> tuple[Path, str]:
    """The host directory ``remote`` shadowed under ``into`` (named as it is there): (shadow, its
    path on the host)."""
    answer = ssh.hostside("shadow", remote, timeout=300)
    if answer.get("missing"):
        raise HarnessError(f"{flag} {remote}: no such directory on {ssh.host}; model paths are paths there")
    real = str(answer["path"])
    shadow = into / (Path(real).name or "model")
    shutil.rmtree(shadow, ignore_errors=True)
    shadow.mkdir(parents=True)
    for item in answer["files"]:
        target = shadow / Path(item["name"]).name  # one level, names as the host listed them
        target.write_bytes(base64.b64decode(item["data"]))
        if target.stat().st_size < item["size"]:
            os.truncate(target, item["size"])  # sparse: the plan reads the size, not the zeros
    return shadow, real


def _host_model(model: str, cache: str) -> tuple[str, str | None]:
    """(the host path of ``model``, the bundled name when it is one: prepared in the host's cache)."""
    if model in BUNDLED:
        return f"{cache}/models/{model}", model
    return model, None


def remote_checkpoint(
    ssh: SSHHost, cfg: ServerConfig, *, cache: str, run_dir: Path
) -> tuple[Checkpoint, Checkpoint]:
    """(the checkpoint ``cfg.model`` on the host, with the host's paths; the same with the
    shadow's paths here, for the memory plan and the fingerprint)."""
    root = run_dir / "gpu-host-shadow"
    model_path, bundled = _host_model(cfg.model, cache)
    try:
        shadow, real = _fetch(ssh, model_path, root / "model", "--model")
    except HarnessError:
        if bundled:
            raise HarnessError(
                f"--model {cfg.model}: not prepared on {ssh.host} ({model_path}); "
                f"run `harness server setup --gpu-host {ssh.host}` there first"
            ) from None
        raise
    base_shadow, base_real, base_bundled = shadow, real, bundled
    if (shadow / "adapter_config.json").is_file():
        recorded = cfg.base_model or str(
            read_json(shadow / "adapter_config.json", "adapter_config.json").get("base_model_name_or_path")
            or ""
        )
        host_base, base_bundled = _host_model(recorded, cache)
        if base_bundled is None and (name := bundled_for_hf_id(recorded)):
            host_base, base_bundled = _host_model(name, cache)
        if base_bundled is None and not recorded.startswith(("/", "~")):
            raise HarnessError(
                f"--model {cfg.model}: its base model {recorded!r} is not a path on {ssh.host}; "
                "pass --base-model PATH (a directory on the GPU host)"
            )
        base_shadow, base_real = _fetch(ssh, host_base, root / "base", "--base-model")
    template = cfg.chat_template
    checkpoint = inspect_checkpoint(
        str(shadow),
        base_model=str(base_shadow) if base_shadow != shadow else None,
        served_name=cfg.served_name,
        tool_call_parser=cfg.tool_call_parser,
        chat_template=template,
        bundled=bundled if base_shadow == shadow else None,
    )
    if base_bundled and base_shadow != shadow:  # the base's served name, as a local one would be
        checkpoint = checkpoint.model_copy(update={"served_name": base_bundled})
    host_template = None
    if checkpoint.chat_template is not None:
        host_template = _host_template(
            ssh, Path(checkpoint.chat_template), shadow, real, base_shadow, base_real, cache
        )
    hosted = checkpoint.model_copy(
        update={"path": Path(real), "base_path": Path(base_real), "chat_template": host_template}
    )
    return hosted, checkpoint


def _host_template(
    ssh: SSHHost, local: Path, shadow: Path, real: str, base_shadow: Path, base_real: str, cache: str
) -> Path:
    """The chat template's path on the host: the checkpoint's own file there, or a local file
    (the scaffold's template, --chat-template) copied into the host's cache under its digest."""
    for here, there in ((shadow, real), (base_shadow, base_real)):
        if local.parent == here:
            return Path(there) / local.name
    data = local.read_bytes()
    target = f"{cache}/remote/templates/{hashlib.sha256(data).hexdigest()[:16]}-{local.name}"
    ssh.run(["sh", "-c", 'mkdir -p "$(dirname "$1")" && cat > "$1"', "sh", target], input=data)
    return Path(target)
