"""rlvr.envs."""
