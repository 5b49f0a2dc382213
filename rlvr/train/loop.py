"""The synchronous RLVR loop (SPEC R6.1, R7; seed 002 eq.53, §5, §7, §9).

    task sampling (curriculum optional) → rollout (sampler) → verify → RolloutBatch →
    advantages + learner (algorithm.train_step, jitted, donated, sharded) → publish new version

`run(config, workdir)` is what `launch.py` calls. Stages are separate functions (`Trainer`
methods: `sample_tasks`, `rollout`, `verify`, `make_batch`, `learn`, `evaluate`) so other loops
(PivotRL, SAO) reuse them.

Determinism and resume: the tasks of step s are drawn with seed (config.seed, s), the rollout key
is fold_in(key(seed), s), and the learner's PRNG lives in TrainState. A checkpoint holds the
TrainState and a JSON host dict (step, curriculum statistics, the warm-start eval), so killing a
run and relaunching the same command continues with exactly the metrics it would have had.

Metrics (JSONL + TensorBoard, every `logging.every` steps): the algorithm's R7.2 metrics plus
host-side ones (unknown / env_error rates, unique-candidate ratio, per-component reward
correlations), throughput (tokens/s, samples/s) and the time split generate / verify / learn.
Held-out evaluation every `eval.every` steps: sampled success, pass@k (eq.93), tokens, and the
train-vs-hidden verifier gap Δ_gap (eq.97), on a fixed set drawn i.i.d. from the training
distribution restricted to the eval split (`heldout_tasks`).

Verification goes through `rlvr.verifiers.pool.VerificationPool` (`reward.executor` inline |
thread | process, `reward.num_workers`, `reward.timeout_s`): env_errors are retried there
(`reward.max_retries`) and then masked (valid False); masked samples, retries, timeouts and worker
restarts are logged under verify/*.

Multi-host (`mesh.distributed`, plain `jax.distributed`): every process draws the same global task
list and per-sample keys, samples and verifies its own contiguous share with a local copy of the
parameters, and the learner step runs on one global mesh over all devices (local rows joined by
`jax.make_array_from_process_local_data`), so a step gives the metrics of the single-process run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import time
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from tqdm.auto import tqdm

from rlvr.algorithms import AlgorithmSettings, get_algorithm
from rlvr.core.curriculum import learning_progress_weights, variance_weights
from rlvr.core.kl import init_kl_controller
from rlvr.core.metrics import pass_at_k
from rlvr.models import ModelConfig, Transformer, ValueModel
from rlvr.models.tokenizer import CharTokenizer
from rlvr.rollout.batch import RolloutBatch
from rlvr.rollout.sampler import SamplingParams, pad_prompts, per_sample_keys, sample
from rlvr.tasks.registry import MixtureSource, get_task_source
from rlvr.tasks.spec import TaskSpec
from rlvr.train.checkpoint import Checkpointer
from rlvr.train.config import validate_config
from rlvr.train.learner import jit_step, optimizer_from_config
from rlvr.train.metrics import MetricWriter
from rlvr.train.sft import run_sft
from rlvr.train.state import create_train_state, split_model
from rlvr.verifiers.compose import RewardConfig, compose_rewards
from rlvr.verifiers.pool import VerificationPool


# ----------------------------------------------------------------------------- building blocks
def build_task_source(config):
    t = config.task
    kwargs = t.kwargs.to_dict() if hasattr(t.kwargs, 'to_dict') else dict(t.kwargs)
    if len(t.names) == 1:
        return get_task_source(t.names[0], **kwargs)
    return MixtureSource([(get_task_source(n, **kwargs), float(w)) for n, w in zip(t.names, t.weights)])


def build_reward_config(config) -> RewardConfig:
    r = config.reward
    clip = (-r.clip, r.clip) if r.clip > 0 else None
    if r.format_weight:
        return RewardConfig(kind="weighted", weights={"correct": r.correct_weight, "format": r.format_weight},
                            clip=clip, unknown_policy=r.unknown_as, max_env_retries=r.max_retries)
    return RewardConfig(kind="binary", clip=clip, unknown_policy=r.unknown_as,
                        max_env_retries=r.max_retries)


def build_model_config(config, vocab_size: int) -> ModelConfig:
    m = config.model
    return ModelConfig(vocab_size=m.vocab_size or vocab_size, hidden_size=m.d_model,
                       intermediate_size=m.d_ff, num_layers=m.num_layers, num_heads=m.num_heads,
                       num_kv_heads=m.num_kv_heads, head_dim=m.d_model // m.num_heads,
                       max_position_embeddings=m.max_seq_len, dtype=m.dtype)


def stream_seed(*parts) -> int:
    """A stable int seed for a named stream, e.g. stream_seed(seed, "train", step)."""
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") % (2**62)


def heldout_tasks(source, n: int, seed: int, split: str = "eval") -> list[TaskSpec]:
    """The fixed held-out set (R7.1): `n` tasks drawn i.i.d. from the training distribution,
    restricted to `split` (never a training instance, rlvr.tasks.splits).

    `source.eval_set(split, n)` returns n *distinct* instances; when the distribution mixes a
    small sub-space (e.g. 2-operand one-digit sums, ~20 eval instances) with a large one, forcing
    distinctness over-represents the large one, so held-out success would measure a harder
    distribution than the one trained on. Procedural sources are therefore drawn one task per
    derived seed (duplicates allowed, exactly the training distribution); mixtures split n by
    their weights; other sources (fixed files) keep `eval_set`.
    """
    from rlvr.tasks.registry import ProceduralSource

    if isinstance(source, ProceduralSource):
        return [source.eval_set(split, 1, stream_seed(seed, "heldout", i))[0] for i in range(n)]
    if isinstance(source, MixtureSource):
        rng = np.random.default_rng(stream_seed(seed, "heldout-mixture"))
        counts = rng.multinomial(n, np.asarray(source.weights))
        out = []
        for j, (src, k) in enumerate(zip(source.sources, counts)):
            out.extend(heldout_tasks(src, int(k), stream_seed(seed, "component", j), split))
        return out
    return source.eval_set(split, n, seed)


def hidden_check(task: TaskSpec, output: str) -> float:
    """Fallback hidden verifier (R7.3): strict exact match of the output to the reference answer.

    Used for Δ_gap when a task names no hidden verifier: the training verifier may accept
    equivalent forms the strict check rejects (or be fooled where it is not).
    """
    if task.reference_answer is None:
        return float("nan")
    return float(output.strip() == str(task.reference_answer).strip())


@dataclasses.dataclass
class Curriculum:
    """Host-side curriculum over a fixed task pool (R6.4 eq.41/42); JSON-serialisable state."""

    pool: list
    kind: str
    alpha: float
    ema: float
    floor: float
    p: np.ndarray = None
    p_prev: np.ndarray = None

    def __post_init__(self):
        n = len(self.pool)
        self.p = np.full(n, 0.5) if self.p is None else np.asarray(self.p, float)
        self.p_prev = np.full(n, 0.5) if self.p_prev is None else np.asarray(self.p_prev, float)

    def weights(self) -> np.ndarray:
        if self.kind == "variance":
            w = variance_weights(jnp.asarray(self.p), alpha=self.alpha, floor=self.floor)
        else:
            w = learning_progress_weights(jnp.asarray(self.p), jnp.asarray(self.p_prev), floor=self.floor)
        w = np.asarray(w, np.float64)
        return w / w.sum()

    def draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.choice(len(self.pool), size=n, replace=True, p=self.weights())

    def update(self, idx: Sequence[int], success: Sequence[float]):
        self.p_prev = self.p.copy()
        for i, s in zip(idx, success):
            self.p[i] = self.ema * self.p[i] + (1 - self.ema) * s

    def state_dict(self):
        return {"p": self.p.tolist(), "p_prev": self.p_prev.tolist()}


# ----------------------------------------------------------------------------- the trainer
class Trainer:
    """Holds the components of a run and its stage functions."""

    def __init__(self, config, workdir: str):
        validate_config(config)
        self.config = config
        self.workdir = workdir
        c = config
        if c.mesh.distributed:
            from rlvr.parallel import initialize_distributed

            # gloo only affects the CPU backend's collectives (harmless on TPU / GPU); asking
            # jax.default_backend() here would start the backends before initialize().
            initialize_distributed(c.mesh.coordinator or None, c.mesh.num_processes, c.mesh.process_id,
                                   cpu_collectives=True)
        self.is_main = jax.process_index() == 0
        self.num_processes = jax.process_count()
        self.process_index = jax.process_index()
        if c.sampling.prompts_per_step % self.num_processes:
            raise ValueError(f"config.sampling.prompts_per_step ({c.sampling.prompts_per_step}) must be "
                             f"divisible by the number of processes ({self.num_processes}): each host "
                             f"samples and verifies an equal share of the prompts")
        self.source = build_task_source(c)
        alphabet = self.source.alphabet
        if alphabet is None:
            raise ValueError(f"tokenizer.kind='char' needs a task source with an alphabet; "
                             f"{c.task.names} has none")
        self.tokenizer = CharTokenizer(alphabet)
        self.verifier = self.source.verifier
        self.reward_config = build_reward_config(c)
        self._pool = None
        self._pool_counts = {"retries": 0, "timeouts": 0, "worker_restarts": 0}
        self.model_config = build_model_config(c, self.tokenizer.vocab_size)
        self.settings = AlgorithmSettings.from_config(c)
        self.group_size = c.algorithm.group_size
        self.max_new = c.sampling.max_new_tokens
        self.prompt_len = c.model.max_seq_len - self.max_new
        if self.prompt_len < 2:
            raise ValueError(f"config.model.max_seq_len ({c.model.max_seq_len}) must exceed "
                             f"sampling.max_new_tokens ({self.max_new}) by at least 2")
        self.sampling = SamplingParams(temperature=c.sampling.temperature, top_k=c.sampling.top_k,
                                       top_p=c.sampling.top_p, max_new_tokens=self.max_new,
                                       stop_token_ids=(self.tokenizer.eos_id,))
        self.eval_sampling = dataclasses.replace(self.sampling, temperature=c.eval.temperature)
        self._build_mesh()
        self._build_state()
        self.eval_tasks = heldout_tasks(self.source, c.eval.num_tasks, c.eval.seed) if c.eval.num_tasks else []
        self.curriculum = None
        if c.task.curriculum != "none":
            self.curriculum = Curriculum(self.source.sample(c.task.curriculum_pool, seed=stream_seed(c.seed, "pool")),
                                         c.task.curriculum, c.task.curriculum_alpha,
                                         c.task.curriculum_ema, c.task.curriculum_floor)

    # -- setup
    def _build_mesh(self):
        m = self.config.mesh
        n = jax.device_count()
        data = m.data if m.data > 0 else n // (m.fsdp * m.tensor)
        from rlvr.parallel import batch_sharding, make_mesh

        self.mesh = make_mesh(data, m.fsdp, m.tensor)
        self.batch_sharding = batch_sharding(self.mesh, 1)
        self.replicated = jax.sharding.NamedSharding(self.mesh, jax.sharding.PartitionSpec())

    def _build_state(self):
        c = self.config
        from rlvr.parallel import param_shardings

        policy = Transformer(self.model_config, rngs=nnx.Rngs(c.seed))
        if c.model.init_from:
            from rlvr.models import from_pretrained

            policy = from_pretrained(c.model.init_from, dtype=c.model.dtype)
            self.model_config = policy.config
        self.graphdef, params, self.rest = split_model(policy)
        self.optimizer = optimizer_from_config(c)
        kw = dict(policy_graphdef=self.graphdef, policy_rest=self.rest, optimizer=self.optimizer)
        cls = get_algorithm(c.algorithm.name)
        critic_params = critic_opt = None
        if cls.uses_critic:
            critic = ValueModel.from_policy(policy, rngs=nnx.Rngs(c.seed + 1))
            cg, critic_params, cr = split_model(critic)
            critic_opt = optimizer_from_config(c, learning_rate=c.algorithm.critic_learning_rate)
            kw.update(critic_graphdef=cg, critic_rest=cr, critic_optimizer=critic_opt)
        self.algorithm = cls(self.settings, **kw)
        self._params_sharding = param_shardings(params, self.mesh)
        params = jax.device_put(params, self._params_sharding)
        if critic_params is not None:
            critic_params = jax.device_put(critic_params, param_shardings(critic_params, self.mesh))
        self._critic_params = critic_params
        self._critic_opt = critic_opt
        self.state = None
        self._init_params = params

    def _make_state(self, params):
        """TrainState from (warm-started) params; the reference is a copy of them (R3.7)."""
        c = self.config
        kl = c.kl
        ctrl = None
        if kl.mode != "none":
            ctrl = init_kl_controller(kl.coef if kl.coef > 0 else 0.01,
                                      target=kl.target if kl.adaptive else None, horizon=kl.horizon)
        state = create_train_state(
            params, self.optimizer, seed=c.seed,
            ref_params=params if kl.mode != "none" else None,
            critic_params=self._critic_params, critic_optimizer=self._critic_opt,
            kl_controller=ctrl, extras=self.algorithm.init_extras())
        self.state_sharding = self._state_shardings(state)
        state = jax.device_put(state, self.state_sharding)
        self.step_fn = jit_step(self.algorithm.train_step, state_sharding=self.state_sharding,
                                batch_sharding=self.batch_sharding)
        return state

    def _state_shardings(self, state):
        """Each leaf keeps the sharding it was created with (params by the model's partition
        rules; optimiser moments inherit them); everything else (scalars, PRNG) is replicated."""
        def pick(x):
            sh = getattr(x, "sharding", None)
            if isinstance(sh, jax.sharding.NamedSharding) and sh.mesh == self.mesh:
                return sh
            return self.replicated

        return jax.tree.map(pick, state)

    # -- stages
    def sample_tasks(self, step: int, n: int):
        """Tasks for `step` (deterministic in (seed, step)); returns (tasks, pool indices or None)."""
        if self.curriculum is None:
            return self.source.sample(n, seed=stream_seed(self.config.seed, "train", step)), None
        rng = np.random.default_rng(stream_seed(self.config.seed, "curriculum", step))
        idx = self.curriculum.draw(n, rng)
        return [self.curriculum.pool[i] for i in idx], idx

    def encode_prompts(self, tasks: Sequence[TaskSpec], repeat: int):
        ids = []
        for t in tasks:
            p = [self.tokenizer.bos_id] + self.tokenizer.encode(t.prompt)
            if len(p) > self.prompt_len:
                raise ValueError(f"prompt of task {t.task_id} has {len(p)} tokens > model.max_seq_len - "
                                 f"sampling.max_new_tokens = {self.prompt_len}")
            ids.extend([p] * repeat)
        return pad_prompts(ids, self.tokenizer.pad_id, bucket=(self.prompt_len,))

    def local_params(self, params):
        """Parameters usable by this process alone (for sampling its share of prompts).

        Single process: `params` as they are (sharded over the local mesh). Multi-host: the
        global params are all-gathered to a replicated layout and this process's first copy is
        taken, so each host samples without cross-host communication.
        """
        if self.num_processes == 1:
            return params
        full = jax.jit(lambda x: x, out_shardings=self.replicated)(params)
        return jax.tree.map(lambda x: x.addressable_data(0), full)

    def process_slice(self, n: int) -> slice:
        """This process's contiguous share of n global rows (process p: rows [p·n/P, (p+1)·n/P))."""
        k = n // self.num_processes
        return slice(self.process_index * k, (self.process_index + 1) * k)

    def rollout(self, params, tasks, repeat: int, key, sampling: SamplingParams):
        """Samples `repeat` completions per task. `key`: one PRNG key (sample b uses
        fold_in(key, b)) or [len(tasks)·repeat] keys; returns (SampleOutput as numpy, texts)."""
        tokens, mask = self.encode_prompts(tasks, repeat)
        model = nnx.merge(self.graphdef, params, self.rest)
        out = sample(model, tokens, mask, key, sampling, pad_id=self.tokenizer.pad_id)
        out = jax.device_get(out)
        texts = [self.tokenizer.decode(c) for c in out.completions(tokens.shape[1])]
        return out, texts

    @property
    def pool(self) -> VerificationPool:
        """The verification pool (R6.2/R6.3), started on first use; `close()` stops it."""
        if self._pool is None:
            r = self.config.reward
            self._pool = VerificationPool(self.verifier, num_workers=r.num_workers, timeout_s=r.timeout_s,
                                          max_env_retries=r.max_retries, executor=r.executor)
        return self._pool

    def close(self):
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def verify(self, tasks: Sequence[TaskSpec], texts: Sequence[str], repeat: int, count: bool = True):
        """Verdicts through the pool (env_error retried there within reward.max_retries, then
        masked: valid False) → rewards float32 [B], valid bool [B], verdicts. `count`: add the
        pool's retries / timeouts / worker restarts to the next step's metrics."""
        before = self.pool.stats()
        verdicts = self.pool.verify_batch([tasks[i // repeat] for i in range(len(texts))], list(texts))
        if count:
            after = self.pool.stats()
            for k, v in (("retries", after["retries"] - before["retries"]),
                         ("timeouts", sum(after["timeouts"].values()) - sum(before["timeouts"].values())),
                         ("worker_restarts", after["worker_restarts"] - before["worker_restarts"])):
                self._pool_counts[k] = self._pool_counts.get(k, 0) + v
        rewards, valid = compose_rewards(verdicts, self.reward_config)
        return np.asarray(rewards, np.float32), np.asarray(valid, bool), verdicts

    def make_batch(self, out, rewards, valid, policy_version: int) -> RolloutBatch:
        return RolloutBatch.create(
            tokens=out.tokens, loss_mask=out.loss_mask, behavior_logprobs=out.behavior_logprobs,
            rewards=rewards, attention_mask=out.attention_mask, valid=valid,
            truncated=out.truncated, positions=out.positions,
            policy_version=np.full(rewards.shape, policy_version, np.int32))

    def learn(self, state, batch: RolloutBatch):
        """One jitted learner step on the global batch. Multi-host: each process contributes its
        local rows (`jax.make_array_from_process_local_data`) to one array over the global mesh."""
        if self.num_processes > 1:
            batch = jax.tree.map(
                lambda x: jax.make_array_from_process_local_data(self.batch_sharding, np.asarray(x)), batch)
        else:
            batch = jax.device_put(batch, self.batch_sharding)
        return self.step_fn(state, batch)

    def host_metrics(self, tasks, texts, verdicts, rewards, valid) -> dict:
        g = self.group_size
        decisions = np.array([v.decision for v in verdicts])
        out = {
            "verify/unknown_rate": float(np.mean(decisions == "unknown")),
            "verify/env_error_rate": float(np.mean([v.is_env_error for v in verdicts])),
            "verify/pass_rate": float(np.mean([v.passed for v in verdicts])),
            "verify/masked_count": float(np.sum(~valid)),
            "verify/masked_frac": float(np.mean(~valid)),
        }
        for k, v in self._pool_counts.items():  # pool counters of this step's training rollouts
            out[f"verify/{k}"] = float(v)
        self._pool_counts = dict.fromkeys(self._pool_counts, 0)
        uniq = [len(set(texts[i:i + g])) / g for i in range(0, len(texts), g)]
        out["sampling/unique_ratio"] = float(np.mean(uniq))
        comps = sorted({k for v in verdicts for k in v.components})
        for k in comps:
            x = np.array([float(v.components.get(k, 0.0)) for v in verdicts])
            out[f"reward/component_{k}_mean"] = float(x.mean())
            if x.std() > 0 and rewards.std() > 0:
                out[f"reward/corr_{k}"] = float(np.corrcoef(x, rewards)[0, 1])
        hidden = np.array([hidden_check(tasks[i // g], t) for i, t in enumerate(texts)])
        if np.all(np.isfinite(hidden)):
            out["reward/hidden_mean"] = float(hidden.mean())
        return out

    # host metrics that every process computes (same keys everywhere): mean or sum over hosts
    _GLOBAL_MEAN = ("verify/unknown_rate", "verify/env_error_rate", "verify/pass_rate", "verify/masked_frac",
                    "sampling/unique_ratio")
    _GLOBAL_SUM = ("verify/masked_count", "verify/retries", "verify/timeouts", "verify/worker_restarts")

    def global_host_metrics(self, m: dict) -> dict:
        """Multi-host: combines the per-process host metrics that every process has (equal shares,
        so the mean of per-host means is the global mean; counts are summed). Other host metrics
        (reward-component correlations, hidden-verifier mean) stay process 0's share."""
        if self.num_processes == 1:
            return m
        from jax.experimental import multihost_utils

        keys = self._GLOBAL_MEAN + self._GLOBAL_SUM
        local = np.array([m.get(k, 0.0) for k in keys], np.float64)
        allv = np.asarray(multihost_utils.process_allgather(local)).reshape(self.num_processes, len(keys))
        m = dict(m)
        for j, k in enumerate(keys):
            m[k] = float(allv[:, j].mean() if k in self._GLOBAL_MEAN else allv[:, j].sum())
        return m

    def dynamic_sample(self, step, params, key, n_prompts):
        """Rollout with dynamic sampling: drop all-equal groups, refill within the round budget."""
        c = self.config
        g = self.group_size
        keep_tasks, keep_out, keep_r, keep_v, keep_verdicts, keep_texts, keep_idx = [], [], [], [], [], [], []
        spare = []
        rounds = 1 + (c.algorithm.dynamic_sampling_max_rounds if c.algorithm.dynamic_sampling else 0)
        t_gen = t_ver = 0.0
        # Multi-host: every process draws the same global task list and per-sample keys and keeps
        # its own slice, so the global batch is the one a single process would sample.
        n_local = n_prompts // self.num_processes
        local = self.process_slice(n_prompts)
        sample_params = self.local_params(params)
        for r in range(rounds):
            tasks, idx = self.sample_tasks(step if r == 0 else f"{step}/refill/{r}", n_prompts)
            keys = per_sample_keys(jax.random.fold_in(key, r), n_prompts * g)
            keys = keys[local.start * g:local.stop * g]
            tasks = tasks[local]
            idx = None if idx is None else idx[local]
            t0 = time.perf_counter()
            out, texts = self.rollout(sample_params, tasks, g, keys, self.sampling)
            t1 = time.perf_counter()
            rewards, valid, verdicts = self.verify(tasks, texts, g)
            t2 = time.perf_counter()
            t_gen += t1 - t0
            t_ver += t2 - t1
            for j, task in enumerate(tasks):
                sl = slice(j * g, (j + 1) * g)
                grp = (task, jax.tree.map(lambda x: x[sl], out), rewards[sl], valid[sl], verdicts[sl], texts[sl],
                       None if idx is None else idx[j])
                rv = rewards[sl][valid[sl]]
                equal = len(rv) == 0 or np.all(rv == rv[0])
                if c.algorithm.dynamic_sampling and equal:
                    spare.append(grp)
                elif len(keep_tasks) < n_local:
                    for lst, x in zip((keep_tasks, keep_out, keep_r, keep_v, keep_verdicts, keep_texts, keep_idx), grp):
                        lst.append(x)
            if len(keep_tasks) >= n_local:
                break
        filled = len(keep_tasks)
        for grp in spare[: n_local - filled]:  # budget exhausted: pad with zero-advantage groups
            for lst, x in zip((keep_tasks, keep_out, keep_r, keep_v, keep_verdicts, keep_texts, keep_idx), grp):
                lst.append(x)
        out = jax.tree.map(lambda *xs: np.concatenate(xs, 0), *keep_out)
        info = {"time/generate_s": t_gen, "time/verify_s": t_ver, "sampling/rounds": r + 1,
                "sampling/kept_group_frac": filled / n_local}
        return (keep_tasks, out, np.concatenate(keep_r), np.concatenate(keep_v),
                sum(keep_verdicts, []), sum(keep_texts, []), keep_idx, info)

    def evaluate(self, params, key) -> dict:
        """Held-out sampled success, pass@k, tokens, train-vs-hidden gap on the fixed eval set."""
        c = self.config
        if not self.eval_tasks:
            return {}
        n = c.eval.samples_per_task
        # every process evaluates the whole (small) held-out set with its local copy; process 0 logs
        out, texts = self.rollout(self.local_params(params), self.eval_tasks, n, key, self.eval_sampling)
        rewards, valid, verdicts = self.verify(self.eval_tasks, texts, n, count=False)
        passed = np.array([v.passed for v in verdicts], float).reshape(-1, n)
        hidden = np.array([hidden_check(self.eval_tasks[i // n], t) for i, t in enumerate(texts)])
        res = {"eval/success": float(passed.mean()),
               "eval/reward": float(rewards.mean()),
               "eval/tokens": float(np.asarray(out.lengths).mean()),
               "eval/truncation_rate": float(np.asarray(out.truncated).mean()),
               "eval/valid_rate": float(valid.mean())}
        cnt = passed.sum(1)
        for k in c.eval.pass_k:
            res[f"eval/pass@{k}"] = float(np.mean(np.asarray(pass_at_k(n, cnt, k))))
        if np.all(np.isfinite(hidden)):
            res["eval/hidden_success"] = float(hidden.mean())
            res["eval/gap"] = res["eval/success"] - res["eval/hidden_success"]
        return res

    # -- SFT
    def warm_start(self, params):
        c = self.config
        if c.train.sft_steps == 0:
            return params, {}

        def examples(i):
            tasks = self.source.sample(c.train.sft_batch_size, seed=stream_seed(c.seed, "sft", i))
            return [t.prompt for t in tasks], [self.source.demonstration(t) for t in tasks]

        params, metrics = run_sft(
            params, self.graphdef, self.rest, tokenizer=self.tokenizer, make_examples=examples,
            steps=c.train.sft_steps, learning_rate=c.train.sft_learning_rate,
            length=c.model.max_seq_len, seed=c.seed, progress=c.train.progress and self.is_main)
        return jax.device_put(params, self._params_sharding), metrics


def run(config, workdir: str) -> dict:
    """Runs (or resumes) the experiment; returns {"before": eval dict, "after": eval dict}."""
    trainer = Trainer(config, workdir)
    return train(trainer)


def train(trainer: Trainer) -> dict:
    c = trainer.config
    workdir = trainer.workdir
    os.makedirs(workdir, exist_ok=True)
    ckpt = Checkpointer(os.path.join(workdir, "checkpoints"), max_to_keep=c.checkpoint.max_to_keep)
    if trainer.is_main:
        with open(os.path.join(workdir, "config.json"), "w") as f:
            f.write(c.to_json_best_effort(indent=2))
    eval_key = jax.random.PRNGKey(c.eval.seed)
    host: dict[str, Any] = {}
    start = 0
    latest = ckpt.latest_step() if c.checkpoint.resume else None
    state = trainer._make_state(trainer._init_params)
    if latest is not None:  # the newest checkpoint that loads; unreadable newer ones reported
        state, host, start, problems = ckpt.restore_latest(state)
        for p in problems:
            print(f"skipped {p}", file=sys.stderr)
    # rows (and TensorBoard events) after the restored step are dropped; a fresh run starts over
    writer = MetricWriter(workdir, tensorboard=c.logging.tensorboard, enabled=trainer.is_main,
                          resume_step=start if latest is not None else -1)
    if latest is not None:
        if trainer.curriculum is not None and "curriculum" in host:
            trainer.curriculum.p = np.asarray(host["curriculum"]["p"])
            trainer.curriculum.p_prev = np.asarray(host["curriculum"]["p_prev"])
        before = host.get("before", {})
    else:
        t0 = time.perf_counter()
        params, sft_metrics = trainer.warm_start(trainer._init_params)
        if sft_metrics:
            writer.write(0, {"sft/nll": sft_metrics.get("sft/nll", np.nan),
                             "time/sft_s": time.perf_counter() - t0})
        state = trainer._make_state(params)
        before = trainer.evaluate(state.params, eval_key)
        writer.write(0, before)
        host = {"before": before}
        ckpt.save(0, state, _host_dict(trainer, host))
    bar = tqdm(range(start, c.train.num_steps), initial=start, total=c.train.num_steps, desc="rl",
               disable=not (c.train.progress and trainer.is_main))
    metrics = {}
    rollout_key = jax.random.PRNGKey(c.seed + 17)
    for step in bar:
        t_start = time.perf_counter()
        key = jax.random.fold_in(rollout_key, step)
        tasks, out, rewards, valid, verdicts, texts, idx, info = trainer.dynamic_sample(
            step, state.params, key, c.sampling.prompts_per_step)
        batch = trainer.make_batch(out, rewards, valid, int(state.policy_version))
        t_learn = time.perf_counter()
        state, dev_metrics = trainer.learn(state, batch)
        dev_metrics = jax.device_get(dev_metrics)
        t_end = time.perf_counter()
        if trainer.curriculum is not None:
            g = trainer.group_size
            succ = np.array([float(np.mean([v.passed for v in verdicts[j * g:(j + 1) * g]]))
                             for j in range(len(idx))])
            idx = np.asarray(idx)
            if trainer.num_processes > 1:  # every host updates with the global groups
                from jax.experimental import multihost_utils

                idx = np.asarray(multihost_utils.process_allgather(idx, tiled=True))
                succ = np.asarray(multihost_utils.process_allgather(succ, tiled=True))
            trainer.curriculum.update(idx, succ)
        metrics = dict(dev_metrics)
        metrics.update(info)
        metrics.update(trainer.global_host_metrics(trainer.host_metrics(tasks, texts, verdicts, rewards, valid)))
        n_tok = float(np.asarray(out.lengths).sum()) * trainer.num_processes  # equal shares per host
        metrics.update({"time/learn_s": t_end - t_learn, "time/step_s": t_end - t_start,
                        "throughput/tokens_per_s": n_tok / max(t_end - t_start, 1e-9),
                        "throughput/samples_per_s": len(texts) * trainer.num_processes / max(t_end - t_start, 1e-9),
                        "policy/version": float(state.policy_version)})
        done = step + 1
        if c.eval.every and done % c.eval.every == 0 and done != c.train.num_steps:
            metrics.update(trainer.evaluate(state.params, eval_key))
        if done == c.train.num_steps:
            metrics.update(trainer.evaluate(state.params, eval_key))
        if done % c.logging.every == 0 or "eval/success" in metrics:
            writer.write(done, metrics)
        bar.set_postfix(reward=f"{metrics.get('reward/mean', 0):.3f}",
                        **({"eval": f"{metrics['eval/success']:.3f}"} if "eval/success" in metrics else {}))
        if (c.checkpoint.every and done % c.checkpoint.every == 0) or done == c.train.num_steps:
            ckpt.save(done, state, _host_dict(trainer, host))
    ckpt.close()
    trainer.close()
    after = {k: v for k, v in metrics.items() if k.startswith("eval/")}
    if not after and c.train.num_steps == start:
        after = host.get("after", {})
    writer.close()
    result = {"before": before, "after": after}
    if trainer.is_main:
        table = format_before_after(before, after)
        print(table)
        with open(os.path.join(workdir, "before_after.md"), "w") as f:
            f.write(table + "\n")
        with open(os.path.join(workdir, "result.json"), "w") as f:
            json.dump(result, f, indent=2)
        if c.logging.plot:
            from rlvr.plot import plot_metrics

            print("plot:", plot_metrics(workdir))
    trainer.state = state
    return result


def _host_dict(trainer: Trainer, host: dict) -> dict:
    d = dict(host)
    if trainer.curriculum is not None:
        d["curriculum"] = trainer.curriculum.state_dict()
    return d


def format_before_after(before: dict, after: dict) -> str:
    keys = [k for k in before if k.startswith("eval/")] or [k for k in after if k.startswith("eval/")]
    lines = ["| metric | warm-start | after RL | change |", "|---|---|---|---|"]
    for k in keys:
        b, a = before.get(k, float("nan")), after.get(k, float("nan"))
        lines.append(f"| {k[5:]} | {b:.3f} | {a:.3f} | {a - b:+.3f} |")
    return "\n".join(lines)

