"""PivotRL on the multi-turn KV agent task (SPEC R4; seed 000): `python launch.py --config=configs/pivotrl.py --workdir=/tmp/pivotrl`.

CPU-sized: tiny char-level policy, SFT warm-start on demonstrations (then frozen as π_ref),
probe m samples per demonstration turn, keep σ̂² > 0 and μ̂ < λ_diff, local GRPO with K samples.
"""

import ml_collections

from configs import agent_base


def get_config():
    c = agent_base.get_config()   # tiny policy, SFT warm-start, eval (shared with SAO / agent GRPO)
    c.algorithm.name = "pivotrl"  # dispatched by launch.py to rlvr.train.pivotrl_loop.
    with c.unlocked():
        p = c.pivot = ml_collections.ConfigDict()
        p.difficulty = "easy"      # kv_agent difficulty (easy | medium | hard); see experiments/results/difficulty.md.
        p.num_tasks = 32           # training tasks whose demonstration turns are the candidates.
        p.sft_tasks = 256          # tasks whose demonstrations warm-start the policy.
        p.max_turns = 6            # agent-loop turn bound (eval, rollout candidates).
        p.candidates = "demo"      # demo | demo+rollout (003 §3.1: also the policy's own turns).
        p.m = 4                    # probe samples per candidate from π_ref (R4.1).
        p.lambda_diff = 0.75       # keep iff σ̂² > 0 and μ̂ < λ_diff.
        p.selection = "filter"     # filter | variance (σ̂²>0 only) | all | random (ablation 2).
        p.random_fraction = 0.3    # selection=random: fraction of candidates kept.
        p.reward = "functional"    # functional (R2.8) | exact (match the demo text; ablation 3).
        p.demo_style = "diverse"   # demonstrations: diverse (per-task seeded read order + answer
                                   # form, seed 000 §2) | canonical (one oracle form); SFT and
                                   # candidates; warm-start 0.33-0.47 (experiments/results/demo_style.md).
        p.group_size = 4           # K fresh samples from π_old per kept state (R4.2).
        p.states_per_step = 8      # kept states per training step.
        p.clip_eps = 0.2           # ε of the turn-level clipped objective (R3.6).
        p.kl_coef = 0.02           # β of the reference KL (R3.6).
        p.hint = ""                # corrective hint appended to local prefixes only ("" = off).
        p.hint_fraction = 0.5      # with a hint: fraction of each step's states hinted; the rest
                                   # stay un-hinted (R4.3 mixing; 1.0 = hint every state).
        p.token_budget = 0         # stop once this many rollout action tokens were spent (0 = off).
        p.reprofile_every = 0      # re-probe the candidates every N steps with π_θ (0 = never).
        p.prompt_bucket = 64       # prefix padding bucket (few jit shapes).
    return c
