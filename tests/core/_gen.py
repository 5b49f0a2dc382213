"""Random test inputs for rlvr.core tests: ragged multi-turn masks and group rewards."""

import numpy as np


def multiturn_mask(rng, batch, length, *, empty_rows=(), max_action=5, max_obs=6):
    """[batch, length] float32 loss masks laid out as prompt, (action, observation)*, padding.

    Actions and observation blocks have random lengths (1..max_action, 1..max_obs); a random
    amount of padding is left at the end; rows listed in `empty_rows` have no policy token.
    """
    mask = np.zeros((batch, length), np.float32)
    for b in range(batch):
        if b in empty_rows:
            continue
        t = int(rng.integers(0, 4))  # prompt
        end = length - int(rng.integers(0, max(1, length // 4)))  # padding at the end
        while t < end:
            a = int(rng.integers(1, max_action + 1))
            mask[b, t : min(t + a, end)] = 1
            t += a + int(rng.integers(1, max_obs + 1))
    return mask


def group_rewards(rng, num_groups, group_size, *, binary=True):
    """Rewards with all-equal groups, a group with every sample invalid, and random validity."""
    if binary:
        r = rng.integers(0, 2, (num_groups, group_size)).astype(np.float32)
    else:
        r = rng.normal(size=(num_groups, group_size)).astype(np.float32)
    valid = rng.random((num_groups, group_size)) < 0.8
    if num_groups >= 3:
        r[0] = 1.0  # all correct
        r[1] = 0.3  # all equal, non-binary constant
        valid[2] = False  # every sample invalid
    return r, valid
