"""PivotRL of a tool-calling agent on a Hugging Face checkpoint (configs/agent_tools_base.py):

    python launch.py --config=configs/agent_tools_pivotrl.py --workdir=runs/tools-pivotrl \\
        --config.model.init_from=/models/Qwen2.5-0.5B-Instruct \\
        --config.agent.trajectories=/data/my_trajectories.jsonl

The candidate states are the assistant turns of the trajectories file (by default the shipped
rlvr/agents/data/kv_trajectories.jsonl), each rebuilt by replaying the recorded tool calls;
π_ref probes m turns per state, the informative states are kept, and K local turns per kept
state are scored by the functional turn verifier (same tool, equivalent arguments).
"""

from rlvr.configs import agent_tools_base
from rlvr.tasks.tool_agent import SHIPPED_TRAJECTORIES


def get_config():
    c = agent_tools_base.get_config()
    c.algorithm.name = "pivotrl"
    c.algorithm.group_size = 4        # K local samples per kept state.
    c.algorithm.clip_low = 0.2
    c.algorithm.clip_high = 0.2
    c.algorithm.recompute_old_logprobs = False
    c.kl.mode = "loss"                # β·KL(π_θ‖π_ref) over the turn.
    c.kl.coef = 0.02
    c.agent.trajectories = SHIPPED_TRAJECTORIES["kv_tools"]  # candidate states.
    c.task.pool_size = 6              # the file's records.
    c.sampling.prompts_per_step = 8   # kept states per step.
    c.pivot.candidates = "demo"
    c.pivot.selection = "filter"
    c.pivot.m = 4
    c.pivot.lambda_diff = 0.75
    c.pivot.reward = "functional"     # functional | exact (the ablation).
    return c
