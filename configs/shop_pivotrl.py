"""PivotRL on the checkout task (docs/algorithms.md §6):
`python launch.py --config=configs/shop_pivotrl.py --workdir=/tmp/shop_pivotrl`.

Candidates: every demonstration turn of the task pool; probe m = 4 actions of π_ref each, keep
σ̂² > 0 ∧ μ̂ < λ_diff; per step 8 kept states × K = 4 fresh actions judged by the functional turn
verifier; turn-level clipped ratio and β·KL to π_ref.
"""

from rlvr.configs import shop_base


def get_config():
    c = shop_base.get_config()
    c.algorithm.name = "pivotrl"
    c.algorithm.group_size = 4       # K actions per kept state.
    c.sampling.prompts_per_step = 8  # kept states per step (32 rows).
    c.algorithm.recompute_old_logprobs = False
    c.pivot.candidates = "demo"
    c.pivot.selection = "filter"
    c.pivot.m = 4
    c.pivot.lambda_diff = 0.75
    c.pivot.reward = "functional"
    return c
