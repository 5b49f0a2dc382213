"""Supervised warm start from a task kit's demonstrations (: SFT initialises format
and ability before RL).

A demonstration is one token stream with a loss mask (`demo_stream`):
  * single-turn: `[bos] + prompt + completion + [eos]`, loss on the completion and eos;
  * multi-turn: `[bos] + prompt + (action + observation)*`, loss on the action tokens only (docs/architecture.md §3:
    observations are the environment's, never the policy's).
The loss is the token-mean NLL on the masked tokens, exact under gradient accumulation (the
learner's minibatch-wide denominators), through the same learner (`make_update`) as RL, its LM
head + log-softmax run as the RL learner's (`logprob_impl`: `rlvr.models.scoring`'s "chunked",
"vocab_tiled" or "pallas", the config's `train.logprob_impl`).

Batches: `pool = 0` draws fresh training tasks every step (seeded by the step); `pool = N` draws
each step's batch from a fixed pool of N tasks. `cache_dir` keeps the warm-started parameters keyed
by everything that determines them (experiments share one warm start across arms).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from typing import Any, Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm.auto import tqdm

from rlvr.algorithms.base import aggregate_exact
from rlvr.learner import make_update
from rlvr.models import fused_head, scoring
from rlvr.models.prompts import PromptRenderer
from rlvr.records.batch import TrainingBatch
from rlvr.records.state import create_train_state
from rlvr.train.collectors import stream_seed


def demo_stream(kit, task, tokenizer, renderer=None) -> tuple[list[int], list[float]]:
    """(token ids, loss mask) of the kit's demonstration of `task` (module docstring); the
    prompt rendered by `renderer` (default [bos] + prompt), a single-turn completion closed by
    its `end_id` (eos, or the chat template's end-of-turn token)."""
    renderer = renderer or PromptRenderer(tokenizer)
    ids = renderer.encode(task.prompt)
    mask = [0.0] * len(ids)
    demo = kit.demonstration(task)
    if kit.multi_turn:
        for turn in demo:
            a, o = tokenizer.encode(turn.action), tokenizer.encode(turn.observation)
            ids += a + o
            mask += [1.0] * len(a) + [0.0] * len(o)
    else:
        c = list(tokenizer.encode(demo)) + [renderer.end_id]
        ids += c
        mask += [1.0] * len(c)
    return ids, mask


def sft_batch(streams: Sequence[tuple[list[int], list[float]]], length: int, pad_id: int) -> TrainingBatch:
    """Right-padded (and cut to `length`) [B, length] arrays: tokens, attention_mask, positions,
    loss_mask, valid."""
    b = len(streams)
    tokens = np.full((b, length), pad_id, np.int32)
    loss_mask = np.zeros((b, length), np.float32)
    attn = np.zeros((b, length), bool)
    for i, (ids, mask) in enumerate(streams):
        n = min(len(ids), length)
        tokens[i, :n] = ids[:n]
        loss_mask[i, :n] = mask[:n]
        attn[i, :n] = True
    positions = np.where(attn, np.cumsum(attn, 1) - 1, 0).astype(np.int32)
    return TrainingBatch(tokens=jnp.asarray(tokens), attention_mask=jnp.asarray(attn),
                         positions=jnp.asarray(positions), loss_mask=jnp.asarray(loss_mask),
                         valid=jnp.ones((b,), bool))


def sft_loss(model, mb, aux, *, impl: str = "chunked", interpret: bool = False, mesh=None):
    """Token-mean negative log-likelihood on loss_mask tokens (exact under accumulation).

    mb: a `TrainingBatch` of [B, T] tokens / positions / attention_mask / loss_mask; aux: the
    learner's minibatch-wide denominators. impl, interpret, mesh: how the LM head + log-softmax
    run (`rlvr.models.scoring.token_logprobs`)."""
    m = mb.loss_mask > 0
    logprobs, _ = scoring.token_logprobs(model, mb.tokens, positions=mb.positions,
                                         attention_mask=mb.attention_mask, temperature=1.0,
                                         impl=impl, interpret=interpret, mesh=mesh)
    nll = aggregate_exact(-logprobs, m, "token-mean", aux)
    return nll, {"nll": nll}


def warm_start(params, graphdef, rest, *, kit, tokenizer, steps: int, batch_size: int,
               learning_rate: float, length: int, seed: int, pool: int = 0,
               num_microbatches: int = 1, progress: bool = True,
               log_fn: Optional[Callable[[int, dict], None]] = None,
               cache_dir: Optional[str] = None, cache_spec: Any = None, renderer=None,
               logprob_impl: str = "chunked", logprob_interpret: bool = False,
               logprob_mesh=None):
    """Trains `params` for `steps` SFT steps on the kit's demonstrations; returns
    (params, last metrics). With `cache_dir`, parameters are loaded from / saved to
    `<cache_dir>/warm_<hash>.npz`, the hash covering `cache_spec` (what determines the result:
    model, SFT settings, task, seed, code version) and these arguments. logprob_impl,
    logprob_interpret, logprob_mesh: how the loss's LM head + log-softmax run (`sft_loss`; a run
    passes its algorithm's `AlgorithmSettings.logprob_impl` / `logprob_interpret` and its
    `Algorithm.mesh`)."""
    fused_head.check_impl(logprob_impl, interpret=logprob_interpret)
    path = None
    if cache_dir:
        spec = json.dumps([cache_spec, steps, batch_size, learning_rate, length, seed, pool,
                           num_microbatches, logprob_impl], sort_keys=True, default=str)
        path = os.path.join(cache_dir, f"warm_{hashlib.sha256(spec.encode()).hexdigest()[:16]}.npz")
        if os.path.exists(path):
            leaves, treedef = jax.tree.flatten(params)
            data = np.load(path)
            return jax.tree.unflatten(treedef, [jnp.asarray(data[f"p{i}"], x.dtype)
                                                for i, x in enumerate(leaves)]), {}
    source = kit.source
    tasks_pool = list(source.sample(pool, seed=stream_seed(seed, "sft-pool"))) if pool else None

    def tasks_of(i):
        if tasks_pool is None:
            return source.sample(batch_size, seed=stream_seed(seed, "sft", i))
        rng = np.random.default_rng(stream_seed(seed, "sft-draw", i))
        return [tasks_pool[j] for j in rng.choice(len(tasks_pool), batch_size,
                                                 replace=len(tasks_pool) < batch_size)]

    opt = optax.adamw(learning_rate, weight_decay=0.0)
    state = create_train_state(params, opt, seed=seed)
    loss = functools.partial(sft_loss, impl=logprob_impl, interpret=logprob_interpret,
                             mesh=logprob_mesh)
    update = make_update(graphdef, loss, opt, num_microbatches=num_microbatches, rest=rest,
                         prefix="sft/")
    step_fn = jax.jit(lambda s, b: update(s, b, {}, s.rng), donate_argnums=0)
    metrics = {}
    for i in tqdm(range(steps), desc="sft", disable=not progress, leave=False):
        streams = [demo_stream(kit, t, tokenizer, renderer) for t in tasks_of(i)]
        state, metrics = step_fn(state, sft_batch(streams, length, tokenizer.pad_id))
        if log_fn is not None and (i % 10 == 0 or i == steps - 1):
            log_fn(i, jax.device_get(metrics))
    params = state.params
    if path:
        os.makedirs(cache_dir, exist_ok=True)
        tmp = path + ".tmp.npz"
        np.savez(tmp, **{f"p{i}": np.asarray(x) for i, x in enumerate(jax.tree.leaves(params))})
        os.replace(tmp, path)
    return params, jax.device_get(metrics)
