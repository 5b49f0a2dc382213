"""rlvr.algorithms."""
