"""SAO of a tool-calling agent on a Hugging Face checkpoint (configs/agent_tools_base.py):

    python launch.py --config=configs/agent_tools_sao.py --workdir=runs/tools-sao \\
        --config.model.init_from=/models/Qwen2.5-0.5B-Instruct

One episode per task from a rollout thread, critic + Skip-Observation GAE over the assistant's
tokens (tool results and template text are observations), token trust region.
"""

from rlvr.configs import agent_tools_base


def get_config():
    c = agent_tools_base.get_config()
    c.algorithm.name = "sao"
    c.algorithm.group_size = 1
    c.algorithm.clip_low = 0.2
    c.algorithm.clip_high = 0.2
    c.algorithm.gamma = 1.0
    c.algorithm.gae_lambda = 0.95
    c.algorithm.skip_observations = True
    c.algorithm.critic_updates = 2
    c.algorithm.critic_warmup_steps = 2
    c.algorithm.critic_learning_rate = 1e-5
    c.algorithm.recompute_old_logprobs = False
    c.sampling.prompts_per_step = 8
    c.rollout.asynchronous = True
    c.rollout.producer_batch = 8
    c.rollout.queue_size = 16
    c.rollout.max_staleness = 2
    return c
