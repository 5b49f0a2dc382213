"""`TrainState`: everything the learner carries between steps (docs/architecture.md §3, (B.1)).

A flax.struct pytree, so it is jit/donate/shard friendly and orbax saves it as one tree. Model
structure (the nnx GraphDef) is *not* in the state: the learner holds it statically and merges
`params` back into a module inside jit.
"""

from __future__ import annotations

from typing import Any, Optional

import jax
import jax.numpy as jnp
from flax import nnx, struct


@struct.dataclass
class TrainState:
    """Learner state.

    Attributes:
      params: nnx.State of the policy's nnx.Param variables.
      opt_state: optax state for `params`.
      step: int32 scalar, optimiser-independent count of learner updates (RL steps).
      rng: uint32[2] raw PRNG key (checkpointable); split for shuffling / sampling.
      policy_version: int32 scalar, bumped each time new params are published to rollout (docs/architecture.md §3).
      ref_params: optional nnx.State of the frozen reference policy (KL, docs/algorithms.md (A.13)-(A.15)); None with a LoRA
        policy, whose reference is its base with the adapters off (rlvr.models.lora).
      critic_params: optional nnx.State of the critic (PPO / SAO).
      critic_opt_state: optional optax state for `critic_params`.
      kl_controller: optional rlvr.core.kl.KLControllerState (β, fixed or adapted by docs/algorithms.md (A.15)).
      extras: dict of algorithm state arrays (e.g. REINFORCE running baseline); may be empty.
    """

    params: Any
    opt_state: Any
    step: jnp.ndarray
    rng: jnp.ndarray
    policy_version: jnp.ndarray
    ref_params: Optional[Any] = None
    critic_params: Optional[Any] = None
    critic_opt_state: Optional[Any] = None
    kl_controller: Optional[Any] = None
    extras: dict = struct.field(default_factory=dict)


def split_model(model: nnx.Module):
    """(graphdef, params, rest): params are nnx.Param variables, rest everything else."""
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    return graphdef, params, rest


def split_trainable(params, trainable):
    """(trainable, frozen) nnx.States of `params` by the nnx filter `trainable` (e.g.
    `nnx.LoRAParam`); `nnx.merge_state(trainable, frozen)` gives `params` back."""
    return nnx.split_state(params, trainable, ...)


def create_train_state(
    params,
    optimizer,
    *,
    seed: int,
    ref_params=None,
    critic_params=None,
    critic_optimizer=None,
    kl_controller=None,
    extras: Optional[dict] = None,
    trainable=None,
    critic_trainable=None,
) -> TrainState:
    """Builds the initial state; copies `ref_params` so the reference never aliases the policy.

    trainable: nnx filter of the parameters the learner trains (None: all); the optimiser state
    covers only those (a LoRA policy: its adapters). critic_trainable: the same for the critic
    (SAO's frozen attention: its MLP projections and value head); the frozen rest stays in
    `critic_params`, so it is checkpointed with them.
    """
    critic_opt_state = None
    if critic_params is not None:
        if critic_optimizer is None:
            raise ValueError("create_train_state: critic_params given without critic_optimizer")
        critic_opt_state = critic_optimizer.init(
            critic_params if critic_trainable is None
            else split_trainable(critic_params, critic_trainable)[0])
    if ref_params is not None:
        ref_params = jax.tree.map(jnp.copy, ref_params)
    return TrainState(
        params=params,
        opt_state=optimizer.init(params if trainable is None else
                                 split_trainable(params, trainable)[0]),
        step=jnp.zeros((), jnp.int32),
        rng=jax.random.PRNGKey(seed),
        policy_version=jnp.zeros((), jnp.int32),
        ref_params=ref_params,
        critic_params=critic_params,
        critic_opt_state=critic_opt_state,
        kl_controller=kl_controller,
        extras=dict(extras or {}),
    )
