"""Why is the SAO critic's explained variance ≈ 0 in the ablation runs? (issue 6 follow-up)

Fixed batches of warm-policy rollouts (configs/sao.py defaults, 4 × learn_batch train episodes,
as many held-out episodes): a critic initialised from the policy (as in the loop) is trained with
the loop's critic step (token-aligned values V(s_t) = critic output at t−1, Skip-Observation GAE
returns with the config's γ, λ, value loss on action tokens, the config's critic learning rate)
for up to 200 steps. Reported: explained variance of the Monte-Carlo outcome (the λ = 1 return,
i.e. the episode's reward on each action token) by V(s_t) on the training batch and on the
held-out batch, after 0, 5, 10, 25, 50, 100, 200 critic steps. The loop itself makes
value_pretrain_steps + critic_updates × ~10 ≈ 25 critic steps per run.
Arms: lr = config (1e-3); lr × 3; and the pre-fix loop (raw critic output at t, which has already
read the action token t it judges).

    python experiments/sao_critic_check.py --seeds 2
"""

import time

import common  # noqa: F401
from common import CACHE, base_sao_config, mean_std, parse, table, write_report

CHECKPOINTS = (0, 5, 10, 25, 50, 100, 200)


def main():
    args = parse(__doc__)
    t0 = time.time()
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    from rlvr.algorithms.critic import align_values
    from rlvr.algorithms.sao import sao_advantages, sao_value_loss
    from rlvr.core.losses import explained_variance
    from rlvr.envs.kv_store import KVStoreEnv
    from rlvr.models.value import ValueModel
    from rlvr.rollout.agent_loop import run_episodes
    from rlvr.rollout.sampler import SamplingParams
    from rlvr.tasks import kv_agent
    from rlvr.train.agent_setup import make_tokenizer, outcome_verify, starts_for, warm_policy
    from rlvr.learner import make_optimizer, make_update
    from rlvr.train.sao_loop import _batch_dict
    from rlvr.records.state import create_train_state
    from rlvr.verifiers.kv_agent import KVOutcomeVerifier

    tok = make_tokenizer()
    term = tok.encode("\n")[0]
    res = {}
    stats_rows = []
    for seed in range(args.seeds):
        c = base_sao_config(seed)
        s, T = c.sao, c.model.max_seq_len
        model = warm_policy(c, tok, seed=seed, difficulty=s.difficulty, sft_tasks=s.sft_tasks,
                            cache_dir=CACHE, demo_style=s.demo_style)
        tasks = kv_agent.generate(s.num_tasks, split="train", seed=seed, difficulty=s.difficulty)
        rng = np.random.default_rng(seed)
        samp = SamplingParams(temperature=1.0, max_new_tokens=c.sampling.max_new_tokens,
                              stop_token_ids=(term, tok.eos_id))

        def batch(k):
            ts = [tasks[j] for j in rng.choice(len(tasks), 4 * s.learn_batch)]
            out = run_episodes(model, starts_for(ts, tok), lambda: KVStoreEnv(fault_prob=0.0), k,
                               tokenizer=tok, sampling=samp, max_turns=s.max_turns, max_tokens=T,
                               verify=outcome_verify(KVOutcomeVerifier()))
            return _batch_dict(out.batch, T)

        tr, ho = batch(jax.random.PRNGKey(seed)), batch(jax.random.PRNGKey(seed + 100))
        stats_rows.append([str(seed), f"{tr['rewards'].mean():.3f}", f"{ho['rewards'].mean():.3f}",
                           f"{tr['loss_mask'].sum(1).mean():.1f}"])
        for arm, lr_mult, aligned in [("aligned, lr 1x", 1.0, True), ("aligned, lr 3x", 3.0, True),
                                      ("raw output at t (pre-fix), lr 1x", 1.0, False)]:
            critic = ValueModel.from_policy(model, rngs=nnx.Rngs(seed + 1))
            cg, cp, cr = nnx.split(critic, nnx.Param, ...)
            opt = make_optimizer(c.algorithm.critic_learning_rate * lr_mult, max_grad_norm=c.optimizer.max_grad_norm)
            st = create_train_state(cp, opt, seed=seed, critic_params=cp, critic_optimizer=opt)
            fix = align_values if aligned else (lambda v: v)

            def loss(mdl, mb, aux, fix=fix):
                v = fix(mdl(mb["tokens"], positions=mb["positions"], attention_mask=mb["attention_mask"]))
                return sao_value_loss(v, mb["old_values"], mb["returns"], mb["loss_mask"], aux=aux)

            upd = jax.jit(make_update(cg, loss, opt, params_field="critic_params", opt_field="critic_opt_state",
                                      rest=cr, prefix="critic/"))
            vals = jax.jit(lambda p, b, fix=fix, cg=cg, cr=cr: fix(nnx.merge(cg, p, cr)(
                b["tokens"], positions=b["positions"], attention_mask=b["attention_mask"])))

            def ev(p, b):
                m = b["loss_mask"]
                mc = np.asarray(b["rewards"])[:, None] * np.ones_like(m)  # λ = 1 return (γ = 1)
                return float(explained_variance(vals(p, b), jnp.asarray(mc), jnp.asarray(m) > 0))

            curve = {}
            for i in range(max(CHECKPOINTS) + 1):
                if i in CHECKPOINTS:
                    curve[i] = (ev(st.critic_params, tr), ev(st.critic_params, ho))
                if i == max(CHECKPOINTS):
                    break
                v = vals(st.critic_params, tr)
                _, ret = sao_advantages(tr["rewards"], v, tr["loss_mask"], gamma=c.algorithm.gamma,
                                        lam=c.algorithm.gae_lambda, valid=tr["valid"])
                b = {k: x for k, x in tr.items() if k != "rewards"}
                st, _ = upd(st, dict(b, old_values=v, returns=ret), {}, jax.random.PRNGKey(i))
            res.setdefault(arm, []).append(curve)
            print(seed, arm, {k: (round(a, 3), round(b, 3)) for k, (a, b) in curve.items()}, flush=True)
    rows = []
    for arm, curves in res.items():
        for which, j in (("train batch", 0), ("held-out batch", 1)):
            rows.append([arm, which] + [mean_std([cv[k][j] for cv in curves]) for k in CHECKPOINTS])
    body = table(rows, ["critic", "EV on"] + [f"{k} steps" for k in CHECKPOINTS])
    body += "\n\n" + table(stats_rows, ["seed", "success (train batch)", "success (held-out batch)",
                                         "action tokens / episode"])
    c = base_sao_config(0)
    write_report("sao_critic_check", "SAO critic: explained variance vs critic steps on fixed rollouts", body,
                 {"critic_learning_rate": c.algorithm.critic_learning_rate, "gamma": c.algorithm.gamma,
                  "gae_lambda": c.algorithm.gae_lambda, "episodes_per_batch": 4 * c.sao.learn_batch,
                  "demo_style": c.sao.demo_style}, t0)


if __name__ == "__main__":
    main()
