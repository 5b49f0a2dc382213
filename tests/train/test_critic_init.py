"""The critic starts from the warm-started policy, and its frozen part is part of the state.

Value pre-training starts from the policy (docs/algorithms.md §7): with an SFT warm start the critic's
trunk must be the warm-started trunk, not the random one the run was built with; with frozen
attention (docs/algorithms.md §7) the frozen weights live in `TrainState.critic_params` (checkpointed with them)
and updates leave them unchanged while the MLP projections move.
"""

import numpy as np
from flax import nnx

from rlvr.train import loop
from rlvr.train.config import validate_config
from rlvr.train.setup import build_run
from tests.train.tiny import tiny_config


def _flat(state) -> dict:
    return {tuple(map(str, k)): np.asarray(v[...]) for k, v in nnx.to_flat_state(state)}


def test_critic_trunk_is_the_warm_started_policy_and_frozen_parts_stay(tmp_path):
    c = tiny_config(algorithm__name="ppo", algorithm__critic_freeze_attention=True,
                    train__num_minibatches=1, eval__num_tasks=0, checkpoint__every=-1)
    validate_config(c)
    r = build_run(c, str(tmp_path))
    try:
        initial = _flat(nnx.state(r.model_of(r.init_params).model, nnx.Param))
        params, _ = loop._sft(r, None)
        policy = _flat(nnx.state(r.model_of(params).model, nnx.Param))
        state = r.init_state(params)
        critic = _flat(state.critic_params)
        trunk = {k[1:]: v for k, v in critic.items() if k[0] == "model"}
        assert trunk.keys() == policy.keys()
        for k, v in policy.items():
            np.testing.assert_array_equal(trunk[k], v, err_msg=str(k))
        moved = [k for k in policy if not np.array_equal(policy[k], initial[k])]
        assert moved, "the warm start did not change the policy: the test cannot tell the trunks apart"

        for step in range(2):  # the value head starts at zero: the trunk moves from step 2
            got = r.collector.collect(r.sampling_params(state.params), step, step)
            batch = got.batch.replace(rewards=np.ones_like(np.asarray(got.batch.rewards)))
            state, _ = r.learn(state, batch)  # returns of 1 against values of 0: a gradient
        after = _flat(state.critic_params)
    finally:
        r.close()
    attention = [k for k in critic if "self_attn" in k]
    mlp = [k for k in critic if "mlp" in k]
    assert attention and mlp
    for k in attention:
        np.testing.assert_array_equal(after[k], critic[k], err_msg=str(k))
    assert any(not np.array_equal(after[k], critic[k]) for k in mlp)
