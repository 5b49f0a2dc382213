"""rlvr.verifiers."""
