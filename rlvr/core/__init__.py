"""rlvr.core."""
