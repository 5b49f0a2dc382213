"""Shared settings of the tool-calling agent configs (GRPO, PivotRL, SAO on a Hugging Face
checkpoint): the `kv_tools` kit — the key-value registers behind the tools `get`, `delete` and
`answer` — rendered by the checkpoint's own chat template with the tool list, tool calls
parsed in the checkpoint's format (agent.tool_format), loss only on the assistant's tokens.

    python launch.py --config=configs/agent_tools_grpo.py --workdir=runs/tools-grpo \\
        --config.model.init_from=/models/Qwen2.5-0.5B-Instruct

The checkpoint's chat template must support tools (Qwen2.5 / Llama 3.x instruct templates do).
A tiny random checkpoint with the shipped tool template for a CPU try:
`python -m rlvr.testing tiny-checkpoint --tools /tmp/tiny-qwen-tools`.
"""

from rlvr.configs import base


def get_config():
    c = base.get_config()
    c.model.init_from = ""            # required: the local Hugging Face checkpoint folder.
    c.model.dtype = "bfloat16"        # compute; parameters and optimiser state stay float32.
    c.model.remat = True
    c.model.max_seq_len = 2048        # system prompt with the tool list + up to max_turns turns.
    c.tokenizer.kind = "hf"           # the checkpoint's own tokenizer and chat template.
    c.task.names = ("kv_tools",)
    c.task.kwargs.difficulty = "easy"  # kv_agent difficulty: easy | medium | hard.
    c.task.pool_size = 256            # fixed pool of training tasks.
    c.agent.tool_format = "auto"      # auto (from the template) | hermes | llama3.
    c.agent.trajectories = ""         # "" = generated tasks with oracle demonstrations.
    c.rollout.max_turns = 6           # assistant turns per episode.
    c.rollout.kv_reuse = True         # prefill only the tokens appended per turn.
    c.rollout.prompt_bucket = 128
    c.sampling.max_new_tokens = 96    # one assistant turn (a tool call or the reply).
    c.sampling.temperature = 1.0
    c.optimizer.learning_rate = 1e-6
    c.optimizer.max_grad_norm = 1.0
    c.train.num_steps = 100
    c.train.sft_steps = 0             # > 0: warm start on the demonstrations first.
    c.eval.every = 25
    c.eval.num_tasks = 32
    c.eval.samples_per_task = 2
    c.eval.pass_k = (1, 2)
    c.logging.tensorboard = False
    return c
