"""Supervised warm-start from task demonstrations (seed 002 §1: SFT initialises format/ability).

A demonstration row is `[bos] + prompt + completion + [eos]`; the loss is the token-mean NLL on
the completion and eos only (`loss_mask`), exact under gradient accumulation (the learner's
minibatch-wide denominators). Uses the same learner (`make_update`) as RL.
"""

from __future__ import annotations

from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm.auto import tqdm

from rlvr.algorithms.base import aggregate_exact
from rlvr.models import scoring
from rlvr.train.learner import make_update


def demo_batch(tokenizer, prompts: Sequence[str], completions: Sequence[str], length: int) -> dict:
    """Right-padded [B, length] arrays: tokens, attention_mask, positions, loss_mask, valid."""
    b = len(prompts)
    tokens = np.full((b, length), tokenizer.pad_id, np.int32)
    loss_mask = np.zeros((b, length), np.float32)
    attn = np.zeros((b, length), bool)
    for i, (p, c) in enumerate(zip(prompts, completions)):
        pi = [tokenizer.bos_id] + tokenizer.encode(p)
        ci = tokenizer.encode(c) + [tokenizer.eos_id]
        row = (pi + ci)[:length]
        tokens[i, : len(row)] = row
        attn[i, : len(row)] = True
        loss_mask[i, len(pi): len(row)] = 1.0
    positions = np.where(attn, np.cumsum(attn, 1) - 1, 0).astype(np.int32)
    return {"tokens": jnp.asarray(tokens), "attention_mask": jnp.asarray(attn),
            "positions": jnp.asarray(positions), "loss_mask": jnp.asarray(loss_mask),
            "valid": jnp.ones((b,), bool)}


def run_sft(
    params,
    graphdef,
    rest,
    *,
    tokenizer,
    make_examples: Callable[[int], tuple[list[str], list[str]]],
    steps: int,
    learning_rate: float,
    length: int,
    num_microbatches: int = 1,
    seed: int = 0,
    progress: bool = True,
    log_fn: Callable[[int, dict], None] | None = None,
):
    """Trains `params` for `steps` SFT steps; returns (params, last metrics).

    make_examples(step) -> (prompts, completions) gives each step's demonstrations (seeded by
    step, so runs are reproducible).
    """
    from rlvr.train.state import create_train_state

    opt = optax.adamw(learning_rate, weight_decay=0.0)
    state = create_train_state(params, opt, seed=seed)
    update = make_update(graphdef, sft_loss, opt, num_microbatches=num_microbatches, rest=rest,
                         prefix="sft/")
    step_fn = jax.jit(lambda s, b: update(s, b, {}, s.rng), donate_argnums=0)
    metrics = {}
    for i in tqdm(range(steps), desc="sft", disable=not progress, leave=False):
        prompts, completions = make_examples(i)
        state, metrics = step_fn(state, demo_batch(tokenizer, prompts, completions, length))
        if log_fn is not None and (i % 10 == 0 or i == steps - 1):
            log_fn(i, jax.device_get(metrics))
    return state.params, jax.device_get(metrics)


def sft_loss(model, mb, aux):
    """Token-mean negative log-likelihood on loss_mask tokens (exact under accumulation)."""
    m = mb["loss_mask"] > 0
    logprobs, _ = scoring.token_logprobs(model, mb["tokens"], positions=mb["positions"],
                                         attention_mask=mb["attention_mask"], temperature=1.0)
    nll = aggregate_exact(-logprobs, m, "token-mean", aux)
    return nll, {"nll": nll}
