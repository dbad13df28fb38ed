"""A checkpoint's identity as a content fingerprint, cheap enough for a 70B checkpoint.

Full weights are never read in full: a safetensors file is fingerprinted by its size, its header
(every tensor's name, dtype, shape and offsets, and the file's metadata) and three sampled blocks of
its data (start, middle, end), which a fine-tune that keeps the shapes still changes. The small
files that decide what the model sees (config, generation config, tokenizer, chat template) are
hashed whole, and so is every file of a LoRA adapter (megabytes, and the whole point of a run).

The fingerprint names which file changed, so a refused resume can say what moved.
"""

import hashlib
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

# Small files that change what the model is asked or answers: hashed whole.
_WHOLE = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "chat_template.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "preprocessor_config.json",
    "adapter_config.json",
)
_WEIGHTS = (".safetensors", ".bin", ".pt", ".gguf")
_DOCS = (".md", ".txt.license", "LICENSE")
_BLOCK = 1 << 16  # each sampled block of a weights file
_MAX_HEADER = 100 << 20  # safetensors caps its JSON header at 100 MB
_FULL_HASH_MAX = 2 << 30  # an adapter file larger than this is sampled like full weights


class Fingerprint(BaseModel):
    """``digest``: one hash over ``files`` (name -> that file's own digest, ``how`` it was taken)."""

    model_config = ConfigDict(frozen=True)

    digest: str
    files: dict[str, str]
    how: str


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _whole(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _sampled(path: Path) -> str:
    """Size, the safetensors header when it is one, and three blocks of the data."""
    size = path.stat().st_size
    digest = hashlib.sha256(f"size={size}".encode())
    start = 0
    with path.open("rb") as fh:
        if path.suffix == ".safetensors" and size >= 8:
            length = int.from_bytes(fh.read(8), "little")
            if 0 < length <= min(_MAX_HEADER, size - 8):
                digest.update(fh.read(length))
                start = 8 + length
        for offset in (start, start + (size - start) // 2, max(start, size - _BLOCK)):
            fh.seek(offset)
            digest.update(fh.read(_BLOCK))
    return digest.hexdigest()


def _files(directory: Path, *, adapter: bool) -> dict[str, str]:
    files: dict[str, str] = {}
    for path in sorted(directory.iterdir()):
        if not path.is_file():
            continue
        name = path.name
        if name.endswith(_DOCS):
            continue  # a model card changes nothing served
        if adapter and path.stat().st_size <= _FULL_HASH_MAX:
            files[name] = _whole(path)
        elif name.endswith(_WEIGHTS):
            files[name] = _sampled(path)
        elif name in _WHOLE or name.endswith(".jinja"):
            files[name] = _whole(path)
    return files


def _combine(files: dict[str, str]) -> str:
    return _sha(json.dumps(files, sort_keys=True).encode())[:16]


def fingerprint_dir(directory: Path, *, adapter: bool = False) -> Fingerprint:
    """The fingerprint of one checkpoint directory (``adapter``: every file hashed whole)."""
    files = _files(directory, adapter=adapter)
    how = (
        "every file hashed whole"
        if adapter
        else "config, tokenizer and template files hashed whole; weights by size, header and sampled blocks"
    )
    return Fingerprint(digest=_combine(files), files=files, how=how)


def fingerprint_checkpoint(path: Path, base_path: Path, kind: str) -> dict[str, Any]:
    """What run.json keeps of a checkpoint: its fingerprint and, for an adapter, its base's."""
    if kind == "lora":
        own = fingerprint_dir(path, adapter=True)
        base = fingerprint_dir(base_path)
        return {
            "kind": kind,
            "fingerprint": _combine({"adapter": own.digest, "base": base.digest}),
            "adapter": own.model_dump(),
            "base": base.model_dump(),
        }
    own = fingerprint_dir(path)
    return {"kind": kind, "fingerprint": own.digest, "weights": own.model_dump()}


def changed_files(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The files whose digests differ between two ``fingerprint_checkpoint`` records (``adapter/``
    or ``base/`` prefixed for an adapter); [] when the records do not say."""
    found: list[str] = []
    for part in ("weights", "adapter", "base"):
        a, b = (old.get(part) or {}).get("files"), (new.get(part) or {}).get("files")
        if not isinstance(a, dict) or not isinstance(b, dict):
            continue
        prefix = "" if part == "weights" else f"{part}/"
        found += [f"{prefix}{n}" for n in sorted(set(a) | set(b)) if a.get(n) != b.get(n)]
    return found
