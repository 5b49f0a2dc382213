"""rlvr.parallel."""
