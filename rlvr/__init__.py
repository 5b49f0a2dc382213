"""rlvr: JAX-native reinforcement learning with verifiable rewards.

Layout (see docs/architecture.md §2): core/ pure array math; models/ flax.nnx transformers; rollout/ sampling
and multi-turn agent loops; envs/ stateful tool environments; tasks/ TaskSpec and generators;
verifiers/ Verdicts and rewards; algorithms/ GRPO, RLOO, REINFORCE, PPO, PivotRL, SAO; train/
learner steps, loops, checkpoints, metrics; parallel/ meshes and partition rules.
"""

__version__ = "0.1.0"
