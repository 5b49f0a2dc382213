"""Warm-start success with canonical vs diverse demonstrations (issue 6 follow-up, seed 000 §2).

Diverse demonstrations (`kv_agent.demonstrations(style="diverse")`: per-episode seeded key order
and answer form) carry more entropy per action than the canonical oracle, so the same SFT budget
may leave the warm policy weaker. This measures held-out success after SFT (the default
configs/pivotrl.py settings: easy, 100 SFT steps; 32 eval tasks × 2 samples, T = 1) for both
styles, through the shared warm-start cache, and how often the warm policy's successful episodes
use a form other than the canonical one.

    python experiments/demo_style_check.py --seeds 3
"""

import time

import common  # noqa: F401
from common import CACHE, base_pivot_config, mean_std, parse, table, write_report


def main():
    args = parse(__doc__)
    t0 = time.time()
    import jax

    from rlvr.envs.kv_store import KVStoreEnv, oracle_action
    from rlvr.rollout.agent_loop import run_episodes
    from rlvr.rollout.sampler import SamplingParams
    from rlvr.tasks import kv_agent
    from rlvr.train.agent_setup import make_tokenizer, outcome_verify, starts_for, warm_policy
    from rlvr.verifiers.kv_agent import KVOutcomeVerifier

    tok = make_tokenizer()
    rows, succ = [], {}
    for style in kv_agent.DEMO_STYLES:
        for seed in range(args.seeds):
            c = base_pivot_config(seed)
            p = c.pivot
            m = warm_policy(c, tok, seed=seed, difficulty=p.difficulty, sft_tasks=p.sft_tasks,
                            cache_dir=CACHE, demo_style=style)
            ev = kv_agent.generate(c.eval.num_tasks, split="eval", seed=c.eval.seed, difficulty=p.difficulty)
            out = run_episodes(m, starts_for(ev, tok, c.eval.samples_per_task), lambda: KVStoreEnv(fault_prob=0.0),
                               jax.random.PRNGKey(1), tokenizer=tok,
                               sampling=SamplingParams(temperature=1.0, max_new_tokens=c.sampling.max_new_tokens),
                               max_turns=p.max_turns, max_tokens=c.model.max_seq_len,
                               verify=outcome_verify(KVOutcomeVerifier()))
            # an episode is non-canonical if any action differs from the canonical oracle at its state
            ok = [e for e in out.episodes if e.reward > 0]
            noncanon = sum(any(a.rstrip("\n") != oracle_action(s.state()).rstrip("\n") for a, s in zip(e.actions, e.snapshots))
                           for e in ok)
            s = out.stats["rollout/success"]
            succ.setdefault(style, []).append(s)
            rows.append([style, str(seed), f"{s:.3f}", f"{noncanon}/{len(ok)}"])
            print(rows[-1], flush=True)
    body = table(rows, ["demo style", "seed", "held-out success after SFT",
                        "successful episodes not in canonical form"])
    body += "\n\n" + table([[k, mean_std(v)] for k, v in succ.items()], ["demo style", "success (mean ± std)"])
    write_report("demo_style", "Warm-start success: canonical vs diverse demonstrations", body,
                 {"pivot": base_pivot_config(0).pivot.to_dict(), "sft_steps": base_pivot_config(0).train.sft_steps}, t0)


if __name__ == "__main__":
    main()
