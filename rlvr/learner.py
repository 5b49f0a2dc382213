"""The learner: pure, jitted parameter updates with a pluggable loss (docs/architecture.md (B.1)).

`make_update(...)` returns a pure function

    update(state: TrainState, batch: dict, aux: dict, key) -> (state, metrics)

that runs `epochs` passes over a rollout batch, each split into `num_minibatches` optimiser steps,
each minibatch split into `num_microbatches` gradient-accumulation chunks. The loss is pluggable:

    loss_fn(model, microbatch: dict, aux: dict) -> (loss, metrics)

**Exact normalisation under accumulation.** The learner computes the minibatch-wide denominators
before splitting into micro-batches and passes them in `aux`:
  aux["num_tokens"] = Σ loss_mask·valid over the whole minibatch,
  aux["num_seqs"]   = valid rows with a loss token, over the whole minibatch.
A loss must divide its *sums* by these (see `rlvr.algorithms.base.aggregate_exact`), so the summed
micro-batch gradients equal the full-minibatch gradient exactly — a token-mean over the batch, not
a mean of micro-means. Metrics follow the same rule: each metric a loss returns must be additive
over micro-batches (a sum divided by a minibatch-wide denominator); the learner sums them over
micro-batches and averages over minibatches and epochs — except metrics named `*_max` / `*_min`,
which take the max / min at both levels.

**Non-finite guard.** If the loss or any gradient is NaN/inf, or the update itself is (new
parameters or optimiser state non-finite, e.g. from a learning-rate schedule or optimiser
statistics that overflow while the gradients are finite), the optimiser update is discarded
(`jnp.where` on params and optimiser state) and `learner/skipped` counts it; nothing is applied.

**Length-aware micro-batches** (`length_bucket` = b > 0). Rows padded to the longest row of the
batch waste the forward and backward work of their padding columns. With b > 0 each minibatch's
rows are sorted by live length (first to last real token), each row is rotated right so that its
last real token sits in the last column (its padding moves to the front, where the attention mask
and explicit positions already describe it, so the model's outputs on real tokens are
unchanged), and each micro-batch runs on its last W columns only, W = its longest live row
rounded up to a multiple of b (at most T). The widths b, 2b, ..., T are the branches of one
`lax.switch`: the step compiles ⌈T / b⌉ micro-step programs and runs, per micro-batch, the
narrowest that holds its rows. Denominators are taken over the whole minibatch before, so the
loss and gradients equal those of the padded path (up to float summation order).

Gradient clipping by global norm is part of the optimiser (`make_optimizer`), after
accumulation. `jit_step` wraps a step function with explicit in/out shardings and donates the
state buffers.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from rlvr.core.layout import rotate_rows
from rlvr.records.state import split_trainable

LossFn = Callable[[nnx.Module, dict, dict], tuple[jnp.ndarray, dict]]


def make_optimizer(
    learning_rate: float,
    *,
    name: str = "adamw",
    schedule: str = "constant",
    warmup_steps: int = 0,
    total_steps: int = 0,
    weight_decay: float = 0.0,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    max_grad_norm: float = 0.0,
) -> optax.GradientTransformation:
    """optax chain: global-norm clipping (if max_grad_norm > 0) then the optimiser with schedule."""
    if schedule == "constant":
        lr = optax.constant_schedule(learning_rate)
        if warmup_steps:
            lr = optax.join_schedules(
                [optax.linear_schedule(0.0, learning_rate, warmup_steps), lr], [warmup_steps])
    elif schedule == "cosine":
        lr = optax.warmup_cosine_decay_schedule(
            0.0 if warmup_steps else learning_rate, learning_rate, warmup_steps,
            max(total_steps, warmup_steps + 1), end_value=0.0)
    else:
        raise ValueError(f"make_optimizer: schedule must be one of ('constant', 'cosine'), got {schedule!r}")
    if name == "adamw":
        opt = optax.adamw(lr, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay)
    elif name == "adam":
        opt = optax.adam(lr, b1=b1, b2=b2, eps=eps)
    elif name == "sgd":
        opt = optax.sgd(lr)
    else:
        raise ValueError(f"make_optimizer: name must be one of ('adamw', 'adam', 'sgd'), got {name!r}")
    if max_grad_norm and max_grad_norm > 0:
        return optax.chain(optax.clip_by_global_norm(max_grad_norm), opt)
    return opt


def _tree_all_finite(tree) -> jnp.ndarray:
    leaves = [x for x in jax.tree.leaves(tree)
              if jnp.issubdtype(jnp.result_type(x), jnp.inexact)]  # integer counts are finite
    if not leaves:
        return jnp.asarray(True)
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in leaves]))


def _select(pred, a, b):
    return jax.tree.map(lambda x, y: jnp.where(pred, x, y), a, b)


def batch_denominators(batch) -> dict:
    """Minibatch-wide normalisers of the token / sequence means a loss takes (`batch`: a
    `rlvr.records.batch.TrainingBatch`, or any batch with `loss_mask` [B, T] and `valid` [B]).

    num_tokens = Σ loss_mask·valid; num_seqs = number of valid rows with at least one loss
    token (the rows `rlvr.core.losses.aggregate` averages over in its seq-mean modes).
    """
    m = (batch.loss_mask > 0) & batch.valid.astype(bool)[:, None]
    return {
        "num_tokens": jnp.sum(m).astype(jnp.float32),
        "num_seqs": jnp.sum(jnp.any(m, axis=-1)).astype(jnp.float32),
    }


def _split_leading(tree, n: int):
    def f(x):
        if x.shape[0] % n:
            raise ValueError(f"learner: batch size {x.shape[0]} is not divisible by {n}")
        return x.reshape((n, x.shape[0] // n) + x.shape[1:])

    return jax.tree.map(f, tree)


def map_row_chunks(fn: Callable, tree, n: int):
    """`fn(tree)` on `n` equal chunks of the leading (row) axis in turn (`lax.map`), re-joined.

    The result has the rows of `fn(tree)` (fn must act row by row), while only B/n rows' activations
    are alive at a time; n == 1 calls `fn(tree)` as is. B must divide by n.
    """
    if n == 1:
        return fn(tree)
    out = jax.lax.map(fn, _split_leading(tree, n))
    return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), out)


def live_lengths(attention_mask) -> jnp.ndarray:
    """int32 [B]: columns from each row's first to its last real token, inclusive (0 for a row
    without one). attention_mask: bool [B, T]."""
    am = jnp.asarray(attention_mask).astype(bool)
    t = am.shape[1]
    first = jnp.argmax(am, axis=1)
    last = t - 1 - jnp.argmax(am[:, ::-1], axis=1)
    return jnp.where(jnp.any(am, axis=1), last - first + 1, 0).astype(jnp.int32)


def bucket_widths(seq_len: int, bucket: int) -> tuple[int, ...]:
    """The micro-batch widths of `length_bucket` = bucket: bucket, 2·bucket, ... below seq_len,
    then seq_len itself."""
    if bucket <= 0:
        raise ValueError(f"learner: length_bucket must be > 0 here, got {bucket}")
    return tuple(range(bucket, seq_len, bucket)) + (seq_len,)


def width_index(lengths, bucket: int, num_widths: int) -> jnp.ndarray:
    """int32 scalar: the index into `bucket_widths` of the narrowest width holding every row of
    `lengths` (int [rows], live lengths): ⌈max / bucket⌉ - 1, clipped to [0, num_widths - 1]."""
    need = jnp.max(lengths, initial=0)
    return jnp.clip((need + bucket - 1) // bucket - 1, 0, num_widths - 1).astype(jnp.int32)


def _per_token(x, b: int, t: int) -> bool:
    return x.ndim >= 2 and x.shape[:2] == (b, t)


def length_sorted(batch, sort: bool = True):
    """(batch, lengths): the batch's rows sorted by live length, ascending (`sort`), each rotated
    right so its last real token is in the last column (every per-token leaf, [B, T, ...], alike;
    per-row leaves [B, ...] are only permuted). lengths: int32 [B] `live_lengths` in the new
    order. Requires `batch.attention_mask` [B, T]."""
    am = batch.attention_mask
    b, t = am.shape
    lengths = live_lengths(am)
    if sort:
        order = jnp.argsort(lengths, stable=True)
        batch = jax.tree.map(lambda x: jnp.take(x, order, axis=0), batch)
        am, lengths = batch.attention_mask, lengths[order]
    real = jnp.asarray(am).astype(bool)
    trailing = jnp.where(jnp.any(real, axis=1), jnp.argmax(real[:, ::-1], axis=1), 0)
    shift = trailing.astype(jnp.int32)
    batch = jax.tree.map(lambda x: rotate_rows(x, shift) if _per_token(x, b, t) else x, batch)
    return batch, lengths


def last_columns(batch, width: int):
    """Every per-token leaf [B, T, ...] of `batch` cut to its last `width` columns (static)."""
    b, t = batch.attention_mask.shape
    return jax.tree.map(lambda x: x[:, t - width:] if _per_token(x, b, t) else x, batch)


def _reducer(key: str):
    """How a metric combines over micro-batches: `*_max` by max, `*_min` by min, others add."""
    if key.endswith("_max"):
        return jnp.maximum, -jnp.inf
    if key.endswith("_min"):
        return jnp.minimum, jnp.inf
    return jnp.add, 0.0


def _combine_metrics(acc: dict, new: dict) -> dict:
    return {k: _reducer(k)[0](acc[k], v) for k, v in new.items()}


def accumulate_gradients(graphdef, rest, loss_fn: LossFn, params, minibatch: dict, aux: dict,
                         num_microbatches: int, *, frozen=None, train_mode=None, key=None,
                         length_bucket: int = 0):
    """Σ over micro-batches of (loss, grads, metrics); exact when losses use aux denominators.

    length_bucket: b > 0: length-aware micro-batches (module doc): rows sorted by live length,
    right-aligned, and each micro-batch cut to its longest row rounded up to a multiple of b;
    0: every micro-batch at the full width T. frozen: parameters merged into the module but not differentiated (None: `params` are all
    of them). train_mode: `train_mode(model, key)` called on each micro-batch's module with its
    own key (stochastic layers, e.g. adapter dropout), or None.

    Returns:
      (loss, grads, metrics): loss and metrics summed over micro-batches (i.e. the minibatch
      values, given additive losses; metrics named `*_max` / `*_min` take the max / min),
      grads the summed gradient w.r.t. `params`.
    """
    states = tuple(s for s in (frozen, rest) if s is not None)

    def micro(p, mb, k):
        model = nnx.merge(graphdef, p, *states)
        if train_mode is not None:
            train_mode(model, k)
        loss, metrics = loss_fn(model, mb, aux)
        return loss, metrics

    value_and_grad = jax.value_and_grad(micro, has_aux=True)
    lengths = None
    if length_bucket > 0:
        minibatch, lengths = length_sorted(minibatch, sort=num_microbatches > 1)
        widths = bucket_widths(minibatch.attention_mask.shape[1], length_bucket)

        def grad_fn(p, mb, k, mb_lengths):
            return jax.lax.switch(width_index(mb_lengths, length_bucket, len(widths)), [
                (lambda w: lambda p, mb, k: value_and_grad(p, last_columns(mb, w), k))(w)
                for w in widths], p, mb, k)
    else:
        def grad_fn(p, mb, k, mb_lengths):
            return value_and_grad(p, mb, k)

    keys = jax.random.split(key, num_microbatches) if train_mode is not None else None
    if num_microbatches == 1:
        (loss, metrics), grads = grad_fn(params, minibatch, None if keys is None else keys[0],
                                         lengths)
        return loss, grads, metrics
    micro_batches = _split_leading(minibatch, num_microbatches)
    micro_lengths = None if lengths is None else lengths.reshape(num_microbatches, -1)
    first = jax.tree.map(lambda x: x[0], micro_batches)
    k0 = None if keys is None else keys[0]
    _, metrics_shape = jax.eval_shape(lambda p, mb: micro(p, mb, k0), params, first)
    zeros_m = {k: jnp.full(v.shape, _reducer(k)[1], v.dtype) for k, v in metrics_shape.items()}
    zeros_g = jax.tree.map(jnp.zeros_like, params)

    def body(carry, xs):
        mb, k, mb_lengths = xs
        loss_acc, g_acc, m_acc = carry
        (loss, metrics), grads = grad_fn(params, mb, k, mb_lengths)
        return (loss_acc + loss, jax.tree.map(jnp.add, g_acc, grads),
                _combine_metrics(m_acc, metrics)), None

    (loss, grads, metrics), _ = jax.lax.scan(body, (jnp.zeros((), jnp.float32), zeros_g, zeros_m),
                                             (micro_batches, keys, micro_lengths))
    return loss, grads, metrics


def make_update(
    graphdef,
    loss_fn: LossFn,
    optimizer: optax.GradientTransformation,
    *,
    epochs: int = 1,
    num_minibatches: int = 1,
    num_microbatches: int = 1,
    shuffle: bool = True,
    params_field: str = "params",
    opt_field: str = "opt_state",
    rest=None,
    prefix: str = "",
    trainable=None,
    train_mode: Optional[Callable] = None,
    length_bucket: int = 0,
) -> Callable:
    """Builds `update(state, batch, aux, key) -> (state, metrics)` (pure; jit it via the caller).

    Args:
      graphdef: nnx GraphDef of the module the params belong to.
      loss_fn: `loss_fn(model, microbatch, aux) -> (loss, metrics)`, additive (see module doc).
      optimizer: optax transformation (clipping included, `make_optimizer`).
      epochs, num_minibatches, num_microbatches: passes, optimiser steps per pass,
        accumulation chunks per optimiser step. The batch's leading size must divide by
        num_minibatches * num_microbatches.
      shuffle: reshuffle samples before each epoch (only matters with num_minibatches > 1).
      params_field, opt_field: TrainState fields updated (e.g. "critic_params",
        "critic_opt_state" for a critic learner).
      rest: non-Param nnx state of the module (constant during training), or None.
      prefix: metric-name prefix (e.g. "critic/").
      trainable: nnx filter of the parameters this learner trains (None: all of them). The
        others (e.g. a LoRA policy's frozen base) enter the loss but get no gradient, and the
        optimiser state covers only the trainable ones (`create_train_state(trainable=...)`).
      train_mode: `train_mode(model, key)` switching stochastic layers on for the loss's forward
        pass (LoRA dropout), called with a fresh key per micro-batch; None: deterministic.
      length_bucket: b > 0: length-aware micro-batches (module doc; the batch needs
        `attention_mask` [B, T]); 0: off.

    batch: a `rlvr.records.batch.TrainingBatch` (a pytree of arrays with a common leading batch
      dimension B; absent fields are None), with `loss_mask` [B, T] and `valid` [B]. aux: dict of scalars passed to the loss (KL coefficient, ...), extended
      with the minibatch denominators.

    Metrics: loss-fn metrics averaged over epochs × minibatches, plus `{prefix}loss`,
      `{prefix}grad_norm` (pre-clip global norm), `{prefix}skipped` (non-finite updates discarded,
      a count), `{prefix}num_updates`.
    """

    def update(state, batch: dict, aux: dict, key):
        def minibatch_step(carry, xs):
            minibatch, mb_key = xs
            params, opt_state = carry
            mb_aux = dict(aux)
            mb_aux.update(batch_denominators(minibatch))
            loss, grads, metrics = accumulate_gradients(
                graphdef, rest, loss_fn, params, minibatch, mb_aux, num_microbatches,
                frozen=frozen, train_mode=train_mode, key=mb_key, length_bucket=length_bucket)
            finite = jnp.isfinite(loss) & _tree_all_finite(grads)
            grad_norm = optax.tree.norm(grads)
            safe_grads = jax.tree.map(lambda g: jnp.where(finite, g, 0), grads)
            updates, new_opt_state = optimizer.update(safe_grads, opt_state, params)
            new_params = optax.apply_updates(params, updates)
            finite = finite & _tree_all_finite(new_params) & _tree_all_finite(new_opt_state)
            params = _select(finite, new_params, params)
            opt_state = _select(finite, new_opt_state, opt_state)
            out = dict(metrics)
            out["loss"] = loss
            out["grad_norm"] = grad_norm
            out["skipped"] = 1.0 - finite.astype(jnp.float32)
            return (params, opt_state), out

        params = getattr(state, params_field)
        frozen = None
        if trainable is not None:
            params, frozen = split_trainable(params, trainable)
        opt_state = getattr(state, opt_field)
        b = batch.loss_mask.shape[0]

        def epoch(carry, ekey):
            data = batch
            if shuffle and num_minibatches > 1:
                perm = jax.random.permutation(ekey, b)
                data = jax.tree.map(lambda x: jnp.take(x, perm, axis=0), batch)
            minibatches = _split_leading(data, num_minibatches)
            mb_keys = (jax.random.split(jax.random.fold_in(ekey, 1), num_minibatches)
                       if train_mode is not None else None)
            return jax.lax.scan(minibatch_step, carry, (minibatches, mb_keys))

        keys = jax.random.split(key, epochs)
        (params, opt_state), metrics = jax.lax.scan(epoch, (params, opt_state), keys)
        # metrics: [epochs, num_minibatches] per leaf
        out = {}
        for k, v in metrics.items():
            if k == "skipped":
                out[prefix + k] = jnp.sum(v)
            elif k.endswith("_max"):
                out[prefix + k] = jnp.max(v)
            elif k.endswith("_min"):
                out[prefix + k] = jnp.min(v)
            else:
                out[prefix + k] = jnp.mean(v)
        out[prefix + "num_updates"] = jnp.asarray(epochs * num_minibatches, jnp.float32)
        if frozen is not None:
            params = nnx.merge_state(params, frozen)
        state = state.replace(**{params_field: params, opt_field: opt_state})
        return state, out

    return update


def jit_step(step_fn: Callable, *, state_sharding=None, batch_sharding=None, donate: bool = True):
    """jax.jit of `step_fn(state, batch) -> (state, metrics)` with explicit shardings + donation.

    state_sharding: pytree (prefix) of shardings for the state, or None (single device / let
      JAX infer). batch_sharding: a sharding (prefix) for every batch leaf, e.g. NamedSharding
      over the data axes. Metrics come back replicated.
    """
    kwargs: dict[str, Any] = {}
    if state_sharding is not None or batch_sharding is not None:
        mesh = _mesh_of(state_sharding) or _mesh_of(batch_sharding)
        replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()) if mesh else None
        kwargs["in_shardings"] = (state_sharding, batch_sharding)
        kwargs["out_shardings"] = (state_sharding, replicated)
    return jax.jit(step_fn, donate_argnums=(0,) if donate else (), **kwargs)


def _mesh_of(sharding_tree):
    if sharding_tree is None:
        return None
    for leaf in jax.tree.leaves(sharding_tree, is_leaf=lambda x: isinstance(x, jax.sharding.Sharding)):
        if isinstance(leaf, jax.sharding.NamedSharding):
            return leaf.mesh
    return None
