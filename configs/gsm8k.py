"""GRPO on GSM8K-format math word problems from your own Hugging Face checkpoint.

One GPU / TPU host, Qwen2.5-0.5B-Instruct (or 1.5B) downloaded to a local folder:

    python launch.py --config=configs/gsm8k.py --workdir=runs/gsm8k \\
        --config.model.init_from=/models/Qwen2.5-0.5B-Instruct \\
        --config.task.names='("gsm8k:/data/gsm8k/train.parquet",)' \\
        --config.task.eval_path=/data/gsm8k/test.parquet
    python launch.py --config=configs/gsm8k.py --workdir=runs/gsm8k --mode=eval \\
        --config.model.init_from=/models/Qwen2.5-0.5B-Instruct ...        # same overrides

Without the two task overrides it trains on the shipped GSM8K-format set (`gsm8k:builtin`,
120 train / 40 eval word problems from reasoning-gym's gsm_symbolic). The files may be the
Hugging Face `gsm8k` parquet files or JSONL with the same fields (rlvr.tasks.files). At the
end `runs/gsm8k/export/` is a Hugging Face folder of the trained policy.

Sizes: 32 questions × 8 samples per step, up to 512 new tokens, bf16 compute with float32
master weights, activation recomputation; gradients in 4 minibatches × 4 microbatches of 16
sequences. For 1.5B on one 80 GB GPU the same settings fit; on several devices shard the
parameters with `--config.mesh.fsdp=<devices>` (the batch splits over mesh.data × mesh.fsdp).
The prompt is the checkpoint's chat template (system prompt: the template's default) with the
instruction below appended; generation stops on eos or the template's end-of-turn token.

Tiny CPU run (a random 2-layer Qwen2 with a BPE tokenizer trained offline, seconds per step):

    python -m rlvr.testing tiny-checkpoint /tmp/tiny-qwen
    python launch.py --config=configs/gsm8k.py --workdir=/tmp/gsm8k-tiny \\
        --config.model.init_from=/tmp/tiny-qwen --config.model.dtype=float32 \\
        --config.model.remat=False --config.model.max_seq_len=448 \\
        --config.sampling.max_new_tokens=32 --config.sampling.prompts_per_step=4 \\
        --config.algorithm.group_size=4 --config.train.num_steps=4 \\
        --config.train.num_minibatches=1 --config.train.num_microbatches=1 \\
        --config.eval.num_tasks=8 --config.eval.every=2 --config.checkpoint.every=2
"""

from rlvr.configs import base


def get_config():
    c = base.get_config()
    c.seed = 0
    c.model.init_from = ""            # required: the local Hugging Face checkpoint folder.
    c.model.dtype = "bfloat16"        # compute; parameters and optimiser state stay float32.
    c.model.param_dtype = "float32"
    c.model.remat = True
    c.model.max_seq_len = 1024        # prompt (chat template + question, < 512) + 512 new tokens.
    c.tokenizer.kind = "hf"           # the checkpoint's own tokenizer (tokenizer.path = init_from).
    c.tokenizer.chat_template = True
    c.tokenizer.instruction = "Please reason step by step, and put your final answer within \\boxed{}."
    c.task.names = ("gsm8k:builtin",)
    c.algorithm.name = "grpo"
    c.algorithm.group_size = 8
    c.algorithm.clip_low = 0.2
    c.algorithm.clip_high = 0.28
    c.algorithm.aggregation = "seq-mean-token-mean"
    c.rollout.prompt_bucket = 128      # prompts padded to 128 / 256 / 384 / 512 tokens (4 jit shapes).
    c.sampling.prompts_per_step = 32
    c.sampling.max_new_tokens = 512
    c.sampling.temperature = 1.0
    c.optimizer.learning_rate = 1e-6
    c.optimizer.warmup_steps = 10
    c.optimizer.max_grad_norm = 1.0
    c.train.num_steps = 200
    c.train.num_minibatches = 4
    c.train.num_microbatches = 4
    c.eval.num_tasks = 256
    c.eval.greedy = True
    c.eval.every = 25
    c.checkpoint.every = 25
    c.checkpoint.max_to_keep = 2
    c.logging.samples_every = 25
    return c
