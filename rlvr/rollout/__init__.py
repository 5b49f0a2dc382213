"""rlvr.rollout."""
