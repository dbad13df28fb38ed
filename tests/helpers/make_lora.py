"""Make a small random LoRA adapter for a base model with peft (run with the server env's python).

usage: python make_lora.py BASE_DIR OUT_DIR [RANK]
"""

import sys

import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM


def main(base: str, out: str, rank: int = 8) -> None:
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    config = LoraConfig(
        r=rank, lora_alpha=2 * rank, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"
    )
    peft_model = get_peft_model(model, config)
    # peft initialises B to zero (a no-op adapter); make it a real, different model.
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.05)
    peft_model.save_pretrained(out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 8)
