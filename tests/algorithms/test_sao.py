"""SAO pieces: observation tokens get no advantage and no policy gradient (docs/architecture.md §3, docs/algorithms.md (A.6), (A.19));
staleness weights scale the loss; the critic learns episode outcomes."""

import jax
import jax.numpy as jnp
import numpy as np

from rlvr.records.batch import TrainingBatch
from rlvr.algorithms.base import last_token_rewards
from rlvr.core.gae import gae
from tests.algorithms.helpers import build


def _stream():
    # prompt(2) a0(3) o(2) a1(2) o(3) a2(2) pad(2): 1 = policy token
    lm = np.array([[0, 0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 0],
                   [0, 1, 1, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0]], np.float32)
    return lm


def _aux(lm):
    from rlvr.learner import batch_denominators

    return dict(batch_denominators(TrainingBatch(loss_mask=jnp.asarray(lm),
                                                 valid=jnp.ones(lm.shape[0], bool))),
                kl_coef=0.0)


def test_terminal_reward_on_last_policy_token():
    lm = _stream()
    tr = np.asarray(last_token_rewards(jnp.array([1.0, 2.0]), lm))
    assert tr[0, 13] == 1.0 and tr[1, 9] == 2.0 and tr.sum() == 3.0


def test_skip_observation_advantages_match_numpy_reference():
    lm = _stream()
    rng = np.random.default_rng(0)
    values = rng.normal(size=lm.shape).astype(np.float32)
    rewards = np.array([1.0, 0.0], np.float32)
    gamma, lam = 0.9, 0.8
    adv, ret = gae(last_token_rewards(jnp.asarray(rewards), lm), values, lm > 0, gamma=gamma,
                   lam=lam, skip_observations=True)
    adv = np.asarray(adv)
    ref = np.zeros_like(values)
    for b in range(2):
        idx = np.nonzero(lm[b])[0]
        a_next, v_next = 0.0, 0.0
        for j in reversed(range(len(idx))):
            t = idx[j]
            r = rewards[b] if j == len(idx) - 1 else 0.0
            delta = r + gamma * v_next - values[b, t]
            a_next = delta + gamma * lam * a_next
            v_next = values[b, t]
            ref[b, t] = a_next
    np.testing.assert_allclose(adv, ref, rtol=1e-5, atol=1e-6)
    assert np.all(adv[lm == 0] == 0)


def test_observation_tokens_get_no_policy_gradient():
    algo, _ = build("sao", clip_low=0.5, clip_high=0.5, normalize_advantages=True)
    lm = _stream()
    rng = np.random.default_rng(1)
    values = rng.normal(size=lm.shape).astype(np.float32)
    behavior = rng.normal(scale=0.1, size=lm.shape).astype(np.float32) * lm
    for skip in (True, False):
        adv, _ = gae(last_token_rewards(jnp.array([1.0, 0.0]), lm), values, lm > 0, gamma=1.0,
                     lam=0.95, skip_observations=skip)
        tb = algo.weight_advantages(TrainingBatch(advantages=adv, loss_mask=lm,
                                                  sample_weights=jnp.array([1.0, 0.5])))
        assert np.all(np.asarray(tb.advantages)[lm == 0] == 0)
        mb = TrainingBatch(loss_mask=lm, valid=np.ones(2, bool), old_logprobs=behavior,
                           advantages=tb.advantages)

        def f(lp):
            return algo.policy_objective(lp, jnp.zeros_like(lp), mb, _aux(lm))[0]

        lp = jnp.asarray(behavior + 0.01 * rng.normal(size=lm.shape).astype(np.float32))
        g = np.asarray(jax.grad(f)(lp))
        assert np.all(g[lm == 0] == 0)
        assert np.any(g[lm == 1] != 0)


def test_staleness_weight_scales_loss_linearly():
    algo, _ = build("sao")
    lm = _stream()
    lp = jnp.zeros(lm.shape)
    losses = []
    for w in (1.0, 0.5):
        tb = algo.weight_advantages(TrainingBatch(advantages=jnp.asarray(lm), loss_mask=lm,
                                                  sample_weights=jnp.array([w, w])))
        mb = TrainingBatch(loss_mask=lm, valid=np.ones(2, bool), old_logprobs=lp,
                           advantages=tb.advantages)
        losses.append(float(algo.policy_objective(lp, jnp.zeros_like(lp), mb, _aux(lm))[0]))
    np.testing.assert_allclose(losses[1], 0.5 * losses[0], rtol=1e-6)


def test_critic_learns_outcomes_on_fixed_kv_rollouts():
    """The SAO critic step (token-aligned values → Skip-Observation GAE returns → value loss) on a
    fixed batch of KV episodes whose outcomes vary (a `del` minefield fails an otherwise correct
    episode): value loss falls and explained variance rises (so EV ≈ 0 in short runs is not an
    alignment / target bug)."""
    import dataclasses

    from flax import nnx

    from rlvr.algorithms import AlgorithmSettings, SAO
    from rlvr.algorithms.critic import token_values
    from rlvr.core.losses import explained_variance
    from rlvr.envs.kv_store import ALPHABET, KVStoreEnv
    from rlvr.learner import make_optimizer, make_update
    from rlvr.models import ModelConfig, ValueModel
    from rlvr.models.tokenizer import CharTokenizer
    from rlvr.records.state import create_train_state
    from rlvr.tasks import kv_agent
    from rlvr.verifiers.kv_agent import KVOutcomeVerifier

    tok = CharTokenizer(ALPHABET)
    T = 48
    toks, masks, rewards = [], [], []
    for i, task in enumerate(kv_agent.generate(24, seed=5, difficulty="easy")):
        actions = [x.action for x in kv_agent.demonstrations(task, style="diverse")]
        if i % 2:  # delete a distractor first: minefield → fail
            qk = {k for _, k in task.environment_snapshot["state"]["query"]}
            d = sorted(set(task.environment_snapshot["state"]["registers"]) - qk)[0]
            actions = [f"del {d}\n"] + actions
        env = KVStoreEnv(fault_prob=0.0)
        env.reset(task, seed=task.random_seed)
        ids, m = [tok.bos_id] + tok.encode(task.prompt), []
        m = [0.0] * len(ids)
        for a in actions:
            obs = env.step(a).observation
            ids += tok.encode(a) + tok.encode(obs)
            m += [1.0] * len(tok.encode(a)) + [0.0] * len(tok.encode(obs))
        assert len(ids) <= T
        toks.append(ids + [tok.pad_id] * (T - len(ids)))
        masks.append(m + [0.0] * (T - len(m)))
        rewards.append(float(KVOutcomeVerifier().verify_env(task, env).passed))
    rewards = np.array(rewards, np.float32)
    assert 0 < rewards.mean() < 1
    toks = np.array(toks, np.int32)
    lm = np.array(masks, np.float32)
    am = np.array([[j < n for j in range(T)] for n in (lm.shape[1] - np.argmax((toks != tok.pad_id)[:, ::-1], 1))])
    bd = TrainingBatch(tokens=toks, positions=np.where(am, np.cumsum(am, 1) - 1, 0).astype(np.int32),
                       attention_mask=am, loss_mask=lm, valid=np.ones(len(toks), bool))

    cfg = ModelConfig(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64, num_layers=1,
                      num_heads=2, num_kv_heads=2, head_dim=16, max_position_embeddings=64)
    critic = ValueModel(cfg, rngs=nnx.Rngs(0))
    cgraph, cparams, crest = nnx.split(critic, nnx.Param, ...)
    copt = make_optimizer(3e-3, max_grad_norm=1.0)
    state = create_train_state(cparams, copt, seed=0, critic_params=cparams, critic_optimizer=copt)
    sao = SAO(dataclasses.replace(AlgorithmSettings(), name="sao", value_clip=0.0, value_coef=1.0),
              policy_graphdef=cgraph, optimizer=copt, critic_graphdef=cgraph, critic_rest=crest,
              critic_optimizer=copt)

    cupdate = jax.jit(make_update(cgraph, sao.critic_loss, copt, params_field="critic_params",
                                  opt_field="critic_opt_state", rest=crest, prefix="critic/"))
    values_of = jax.jit(lambda cp: token_values(nnx.merge(cgraph, cp, crest), bd.tokens,
                                                positions=bd.positions, attention_mask=bd.attention_mask))
    losses, evs = [], []
    for step in range(60):  # the loop's critic_step: advantages/targets from the pre-update critic
        vals = values_of(state.critic_params)
        _, ret = gae(last_token_rewards(jnp.asarray(rewards), lm), vals, lm > 0, gamma=1.0, lam=0.95,
                     skip_observations=True)
        evs.append(float(explained_variance(vals, ret, lm > 0)))
        state, met = cupdate(state, bd.replace(old_values=vals, returns=ret), {}, jax.random.PRNGKey(step))
        losses.append(float(met["critic/value_loss"]))
    # targets: with γ = 1 the return on every action token is the outcome (up to λ-mixing of V)
    assert losses[-1] < 0.3 * losses[0], losses
    assert evs[0] < 0.2 and evs[-1] > 0.5, evs
