"""Quickstart with a LoRA policy: the same task, warm start and GRPO run as configs/quickstart.py,
but RL trains only rank-8 adapters on every block projection and offsets on the RMSNorm scales
(the warm-started base is frozen, and would be the KL reference at no memory cost).

    python launch.py --config=configs/quickstart_lora.py --workdir=/tmp/rlvr_quickstart_lora

Add `--config.model.lora.quantize=nf4` for QLoRA (the frozen projections stored as 4-bit
NormalFloat). Results against full fine-tuning: benchmarks/results/lora_quickstart_cpu.md.
"""

from rlvr.configs import quickstart


def get_config():
    c = quickstart.get_config()
    c.model.lora.rank = 8
    c.model.lora.alpha = 16.0
    c.model.lora.train_norms = True    # the norm scales too: RL must sharpen the policy
    c.optimizer.learning_rate = 3e-3   # adapters: 3x the full fine-tuning rate (1e-2 collapses)
    return c
