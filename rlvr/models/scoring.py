def token_logprobs(*a, **k): raise NotImplementedError
