"""rlvr.models."""
