"""Algorithm = composition of core pieces, split into reusable stage functions (docs/architecture.md §2).

One RL update (`Algorithm.train_step`, pure; the loop jits it with shardings and donation):

  1. `make_train_batch`   RolloutBatch → `TrainingBatch` (a frozen pytree with named, optional
                          fields; loss_mask folded with valid). Each stage returns it with its
                          fields filled in (`replace`); an absent field is None.
  2. `score`              no-grad forward passes: old log-probs (π_old, recomputed at the
                          sampling temperature or the sampler's saved behaviour log-probs), token
                          entropy, reference log-probs when KL is on (docs/algorithms.md (A.13)-(A.15)). The policy's pass
                          is skipped when a single optimiser step follows and nothing before it
                          reads π_old (`scores_before_update`): the loss's forward is at π_old.
  3. `shape_rewards`      KL as reward penalty (docs/algorithms.md (A.14)) when kl.mode == "reward".
  4. `compute_advantages` the algorithm's estimator (GRPO / RLOO / REINFORCE / GAE) → `advantages`.
  5. `update_critic`      (critic algorithms) value-loss learner steps.
  6. `update_policy`      the learner (`rlvr.learner.make_update`) on `policy_loss`.
  7. `finish`             KL controller (docs/algorithms.md (A.15)), step / policy_version bump, docs/architecture.md §7 batch metrics.

Subclasses override 4 (and 5). Between 4 and 5 the advantages are optionally whitened over the
batch (`normalize_advantages`) and multiplied by per-sample weights (`RolloutBatch.sample_weights`,
e.g. an asynchronous queue's staleness down-weighting).

The policy loss (`policy_loss`, setting `policy_loss` or the class's `default_policy_loss`) is one
of five objectives, each with the entropy bonus and the KL loss term of docs/algorithms.md (A.12):
  * "clip": token-level clipped surrogate (docs/algorithms.md (A.8)/75, asymmetric + dual clip, docs/algorithms.md (A.8)-(A.9));
  * "trust_region": SAO's strict double-sided token trust region (docs/algorithms.md (A.8)-(A.9), (A.19));
  * "sequence_clip": PivotRL's turn-level ratio over the whole action, no T-th root (docs/algorithms.md (A.10));
    its KL term is the per-action sum of token estimates, averaged over actions;
  * "gspo": GSPO's length-normalised sequence ratio; its entropy and KL terms are per-sequence
    token means, averaged over sequences;
  * "cispo": CISPO's clipped stop-gradient IS weight times Â logπ (every token keeps a gradient).
Optional off-policy correction (`is_correction` = tis | mis, `rlvr.core.importance`) multiplies
each token's (or sequence's) loss by a stop-gradient weight π_old / μ against the sampler's
behaviour log-probs μ. DAPO's overlong reward shaping (`overlong_buffer`) is added to the
rewards in `shape_rewards`; its overlong filtering (`overlong_filter`) removes truncated rows
from the loss mask after the advantages (so they still count in their group's baseline).
Any other `loss_fn(model, microbatch, aux) -> (loss, metrics)` also works with the learner. Losses
use minibatch-wide denominators (`exact_scale`), so gradient accumulation stays exact.

The policy version (docs/architecture.md §3) advances only when the policy's parameters changed: not on a step whose
updates were all skipped as non-finite, nor on a critic-only (warm-up) step.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
from flax import nnx

from rlvr.core import kl as core_kl
from rlvr.core._util import masked_mean, safe_div
from rlvr.core.layout import align_completions
from rlvr.core.importance import IS_CORRECTIONS, IS_LEVELS, importance_weights
from rlvr.core.losses import (
    AGGREGATIONS,
    aggregate,
    cispo_token_loss,
    gspo_sequence_loss,
    ppo_token_loss,
    sequence_clip_loss,
    trust_region_token_loss,
)
from rlvr.core.metrics import group_outcome_fractions
from rlvr.core.shaping import overlong_filter, overlong_penalty
from rlvr.learner import make_update, map_row_chunks
from rlvr.models import scoring
from rlvr.records.batch import RolloutBatch, TrainingBatch

POLICY_LOSSES = ("clip", "trust_region", "sequence_clip", "gspo", "cispo")
# objectives with one ratio per sequence (they take sequence-level IS weights only)
SEQUENCE_LOSSES = ("sequence_clip", "gspo")


@dataclasses.dataclass(frozen=True)
class AlgorithmSettings:
    """Static settings of an algorithm (read from the `algorithm`, `kl`, `train`, `sampling`
    config sections by `rlvr.train.setup`; see configs/base.py for each field's meaning)."""

    name: str = "grpo"
    group_size: int = 8
    advantage: str = ""
    scale_rewards: str = "group"
    adv_eps: float = 1e-6
    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float = 0.0
    aggregation: str = "token-mean"
    entropy_coef: float = 0.0
    baseline_momentum: float = 0.9
    gamma: float = 1.0
    gae_lambda: float = 1.0
    value_coef: float = 0.5
    value_clip: float = 0.2
    critic_warmup_steps: int = 0
    critic_updates: int = 1
    recompute_old_logprobs: bool = True
    off_policy_rows: bool = False
    policy_loss: str = ""
    normalize_advantages: bool = False
    skip_observations: bool = True
    temperature: float = 1.0
    kl_mode: str = "none"
    kl_estimator: str = "k3"
    epochs: int = 1
    num_minibatches: int = 1
    num_microbatches: int = 1
    # > 0: length-aware learner micro-batches of widths rounded to this multiple (rlvr.learner)
    length_bucket: int = 0
    # how the LM head + log-softmax + entropy run (rlvr.models.scoring: "chunked" | "vocab_tiled"
    # | "pallas"); logprob_interpret: the Pallas kernel interpreted (tests on CPU)
    logprob_impl: str = "chunked"
    logprob_interpret: bool = False
    # off-policy correction against the behaviour log-probs (rlvr.core.importance)
    is_correction: str = "none"
    is_level: str = "token"
    is_threshold: float = 2.0
    is_threshold_low: float = 0.0
    # π_old from the behaviour log-probs when a probe's mean |log π_θ − log μ| over loss tokens
    # is <= this bound, else recomputed (`Algorithm.probed_old_logprobs`); 0: always recomputed
    old_logprobs_gap_bound: float = 0.0
    # the constant L of aggregation "seq-mean-token-sum-norm" (Dr. GRPO); 0 with other modes
    loss_length_normalizer: int = 0
    # DAPO overlong shaping (buffer L_cache > 0: on) against max_new_tokens (L_max), filtering
    overlong_buffer: int = 0
    overlong_penalty: float = 1.0
    overlong_filter: bool = False
    max_new_tokens: int = 0
    # the loss covers only each row's last `completion_columns` columns (a single-turn batch's
    # completion, the sampler's layout): log-probs and entropies are computed there alone;
    # 0: every column (multi-turn batches, whose observations and actions interleave)
    completion_columns: int = 0

    def __post_init__(self):
        def bad(field, allowed):
            raise ValueError(f"AlgorithmSettings.{field} must be {allowed}, got {getattr(self, field)!r}")

        if self.policy_loss not in ("",) + POLICY_LOSSES:
            bad("policy_loss", f"one of {('',) + POLICY_LOSSES}")
        if self.aggregation not in AGGREGATIONS:
            bad("aggregation", f"one of {AGGREGATIONS}")
        if self.aggregation == "seq-mean-token-sum-norm" and self.loss_length_normalizer < 1:
            bad("loss_length_normalizer", ">= 1 with aggregation 'seq-mean-token-sum-norm'")
        if self.is_correction not in IS_CORRECTIONS:
            bad("is_correction", f"one of {IS_CORRECTIONS}")
        if self.is_level not in IS_LEVELS:
            bad("is_level", f"one of {IS_LEVELS}")
        if self.is_correction != "none":
            if not self.recompute_old_logprobs:
                bad("recompute_old_logprobs", "True with is_correction (π_old = μ gives weight 1)")
            if not self.is_threshold > 0:
                bad("is_threshold", "> 0")
            if not 0 <= self.is_threshold_low < self.is_threshold:
                bad("is_threshold_low", f"in [0, is_threshold={self.is_threshold})")
            if self.is_level == "token" and (self.policy_loss or "") in SEQUENCE_LOSSES:
                bad("is_level", f"'sequence' with the sequence objective {self.policy_loss!r}")
        if not self.old_logprobs_gap_bound >= 0:
            bad("old_logprobs_gap_bound", ">= 0 (0: off)")
        if self.old_logprobs_gap_bound > 0 and self.is_correction != "none":
            bad("old_logprobs_gap_bound", "0 with is_correction (its weights need the recomputed π_old)")
        if isinstance(self.length_bucket, bool) or not isinstance(self.length_bucket, int) \
                or self.length_bucket < 0:
            bad("length_bucket", "an int >= 0 (0: off)")
        if self.logprob_impl not in scoring.LOGPROB_IMPLS:
            bad("logprob_impl", f"one of {scoring.LOGPROB_IMPLS}")
        if isinstance(self.completion_columns, bool) or self.completion_columns < 0:
            bad("completion_columns", "an int >= 0 (0: every column)")
        if self.overlong_buffer and not 1 <= self.overlong_buffer <= self.max_new_tokens:
            bad("overlong_buffer", f"0 (off) or in [1, max_new_tokens={self.max_new_tokens}]")


def exact_scale(loss_mask, aux: dict, aggregation: str):
    """Factor turning a micro-batch `aggregate` into its exact share of the minibatch value.

    token-mean: (tokens in micro-batch) / aux["num_tokens"]; seq-mean modes: (non-empty rows in
    micro-batch) / aux["num_seqs"]. Summing `aggregate(...) * exact_scale(...)` over micro-batches
    equals `aggregate` over the whole minibatch (learner module docstring).
    """
    m = jnp.asarray(loss_mask) > 0
    if aggregation == "token-mean":
        return safe_div(jnp.sum(m).astype(jnp.float32), aux["num_tokens"])
    return safe_div(jnp.sum(jnp.any(m, axis=-1)).astype(jnp.float32), aux["num_seqs"])


def aggregate_exact(per_token, loss_mask, aggregation: str, aux: dict):
    """`rlvr.core.losses.aggregate` normalised by minibatch-wide denominators (exact accumulation)."""
    return aggregate(per_token, loss_mask, aggregation) * exact_scale(loss_mask, aux, aggregation)


def token_share(loss_mask, aux: dict):
    """Scale for token-mean metrics so they sum exactly over micro-batches."""
    return exact_scale(loss_mask, aux, "token-mean")


def last_token_rewards(rewards, loss_mask):
    """[B] sequence rewards placed on each row's last policy token → [B, T] token rewards."""
    m = jnp.asarray(loss_mask) > 0
    t = m.shape[1]
    last = t - 1 - jnp.argmax(m[:, ::-1], axis=1)
    has = jnp.any(m, axis=1)
    onehot = (jnp.arange(t)[None, :] == last[:, None]) & has[:, None]
    return jnp.where(onehot, rewards[:, None], 0.0).astype(jnp.float32)


class Algorithm:
    """Base class: GRPO-style flow; subclasses choose the advantage estimator (and critic).

    Class attributes a subclass may set: `uses_critic`, `default_advantage` (grpo | rloo |
    reinforce | gae), `default_policy_loss` (one of POLICY_LOSSES) and `default_collector`."""

    name = "base"
    uses_critic = False
    default_advantage = "grpo"
    default_policy_loss = "clip"
    # how a batch is gathered unless the config says otherwise (rlvr.train.collectors):
    # "groups" (G samples or episodes per task) or "pivots" (PivotRL's probed turn states)
    default_collector = "groups"

    def __init__(
        self,
        settings: AlgorithmSettings,
        *,
        policy_graphdef,
        optimizer,
        policy_rest=None,
        critic_graphdef=None,
        critic_optimizer=None,
        critic_rest=None,
        critic_trainable=None,
        loss_fn=None,
        lora=None,
        mesh=None,
    ):
        self.settings = settings
        # the device mesh the policy is sharded on (None: one device or unknown): the token
        # scoring's vocab-tiled head runs vocabulary-parallel over its tensor axis
        self.mesh = mesh
        # a rlvr.models.lora.LoRAPolicy when the policy trains adapters: the learner trains only
        # lora.trainable, and π_ref is lora.reference_params(params) (the base, adapters off)
        # whenever the TrainState carries no reference copy
        self.lora = lora
        self.policy_graphdef = policy_graphdef
        self.policy_rest = policy_rest
        self.critic_graphdef = critic_graphdef
        self.critic_rest = critic_rest
        # nnx filter of the critic parameters its learner trains (None: all of them)
        self.critic_trainable = critic_trainable
        self.optimizer = optimizer
        self.critic_optimizer = critic_optimizer
        s = settings
        if (s.is_correction != "none" and s.is_level == "token"
                and self.policy_loss_kind in SEQUENCE_LOSSES):
            raise ValueError(f"AlgorithmSettings.is_level must be 'sequence' with the sequence "
                             f"objective {self.policy_loss_kind!r}, got 'token'")
        if s.overlong_buffer and self.uses_critic:
            raise ValueError(f"AlgorithmSettings.overlong_buffer must be 0 for the critic algorithm "
                             f"{self.name!r} (overlong shaping acts on sequence rewards), got "
                             f"{s.overlong_buffer}")
        self.policy_update = make_update(
            policy_graphdef, loss_fn or self.policy_loss, optimizer, epochs=s.epochs,
            num_minibatches=s.num_minibatches, num_microbatches=s.num_microbatches,
            rest=policy_rest, prefix="policy/", length_bucket=s.length_bucket,
            trainable=None if lora is None else lora.trainable,
            train_mode=None if lora is None else lora.train_mode)

    # ------------------------------------------------------------------ helpers
    def init_extras(self) -> dict:
        """Algorithm state carried in TrainState.extras (arrays only)."""
        return {}

    def _merge(self, graphdef, params, rest):
        """The module of `params` with fresh Variables (`copy=True`), made at the current trace:
        the state's own Variables belong to the trace that made them, and a module reusing them
        inside a `lax.map` / `lax.scan` body fails in an nnx transform (`nnx.remat` raises
        TraceContextError)."""
        states = (params,) if rest is None else (params, rest)
        return nnx.merge(graphdef, *states, copy=True)

    def policy_model(self, params):
        return self._merge(self.policy_graphdef, params, self.policy_rest)

    def critic_model(self, params):
        return self._merge(self.critic_graphdef, params, self.critic_rest)

    def kl_coef(self, state):
        return state.kl_controller.coef if state.kl_controller is not None else jnp.zeros((), jnp.float32)

    # ------------------------------------------------------------------ stage 1-2
    def make_train_batch(self, batch: RolloutBatch) -> TrainingBatch:
        valid = batch.valid.astype(bool)
        tb = TrainingBatch(
            tokens=batch.tokens,
            attention_mask=batch.attention_mask,
            positions=batch.positions,
            loss_mask=batch.loss_mask * valid[:, None].astype(batch.loss_mask.dtype),
            behavior_logprobs=batch.behavior_logprobs,
            rewards=batch.rewards,
            valid=valid,
            truncated=batch.truncated,
            sample_weights=(jnp.ones(valid.shape, jnp.float32) if batch.sample_weights is None
                            else batch.sample_weights),
            ref_logprobs=batch.ref_logprobs,
            token_rewards=batch.token_rewards,
            policy_version=batch.policy_version if self.settings.off_policy_rows else None)
        n = self.settings.completion_columns
        if 0 < n < batch.tokens.shape[1]:  # each row's completion in the last n columns
            tb = align_completions(tb, tb.loss_mask, n)
        return tb

    def stale_rows(self, state, tb: TrainingBatch):
        """bool [B]: rows sampled by an older policy version than the learner's (asynchronous
        collection, `off_policy_rows`), or None when every row is on-policy by construction.

        For such rows π_old is the behaviour policy (`behavior_logprobs` saved at sampling time),
        also with `recompute_old_logprobs`: recomputing at the learner's parameters would give
        them ratio 1 and no off-policy correction (docs/algorithms.md (A.19))."""
        if tb.policy_version is None:
            return None
        return jnp.asarray(tb.policy_version) < state.policy_version

    def score_start(self, tokens) -> int:
        """The first column whose log-prob the loss can read (static): T - completion_columns
        when that setting is on and shorter than the rows, else 0 (every column)."""
        t = tokens.shape[1]
        n = self.settings.completion_columns
        return t - n if 0 < n < t else 0

    def _logprobs(self, model, tb):
        return scoring.token_logprobs(model, tb.tokens, positions=tb.positions,
                                      attention_mask=tb.attention_mask,
                                      temperature=self.settings.temperature,
                                      start=self.score_start(tb.tokens),
                                      impl=self.settings.logprob_impl,
                                      interpret=self.settings.logprob_interpret, mesh=self.mesh)

    def score_chunks(self) -> int:
        """Row chunks of the no-grad passes over a whole rollout batch (π_old, π_ref, values).

        With `num_microbatches` > 1 (the learner's memory setting) they run one learner
        micro-batch of rows at a time (B / (num_minibatches · num_microbatches) rows, `lax.map`),
        so they hold no more activations than a gradient step does; otherwise in one pass.
        """
        s = self.settings
        return s.num_minibatches * s.num_microbatches if s.num_microbatches > 1 else 1

    def score_rows(self, make_model, fn, tb: TrainingBatch):
        """`fn(make_model(), inputs)` over the rollout batch in `score_chunks()` row chunks, where
        `inputs` holds the batch's "tokens", "positions" and "attention_mask" (fn must act row by
        row).

        The model is built inside each chunk's `lax.map` body (`_merge`): an nnx module built
        outside it cannot run there through an nnx transform (the rematerialised blocks'
        `nnx.remat` raises TraceContextError on its outer-trace parameters).
        """
        inputs = tb.only("tokens", "positions", "attention_mask")
        return map_row_chunks(lambda x: fn(make_model(), x), inputs, self.score_chunks())

    @property
    def scores_before_update(self) -> bool:
        """Whether `score` runs the policy's no-grad forward pass before the update.

        It is skipped when nothing before the update needs π_old and the learner makes a single
        optimiser step (epochs × num_minibatches = 1), whose forward pass sees the same
        parameters: π_old is then the behaviour log-probs (`recompute_old_logprobs=False`) or the
        loss's own log-probs under stop-gradient (ratio exactly 1), and the loss reports
        `behavior_logprob_gap`. It runs with several optimiser steps, with the KL reward penalty
        (docs/algorithms.md (A.14) needs π_old before the advantages), and with the KL loss term on recomputed
        log-probs (its `kl/*` metrics read π_old).
        """
        s = self.settings
        if s.epochs * s.num_minibatches > 1 or s.kl_mode == "reward":
            return True
        return s.recompute_old_logprobs and s.kl_mode == "loss"

    def score(self, state, tb: TrainingBatch) -> tuple[dict, dict]:
        """No-grad passes: old_logprobs, entropy, ref_logprobs (KL). Returns (tb, metrics)."""
        s = self.settings
        m = tb.loss_mask > 0
        stale = self.stale_rows(state, tb)
        if not self.scores_before_update:
            if not s.recompute_old_logprobs:
                tb = tb.replace(old_logprobs=tb.behavior_logprobs)
            elif stale is not None:  # π_old = π_θ on fresh rows, the behaviour policy on stale ones
                tb = tb.replace(stale_rows=stale)
            return self._score_reference(state, tb, m, {})
        if s.old_logprobs_gap_bound > 0 and s.recompute_old_logprobs:
            logprobs, metrics = self.probed_old_logprobs(state, tb, m)
            if stale is not None:
                logprobs = jnp.where(stale[:, None], tb.behavior_logprobs, logprobs)
            tb = tb.replace(old_logprobs=logprobs)
            return self._score_reference(state, tb, m, metrics)
        logprobs, entropy = self.score_rows(lambda: self.policy_model(state.params),
                                            self._logprobs, tb)
        logprobs = jax.lax.stop_gradient(jnp.where(m, logprobs, 0.0))
        metrics = {"policy/entropy": masked_mean(entropy, m),
                   "policy/behavior_logprob_gap": masked_mean(jnp.abs(logprobs - tb.behavior_logprobs), m)}
        if not s.recompute_old_logprobs:
            logprobs = tb.behavior_logprobs
        elif stale is not None:
            logprobs = jnp.where(stale[:, None], tb.behavior_logprobs, logprobs)
        tb = tb.replace(old_logprobs=logprobs)
        return self._score_reference(state, tb, m, metrics)

    def probed_old_logprobs(self, state, tb: TrainingBatch, m):
        """π_old [B, T] from the behaviour log-probs when the sampler and the learner agree,
        else recomputed (`old_logprobs_gap_bound` > 0). Returns (old_logprobs, metrics).

        The policy's no-grad pass runs on a probe: the first B / (num_minibatches ·
        num_microbatches) rows (one learner micro-batch). Its mean absolute gap to the behaviour
        log-probs over the loss tokens, g = Σ m·|log π_θ − log μ| / Σ m, decides (`lax.cond`):
        g <= bound: π_old = μ (the behaviour log-probs) on every row and the pass over the other
        rows is skipped; else the pass runs over the remaining rows and π_old = π_θ as without
        the bound. Metrics: `policy/behavior_logprob_gap` (g, the probe's), `policy/entropy`
        (the probe's rows), `policy/old_logprobs_reused` (1 when μ was used, else 0).
        """
        s = self.settings
        b = tb.tokens.shape[0]
        k = max(1, b // (s.num_minibatches * s.num_microbatches))
        inputs = tb.only("tokens", "positions", "attention_mask")
        run = lambda x: self._logprobs(self.policy_model(state.params), x)  # noqa: E731
        probe_lp, probe_ent = run(jax.tree.map(lambda x: x[:k], inputs))
        mk = m[:k]
        probe_lp = jax.lax.stop_gradient(jnp.where(mk, probe_lp, 0.0))
        behav = tb.behavior_logprobs
        gap = masked_mean(jnp.abs(probe_lp - behav[:k]), mk)
        reuse = gap <= s.old_logprobs_gap_bound

        def recompute(_):
            if k == b:
                return probe_lp
            n_rest = (b - k) // k if (b - k) % k == 0 else 1
            rest, _ = map_row_chunks(run, jax.tree.map(lambda x: x[k:], inputs), n_rest)
            return jnp.concatenate([probe_lp, jax.lax.stop_gradient(jnp.where(m[k:], rest, 0.0))])

        old = jax.lax.cond(reuse, lambda _: jnp.where(m, behav, 0.0), recompute, None)
        metrics = {"policy/entropy": masked_mean(probe_ent, mk),
                   "policy/behavior_logprob_gap": gap,
                   "policy/old_logprobs_reused": reuse.astype(jnp.float32)}
        return old, metrics

    def _score_reference(self, state, tb: TrainingBatch, m, metrics: dict) -> tuple[dict, dict]:
        """Reference log-probs (KL on) and the KL metrics against π_old when it is known."""
        s = self.settings
        if s.kl_mode != "none" and tb.ref_logprobs is None:
            ref = state.ref_params
            if ref is None and self.lora is not None:
                ref = self.lora.reference_params(state.params)
            if ref is None:
                raise ValueError("kl.mode is set but TrainState.ref_params is None (no reference policy)")
            ref_lp, _ = self.score_rows(lambda: self.policy_model(ref), self._logprobs, tb)
            tb = tb.replace(ref_logprobs=jax.lax.stop_gradient(jnp.where(m, ref_lp, 0.0)))
        if tb.ref_logprobs is not None and tb.old_logprobs is not None:
            kl_tok = core_kl.kl_estimate(tb.old_logprobs, tb.ref_logprobs, s.kl_estimator, loss_mask=m)
            seq_kl = jnp.sum(kl_tok, axis=-1)
            metrics["kl/seq_mean"] = masked_mean(seq_kl, jnp.any(m, axis=-1))
            metrics["kl/token_mean"] = masked_mean(kl_tok, m)
        return tb, metrics

    # ------------------------------------------------------------------ stage 3
    def shape_rewards(self, state, tb: TrainingBatch) -> tuple[dict, dict]:
        """DAPO's soft overlong punishment (`overlong_buffer` > 0) added to valid rows' rewards,
        then the KL reward penalty (docs/algorithms.md (A.14)) on sequence rewards when kl.mode == 'reward'."""
        s = self.settings
        tb = tb.replace(task_rewards=tb.rewards)
        metrics = {}
        if s.overlong_buffer:
            lengths = jnp.sum(tb.loss_mask > 0, axis=-1)
            pen = overlong_penalty(lengths, max_length=s.max_new_tokens, buffer=s.overlong_buffer,
                                   factor=s.overlong_penalty)
            pen = jnp.where(tb.valid, pen, 0.0)
            tb = tb.replace(rewards=tb.rewards + pen.astype(tb.rewards.dtype))
            metrics["reward/overlong_penalty_mean"] = masked_mean(pen, tb.valid)
            metrics["reward/overlong_penalized_frac"] = masked_mean((pen < 0).astype(jnp.float32),
                                                                    tb.valid)
        if s.kl_mode == "reward":
            tb = tb.replace(rewards=core_kl.kl_penalty_rewards(
                tb.rewards, tb.old_logprobs, tb.ref_logprobs, tb.loss_mask,
                beta=self.kl_coef(state), kind=s.kl_estimator))
        return tb, metrics

    # ------------------------------------------------------------------ stage 4
    def compute_advantages(self, state, tb: TrainingBatch):
        """Returns (state, tb with `advantages` [B] or [B, T], metrics)."""
        raise NotImplementedError

    def weight_advantages(self, tb: TrainingBatch) -> TrainingBatch:
        """Whitens the advantages over the batch's policy tokens (`normalize_advantages`) and
        multiplies each sample's by its weight (`sample_weights`); with `overlong_filter`, then
        removes truncated rows from the loss mask (DAPO's overlong filtering: they took part in
        their group's advantages, they give no loss)."""
        adv = tb.advantages
        m = tb.loss_mask > 0
        if self.settings.normalize_advantages:
            tok = adv if adv.ndim == 2 else jnp.broadcast_to(adv[:, None], m.shape)
            mean = masked_mean(tok, m)
            std = jnp.sqrt(masked_mean(jnp.square(tok - mean), m) + 1e-8)
            adv = (adv - mean) / std
            adv = jnp.where(m, adv, 0.0) if adv.ndim == 2 else adv
        w = tb.sample_weights
        tb = tb.replace(advantages=adv * (w[:, None] if adv.ndim == 2 else w))
        if self.settings.overlong_filter:  # the length metrics keep the sampled lengths
            tb = tb.replace(sampled_loss_mask=tb.loss_mask,
                            loss_mask=overlong_filter(tb.loss_mask, tb.truncated))
        return tb

    # ------------------------------------------------------------------ stage 5-6
    def update_critic(self, state, tb: TrainingBatch, key):
        return state, {}

    @property
    def policy_loss_kind(self) -> str:
        return self.settings.policy_loss or self.default_policy_loss

    def policy_loss(self, model, mb: dict, aux: dict):
        """The learner's loss: the policy's token log-probs and entropies on the micro-batch,
        then `policy_objective`. A mixture-of-experts policy adds its checkpoint's
        `router_aux_loss_coef` × the load-balancing loss of the same forward pass (metric
        `router_aux_loss`, the micro-batches' loss-token-weighted mean)."""
        if not getattr(model.config, "num_experts", 0):
            logprobs, entropy = self._logprobs(model, mb)
            return self.policy_objective(logprobs, entropy, mb, aux)
        logprobs, entropy, router = scoring.token_logprobs(
            model, mb.tokens, positions=mb.positions, attention_mask=mb.attention_mask,
            temperature=self.settings.temperature, with_router_loss=True,
            start=self.score_start(mb.tokens), impl=self.settings.logprob_impl,
            interpret=self.settings.logprob_interpret, mesh=self.mesh)
        total, metrics = self.policy_objective(logprobs, entropy, mb, aux)
        share = token_share(mb.loss_mask > 0, aux)
        metrics["router_aux_loss"] = router * share
        return total + model.config.router_aux_loss_coef * router * share, metrics

    def policy_objective(self, logprobs, entropy, mb: dict, aux: dict):
        """The policy objective (module docstring) + entropy bonus + KL loss term (docs/algorithms.md (A.12)), exact
        under accumulation. Pure in its arrays: logprobs, entropy [B, T]; mb holds loss_mask,
        valid, advantages, old_logprobs (absent: π_old = stop_gradient(logprobs), the single
        step after a skipped score pass), behavior_logprobs (then, for the
        `behavior_logprob_gap` metric, and with `is_correction` as the IS proposal) and (KL loss)
        ref_logprobs; aux the learner's minibatch-wide denominators (and kl_coef). Metrics are
        additive over micro-batches."""
        s = self.settings
        kind = self.policy_loss_kind
        m = mb.loss_mask > 0
        if mb.old_logprobs is None:  # one optimiser step on recomputed π_old: π_old = π_θ
            old = jax.lax.stop_gradient(jnp.where(m, logprobs, 0.0))
            if mb.stale_rows is not None:  # ... except on rows an older policy sampled (`stale_rows`)
                old = jnp.where(mb.stale_rows[:, None], mb.behavior_logprobs, old)
            mb = mb.replace(old_logprobs=old)
        norm = s.loss_length_normalizer or None
        is_w, is_metrics = None, {}
        if s.is_correction != "none":  # stop-gradient π_old / μ weights on the loss
            is_w, im = importance_weights(mb.old_logprobs, mb.behavior_logprobs, m,
                                          correction=s.is_correction, level=s.is_level,
                                          threshold=s.is_threshold, threshold_low=s.is_threshold_low)
            share = (token_share(m, aux) if s.is_level == "token"
                     else exact_scale(m, aux, "seq-mean-token-mean"))
            is_metrics = {f"is/{k}": v * share for k, v in im.items()}
        token_adv = (mb.advantages, m)
        if kind in SEQUENCE_LOSSES:
            seq_fn = sequence_clip_loss if kind == "sequence_clip" else gspo_sequence_loss
            clip = (dict(clip_eps=s.clip_low, clip_high=s.clip_high) if kind == "sequence_clip"
                    else dict(clip_low=s.clip_low, clip_high=s.clip_high))
            # the KL and entropy terms: per-action sums (PivotRL) / per-sequence means (GSPO)
            agg = "seq-mean-token-sum" if kind == "sequence_clip" else "seq-mean-token-mean"
            pg, pm = seq_fn(logprobs, mb.old_logprobs, *token_adv, valid=mb.valid,
                            seq_weights=is_w, **clip)
            ratio_mean, frac = pm["seq_ratio_mean"], {"clip_frac": pm["clip_fraction"]}
        elif kind == "trust_region":
            agg = s.aggregation
            pg, pm = trust_region_token_loss(logprobs, mb.old_logprobs, *token_adv,
                                             clip_low=s.clip_low, clip_high=s.clip_high,
                                             aggregation=agg, length_normalizer=norm,
                                             token_weights=is_w)
            ratio_mean = pm["ratio_mean"]
            frac = {"masked_frac": pm["masked_fraction"], "masked_frac_low": pm["masked_fraction_low"],
                    "masked_frac_high": pm["masked_fraction_high"]}
        elif kind == "cispo":
            agg = s.aggregation
            pg, pm = cispo_token_loss(logprobs, mb.old_logprobs, *token_adv,
                                      clip_low=s.clip_low, clip_high=s.clip_high, aggregation=agg,
                                      length_normalizer=norm, token_weights=is_w)
            ratio_mean = pm["ratio_mean"]
            frac = {"clip_frac": pm["clip_fraction"], "clip_frac_low": pm["clip_fraction_low"],
                    "clip_frac_high": pm["clip_fraction_high"]}
        else:
            agg = s.aggregation
            pg, pm = ppo_token_loss(logprobs, mb.old_logprobs, *token_adv,
                                    clip_low=s.clip_low, clip_high=s.clip_high,
                                    dual_clip=s.dual_clip if s.dual_clip > 0 else None,
                                    aggregation=agg, length_normalizer=norm, token_weights=is_w)
            ratio_mean = pm["ratio_mean"]
            frac = {"clip_frac": pm["clip_fraction"], "clip_frac_low": pm["clip_fraction_low"],
                    "clip_frac_high": pm["clip_fraction_high"],
                    "dual_clip_frac": pm["dual_clip_fraction"]}
        scale = exact_scale(m, aux, agg)  # this micro-batch's share of the minibatch mean
        pg = pg * scale
        total = pg
        ent = aggregate(entropy, m, agg, norm) * scale
        if s.entropy_coef:
            total = total - s.entropy_coef * ent
        metrics = {"pg_loss": pg, "entropy": masked_mean(entropy, m) * token_share(m, aux),
                   "ratio_mean": ratio_mean * scale,
                   "approx_kl": pm["approx_kl"] * scale,
                   **{k: v * scale for k, v in frac.items()}, **is_metrics}
        if kind not in SEQUENCE_LOSSES:
            metrics.update(ratio_max=pm["ratio_max"], ratio_min=pm["ratio_min"])
        if not self.scores_before_update and mb.behavior_logprobs is not None:
            # `score` skipped its pass: this forward is at π_old
            gap = jnp.abs(jnp.where(m, logprobs, 0.0) - mb.behavior_logprobs)
            metrics["behavior_logprob_gap"] = masked_mean(gap, m) * token_share(m, aux)
        if s.kl_mode == "loss":
            kl_tok = core_kl.kl_estimate(logprobs, mb.ref_logprobs, s.kl_estimator, loss_mask=m)
            kl_term = aggregate(kl_tok, m, agg, norm) * scale
            total = total + aux["kl_coef"] * kl_term
            metrics["kl_loss"] = kl_term
        return total, metrics

    def update_policy(self, state, tb: TrainingBatch, key):
        aux = {"kl_coef": self.kl_coef(state)}
        batch = tb.only(*self.policy_batch_keys(tb))
        return self.policy_update(state, batch, aux, key)

    def policy_batch_keys(self, tb):
        keys = ["tokens", "attention_mask", "positions", "loss_mask", "valid", "advantages"]
        if tb.old_logprobs is not None:
            keys.append("old_logprobs")
        if not self.scores_before_update or self.settings.is_correction != "none":
            keys.append("behavior_logprobs")
        if tb.stale_rows is not None:
            keys.append("stale_rows")
        if self.settings.kl_mode == "loss":
            keys.append("ref_logprobs")
        return keys

    # ------------------------------------------------------------------ stage 7
    def batch_metrics(self, tb: TrainingBatch) -> dict:
        """docs/architecture.md §7 metrics of the rollout batch (device-side part)."""
        s = self.settings
        valid = tb.valid
        r = tb.task_rewards
        lengths = jnp.sum(tb.loss_mask if tb.sampled_loss_mask is None else tb.sampled_loss_mask > 0, axis=-1).astype(jnp.float32)
        adv = tb.advantages
        adv_tok = adv if adv.ndim == 2 else jnp.broadcast_to(adv[:, None], tb.loss_mask.shape)
        m = tb.loss_mask > 0
        out = {
            "reward/mean": masked_mean(r, valid),
            "reward/std": jnp.sqrt(masked_mean(jnp.square(r - masked_mean(r, valid)), valid)),
            "reward/shaped_mean": masked_mean(tb.rewards, valid),
            "reward/valid_frac": jnp.mean(valid.astype(jnp.float32)),
            "advantage/mean": masked_mean(adv_tok, m),
            "advantage/var": masked_mean(jnp.square(adv_tok - masked_mean(adv_tok, m)), m),
            "length/mean": masked_mean(lengths, valid),
            "length/max": jnp.max(jnp.where(valid, lengths, 0)),
            "length/truncation_rate": masked_mean(tb.truncated.astype(jnp.float32), valid),
            "batch/num_tokens": jnp.sum(m).astype(jnp.float32),
        }
        b = r.shape[0]
        if s.group_size > 1 and b % s.group_size == 0:
            fr = group_outcome_fractions(r.reshape(-1, s.group_size), valid.reshape(-1, s.group_size))
            out.update({f"groups/{k}_frac": v for k, v in fr.items()})
        return out

    def finish(self, state, tb: TrainingBatch, metrics: dict, key):
        ctrl = state.kl_controller
        if ctrl is not None and "kl/seq_mean" in metrics:
            ctrl = core_kl.update_kl_controller(ctrl, metrics["kl/seq_mean"], 1)
            metrics["kl/coef"] = ctrl.coef
        # the policy changed iff at least one policy update was applied (not skipped as
        # non-finite) and the policy was not frozen (critic warm-up)
        applied = metrics["policy/num_updates"] - metrics["policy/skipped"]
        changed = (applied > 0) & (metrics.get("policy/frozen", 0.0) < 0.5)
        state = state.replace(kl_controller=ctrl, step=state.step + 1,
                              policy_version=state.policy_version + changed.astype(jnp.int32),
                              rng=key)
        metrics.update(self.batch_metrics(tb))
        metrics["policy/version"] = state.policy_version.astype(jnp.float32)
        return state, metrics

    # ------------------------------------------------------------------ the update
    def train_step(self, state, batch: RolloutBatch):
        """One RL update on a rollout batch: (state, batch) -> (state, metrics). Pure; jit it."""
        key, k_critic, k_policy = jax.random.split(state.rng, 3)
        tb = self.make_train_batch(batch)
        tb, metrics = self.score(state, tb)
        tb, m = self.shape_rewards(state, tb)
        metrics.update(m)
        state, tb, m = self.compute_advantages(state, tb)
        metrics.update(m)
        tb = self.weight_advantages(tb)
        state, m = self.update_critic(state, tb, k_critic)
        metrics.update(m)
        state, m = self.update_policy(state, tb, k_policy)
        metrics.update(m)
        return self.finish(state, tb, metrics, key)
