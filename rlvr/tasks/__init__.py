"""rlvr.tasks."""
