"""Environment faults that cross layers (raised by remote environments, handled by the agent
loop and the judge)."""


class EnvironmentLost(RuntimeError):
    """The environment could not answer (its worker or service is gone, or a call timed out):
    an environment fault, so the episode ends as env_error (masked), never as a policy failure."""
