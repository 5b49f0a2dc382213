"""Multi-turn GRPO of a tool-calling agent on a Hugging Face checkpoint (configs/agent_tools_base.py):

    python launch.py --config=configs/agent_tools_grpo.py --workdir=runs/tools-grpo \\
        --config.model.init_from=/models/Qwen2.5-0.5B-Instruct

G whole episodes per task, outcome reward on the environment's final state, group-normalised
advantages, token-level PPO clip on the assistant's tokens only.
"""

from rlvr.configs import agent_tools_base


def get_config():
    c = agent_tools_base.get_config()
    c.algorithm.name = "grpo"
    c.algorithm.group_size = 8        # G episodes per task.
    c.algorithm.clip_low = 0.2
    c.algorithm.clip_high = 0.28
    c.algorithm.recompute_old_logprobs = False  # π_old = the sampler's behaviour log-probs.
    c.sampling.prompts_per_step = 8
    return c
