"""Convert a GGUF checkpoint to a plain Hugging Face safetensors checkpoint.

Runs inside the vLLM server environment (Python 3.11, torch, transformers, gguf), never in the
harness process: ``python _gguf_to_hf.py GGUF_FILE OUT_DIR``. transformers dequantizes the GGUF;
the model is then rebuilt from its config as a plain architecture class so that save_pretrained
writes ordinary safetensors that vLLM serves without GGUF support.
"""

import json
import sys
from pathlib import Path


def main(gguf_file: str, out_dir: str) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    src = Path(gguf_file)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    loaded = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32)
    config = AutoConfig.from_pretrained(src.parent, gguf_file=src.name)
    config.torch_dtype = torch.bfloat16
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    missing, unexpected = plain.load_state_dict(loaded.state_dict(), strict=False)
    # Tied embeddings legitimately leave lm_head out of the state dict.
    missing = [m for m in missing if not (m == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise SystemExit(f"weights do not match the config: missing={missing} unexpected={unexpected}")
    plain.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    print(json.dumps({"out": str(out), "architectures": config.architectures}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
