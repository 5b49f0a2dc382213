"""Value model (critic) for PPO / SAO: the policy trunk plus a scalar head per token (docs/algorithms.md §7).

`values[:, t]` is V(s_t) where s_t is the prefix tokens[:, :t+1] (the state after token t),
the alignment Skip-Observation GAE (docs/algorithms.md (A.6)) expects. `ValueModel.from_policy` copies the
trunk of a policy (value pre-training starts from the policy, docs/algorithms.md §7);
`trainable_filter(freeze_attention=True)` selects only the MLP projections and the value head,
the setting SAO trains the critic with (docs/algorithms.md §7: attention frozen, only MLP / MoE projections).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from rlvr.models.config import ModelConfig
from rlvr.models.transformer import Decoder, Linear, Transformer, _check_inputs


class ValueModel(nnx.Module):
    """`model(tokens, *, positions=None, attention_mask=None) -> values [B, T]` (float32)."""

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs, remat: bool = False):
        if not isinstance(config, ModelConfig):
            raise ValueError(f"config must be a ModelConfig, got {type(config).__name__}")
        self.config = config
        self.model = Decoder(config, rngs=rngs, remat=remat)
        self.value_head = Linear(config.hidden_size, 1, axes=("embed", None), use_bias=True,
                                 dtype=jnp.float32, param_dtype=jnp.float32, rngs=rngs, std=0.0)

    def hidden_states(self, tokens, *, positions=None, attention_mask=None):
        tokens, positions, attention_mask = _check_inputs(tokens, positions, attention_mask)
        return self.model(tokens, positions, attention_mask)

    def __call__(self, tokens, *, positions=None, attention_mask=None) -> jnp.ndarray:
        h = self.hidden_states(tokens, positions=positions, attention_mask=attention_mask)
        return self.value_head(h.astype(jnp.float32))[..., 0]

    @classmethod
    def from_policy(cls, policy: Transformer, *, rngs: nnx.Rngs) -> "ValueModel":
        """A critic whose trunk is a copy of `policy`'s (embedding, blocks, final norm). A LoRA
        policy's trunk is copied merged (adapters folded in, a quantised base dequantised): the
        critic is a full model."""
        if not isinstance(policy, Transformer):
            raise ValueError(f"policy must be a Transformer, got {type(policy).__name__}")
        from rlvr.models import lora

        if lora.has_adapters(policy):
            policy = lora.merge(policy)
        value = cls(policy.config, rngs=rngs, remat=policy.model.remat)
        trunk = jax.tree.map(jnp.copy, nnx.state(policy.model, nnx.Param))
        nnx.update(value.model, trunk)
        return value


def trainable_filter(freeze_attention: bool):
    """nnx filter of the critic's trainable parameters.

    freeze_attention=False: every `nnx.Param`. True (docs/algorithms.md §7): only the MLP projections
    (`gate_proj`, `up_proj`, `down_proj` under `mlp`) and the value head; embeddings, norms
    and attention stay fixed.
    """
    if not freeze_attention:
        return nnx.Param
    return nnx.All(nnx.Param, nnx.Any(nnx.PathContains("mlp"), nnx.PathContains("value_head")))
