"""rlvr.train."""
