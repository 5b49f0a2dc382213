"""Builds a run's components from its config: the one place config meets the library.

`build_run(config, workdir)` → `Run`: the task kit, tokenizer, policy (random init or a Hugging
Face checkpoint), mesh and shardings, optimiser, algorithm (settings read from the fields that
apply to it), critic, the collector the algorithm asks for (groups / pivots, optionally
asynchronous), the held-out evaluator and the jitted learner step. `rlvr.train.loop` drives it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import jax
import numpy as np
from flax import nnx

from rlvr.algorithms import AlgorithmSettings
from rlvr.core.kl import init_kl_controller
from rlvr.learner import jit_step, make_optimizer
from rlvr.models import ModelConfig, Transformer, ValueModel
from rlvr.models.prompts import PromptRenderer, renderer_from_config
from rlvr.models.tokenizer import CharTokenizer, HFTokenizer
from rlvr.models.value import trainable_filter
from rlvr.records.state import create_train_state, split_model
from rlvr.rollout.sampler import DecodeSchedule, SamplingParams
from rlvr.tasks.kit import build_kit
from rlvr.tasks.registry import heldout_tasks
from rlvr.train import collectors as col
from rlvr.train.config import ConfigError, check_applicability, inapplicable, resolved
from rlvr.train.evaluate import Evaluator, exact_hidden_check
from rlvr.train.judge import Judge, reward_config_from
from rlvr.train.pivots import PivotCollector, PivotSettings
from rlvr.train.policy import build_policy_seam


# ------------------------------------------------------------------------------- readers
def algorithm_settings(config, *, single_turn: bool = False) -> AlgorithmSettings:
    """AlgorithmSettings from the config fields that apply to the algorithm (others keep the
    dataclass defaults and are never read). single_turn: the batches are prompt + completion
    rows with the completion in the last `sampling.max_new_tokens` columns, so only those are
    scored (`completion_columns`) unless `algorithm.score_completions_only` is off."""
    a = config.algorithm
    skip = inapplicable(config)
    names = {f.name for f in dataclasses.fields(AlgorithmSettings)}
    kw = {k: a[k] for k in a.keys() if k in names and f"algorithm.{k}" not in skip}
    kw.update(temperature=config.sampling.temperature, kl_mode=config.kl.mode,
              epochs=config.train.epochs, num_minibatches=config.train.num_minibatches,
              num_microbatches=config.train.num_microbatches,
              length_bucket=config.train.length_bucket,
              logprob_impl=config.train.logprob_impl,
              off_policy_rows=bool(config.rollout.asynchronous),
              max_new_tokens=config.sampling.max_new_tokens,
              completion_columns=(config.sampling.max_new_tokens
                                  if single_turn and a.score_completions_only else 0))
    if kw.get("aggregation") == "seq-mean-token-sum-norm" and not kw.get("loss_length_normalizer"):
        kw["loss_length_normalizer"] = config.sampling.max_new_tokens
    if config.kl.mode != "none":
        kw["kl_estimator"] = config.kl.estimator
    return AlgorithmSettings(**kw)


def optimizer_from_config(config, *, learning_rate: Optional[float] = None):
    """The optax optimiser of `config.optimizer` (clipping, schedule, name and its knobs)."""
    o = config.optimizer
    kw = {}
    if o.name != "sgd":
        kw.update(b1=o.b1, b2=o.b2, eps=o.eps)
    if o.name == "adamw":
        kw["weight_decay"] = o.weight_decay
    return make_optimizer(
        o.learning_rate if learning_rate is None else learning_rate, name=o.name,
        schedule=o.schedule, warmup_steps=o.warmup_steps,
        total_steps=config.train.num_steps * config.train.epochs * config.train.num_minibatches,
        max_grad_norm=o.max_grad_norm, **kw)


def build_tokenizer(config, kit):
    """The tokenizer of `config.tokenizer`: the kit's character alphabet, or a Hugging Face
    tokenizer folder (`tokenizer.path`, default `model.init_from`)."""
    t = config.tokenizer
    if t.kind == "char":
        if kit.alphabet is None:
            raise ConfigError(f"config.tokenizer.kind='char' needs a task kit with an alphabet; "
                              f"{kit.name!r} has none: use tokenizer.kind='hf' with a Hugging "
                              f"Face checkpoint (model.init_from) or tokenizer folder "
                              f"(tokenizer.path)")
        return CharTokenizer(kit.alphabet)
    path = t.path or config.model.init_from
    if not path:
        raise ConfigError("config.tokenizer.kind='hf' needs a tokenizer folder: set "
                          "model.init_from to a Hugging Face checkpoint directory (e.g. "
                          "--config.model.init_from=/models/Qwen2.5-0.5B-Instruct) or "
                          "tokenizer.path")
    try:
        return HFTokenizer(path)
    except (ValueError, OSError) as e:
        field = "tokenizer.path" if t.path else "model.init_from"
        raise ConfigError(f"config.{field}={path!r}: cannot load a Hugging Face tokenizer: "
                          f"{e}") from None


def build_renderer(config, kit, tokenizer) -> PromptRenderer:
    """The prompt renderer of `config.tokenizer` (chat templates: single-turn kits; a tool kit's
    prompts are already the chat template's render, so they are encoded as they are)."""
    t = config.tokenizer
    if kit.bind_tokenizer is not None:
        return PromptRenderer(tokenizer)
    if t.kind == "hf" and t.chat_template and kit.multi_turn:
        raise ConfigError(f"config.tokenizer.chat_template applies to single-turn kits; "
                          f"{kit.name!r} is multi-turn")
    try:
        return renderer_from_config(t, tokenizer)
    except ValueError as e:
        raise ConfigError(f"config.tokenizer: {e}") from None


def bind_kit(config, kit, tokenizer):
    """A kit that renders with the tokenizer's chat template (a tool kit), bound to the run's
    tokenizer and `config.agent`; other kits as they are."""
    if kit.bind_tokenizer is None:
        return kit
    hf = getattr(tokenizer, "tok", None)
    if hf is None:
        raise ConfigError(f"task kit {kit.name!r} renders episodes with a chat template: set "
                          f"tokenizer.kind='hf' and model.init_from (or tokenizer.path) to a "
                          f"checkpoint whose chat template supports tools")
    a = config.agent
    system = config.tokenizer.system_prompt if config.tokenizer.chat_template else ""
    try:
        return kit.bind_tokenizer(hf, tool_format=a.tool_format, trajectories=a.trajectories,
                                  system_prompt=system)
    except (ValueError, OSError) as e:
        raise ConfigError(f"task kit {kit.name!r} (agent.tool_format={a.tool_format!r}, "
                          f"agent.trajectories={a.trajectories!r}): {e}") from None


def check_prompt_lengths(config, kit, renderer) -> None:
    """A file source's prompts must fit `model.max_seq_len - sampling.max_new_tokens`; every
    one that does not is reported at start (a long prompt would otherwise stop the run when
    drawn)."""
    sources = getattr(kit.source, "sources", (kit.source,))  # a mixture: each component
    tasks = [t for src in sources for t in (getattr(src, "tasks", None) or ())]
    if not tasks:
        return
    limit = config.model.max_seq_len - config.sampling.max_new_tokens
    long = [(t.task_id, n) for t in tasks if (n := len(renderer.encode(t.prompt))) > limit]
    if long:
        shown = ", ".join(f"{i} ({n})" for i, n in long[:10])
        raise ConfigError(f"{len(long)} prompt(s) of {kit.name!r} have more tokens than "
                          f"model.max_seq_len - sampling.max_new_tokens = {limit}: {shown}"
                          f"{' ...' if len(long) > 10 else ''}; raise model.max_seq_len or "
                          f"remove them from the file")


def build_policy(config, vocab_size: int) -> Transformer:
    """Random init of `config.model`'s shape, or the checkpoint `model.init_from`."""
    m = config.model
    if m.init_from:
        from rlvr.models import from_pretrained

        try:
            policy = from_pretrained(m.init_from, dtype=m.dtype, param_dtype=m.param_dtype,
                                     remat=m.remat, fused_projections=m.fused_projections)
        except (ValueError, OSError) as e:
            raise ConfigError(f"config.model.init_from={m.init_from!r}: {e}") from None
        if policy.config.vocab_size < vocab_size:
            raise ConfigError(f"config.model.init_from: the checkpoint's vocabulary "
                              f"({policy.config.vocab_size}) is smaller than the tokenizer's "
                              f"({vocab_size})")
        if m.max_seq_len > policy.config.max_position_embeddings:
            raise ConfigError(f"config.model.max_seq_len ({m.max_seq_len}) exceeds the "
                              f"checkpoint's max_position_embeddings "
                              f"({policy.config.max_position_embeddings})")
        cfg = dataclasses.replace(policy.config, attention_impl=m.attention)
        return policy if cfg == policy.config else _with_config(policy, cfg)
    cfg = ModelConfig(vocab_size=m.vocab_size or vocab_size, hidden_size=m.d_model,
                      intermediate_size=m.d_ff, num_layers=m.num_layers, num_heads=m.num_heads,
                      num_kv_heads=m.num_kv_heads, head_dim=m.d_model // m.num_heads,
                      max_position_embeddings=m.max_seq_len, dtype=m.dtype,
                      param_dtype=m.param_dtype, attention_impl=m.attention,
                      fused_projections=m.fused_projections)
    if cfg.vocab_size < vocab_size:
        raise ConfigError(f"config.model.vocab_size ({cfg.vocab_size}) is smaller than the "
                          f"tokenizer's vocabulary ({vocab_size})")
    return Transformer(cfg, rngs=nnx.Rngs(config.seed), remat=m.remat)


def build_lora(config, policy: Transformer):
    """`model.lora.rank` > 0: attaches adapters to `policy` (in place; its block projections
    quantised when `model.lora.quantize` is set) and returns the `rlvr.models.lora.LoRAPolicy`;
    None when LoRA is off (the other `model.lora` fields are then not read)."""
    lo = config.model.lora
    if not lo.rank:
        return None
    from rlvr.models.lora import LoRAConfig, apply_lora

    return apply_lora(policy, LoRAConfig(rank=lo.rank, alpha=lo.alpha, dropout=lo.dropout,
                                         targets=tuple(lo.targets), quantize=lo.quantize,
                                         seed=config.seed, train_norms=lo.train_norms))


def _with_config(policy: Transformer, cfg: ModelConfig) -> Transformer:
    fresh = nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0), remat=policy.model.remat))
    nnx.update(fresh, nnx.state(policy))
    return fresh


# ------------------------------------------------------------------------------- the run
@dataclasses.dataclass
class RunState:
    """What the run changes while it trains (held by the frozen `Run`, changed only here).

    Attributes:
      step_fn: the jitted learner step, built by `Run.init_state` for the state's shardings.
      state_sharding: the TrainState's shardings (a pytree of NamedSharding).
      state: the final TrainState, set by the loop when training ends.
    """

    step_fn: Any = None
    state_sharding: Any = None
    state: Any = None


@dataclasses.dataclass(frozen=True)
class Run:
    """The components of one training run (built by `build_run`): a frozen bundle.

    Everything the loop needs: config and workdir, the task kit and tokenizer, the policy's
    graph (`graphdef`, `rest`) and initial parameters, the policy seam (`rlvr.train.policy`:
    full or LoRA), mesh shardings, the algorithm, the collector, the evaluator and the judges
    (closed by `close`). What changes while training (the jitted step, the final TrainState) lives
    in `live` (`RunState`).
    """

    config: Any
    workdir: str
    kit: Any
    tokenizer: Any
    renderer: Any
    graphdef: Any
    rest: Any
    init_params: Any
    critic_params: Any
    critic_optimizer: Any
    optimizer: Any
    algorithm: Any
    mesh: Any
    batch_sharding: Any
    replicated: Any
    collector: Any
    evaluator: Optional[Evaluator]
    judges: tuple
    needs_ref: bool
    asynchronous: bool
    hidden: Any = None
    policy: Any = None  # rlvr.train.policy: FullPolicy, or AdapterPolicy when LoRA trains
    process_index: int = 0
    num_processes: int = 1
    live: RunState = dataclasses.field(default_factory=RunState)

    @property
    def state(self):
        """The final TrainState (set by the loop when training ends; None before)."""
        return self.live.state

    @property
    def is_main(self) -> bool:
        return self.process_index == 0

    def model_of(self, params) -> Transformer:
        return nnx.merge(self.graphdef, params, self.rest)

    def sampling_params(self, params):
        """Parameters this process samples with: as they are on one process; multi-host, a
        replicated copy of which this process takes its own (no cross-host traffic while
        sampling). The policy seam decides (`rlvr.train.policy`)."""
        return self.policy.sampling_params(params)

    def init_state(self, params):
        """The TrainState of (warm-started) `params`: optimiser, critic, reference copy (KL or
        PivotRL's probe), KL controller; placed on the mesh, with the jitted step built for it."""
        c = self.config
        ctrl = None
        if c.kl.mode != "none":
            ctrl = init_kl_controller(c.kl.coef, target=c.kl.target if c.kl.adaptive else None,
                                      horizon=c.kl.horizon if c.kl.adaptive else 10.0)
        critic_params = None
        if self.critic_params is not None:  # the critic's trunk is the warm-started policy's
            critic_params = critic_from_policy(c, self.model_of(params), self.mesh)[1]
        state = create_train_state(
            params, self.optimizer, seed=c.seed,
            ref_params=self.policy.reference_copy(params, self.needs_ref),
            critic_params=critic_params, critic_optimizer=self.critic_optimizer,
            kl_controller=ctrl, extras=self.algorithm.init_extras(),
            trainable=self.policy.trainable,
            critic_trainable=self.algorithm.critic_trainable)

        def pick(x):
            sh = getattr(x, "sharding", None)
            if isinstance(sh, jax.sharding.NamedSharding) and sh.mesh == self.mesh:
                return sh
            return self.replicated

        self.live.state_sharding = jax.tree.map(pick, state)
        state = jax.device_put(state, self.live.state_sharding)
        self.live.step_fn = jit_step(self.algorithm.train_step, state_sharding=self.live.state_sharding,
                                batch_sharding=self.batch_sharding, donate=not self.asynchronous)
        return state

    def reference_params(self, state):
        """π_ref's parameters: the TrainState's reference copy, or with LoRA the policy's
        parameters with the adapters off."""
        return self.policy.reference_params(state)

    def learn(self, state, batch):
        """One jitted learner step on the global batch. Multi-host: each process contributes its
        local rows (`jax.make_array_from_process_local_data`) to one array over the global mesh."""
        if self.num_processes > 1:
            batch = jax.tree.map(lambda x: jax.make_array_from_process_local_data(
                self.batch_sharding, np.asarray(x)), batch)
        else:
            batch = jax.device_put(batch, self.batch_sharding)
        return self.live.step_fn(state, batch)

    def close(self) -> None:
        self.collector.close()
        for j in self.judges:
            j.close()


def remote_environments(c, kit):
    """The kit with its environments in Ray actors (`rollout.env_executor="ray"`,
    `rlvr.verifiers.ray_envs`), else the kit itself."""
    ro = c.rollout
    if not kit.multi_turn or ro.env_executor != "ray":
        return kit
    from rlvr.verifiers.ray_envs import RayEnvFactory

    return dataclasses.replace(kit, env_factory=RayEnvFactory(
        kit.env_factory, num_workers=ro.env_workers, address=c.reward.ray_address,
        call_timeout_s=ro.env_call_timeout_s))


def build_kit_checked(c):
    """The task kit of `config.task`, and the kit-dependent config checks (ConfigError)."""
    from rlvr.tasks.files import kit_kwargs

    try:
        kwargs = kit_kwargs(c.task.names, c.task.kwargs.to_dict(), c.task.eval_path)
        kit = build_kit(c.task.names, c.task.weights, kwargs)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"config.task (names {tuple(c.task.names)}, kwargs "
                          f"{c.task.kwargs.to_dict()}): {e}") from None
    errors = check_applicability(c, multi_turn=kit.multi_turn)
    if resolved(c)["collector"] == "pivots":
        if not kit.multi_turn:
            errors.append(f"the pivots collector ({c.algorithm.name}) needs a multi-turn task kit; "
                          f"{kit.name!r} is single-turn")
        elif not kit.turn_verifiers:
            errors.append(f"task kit {kit.name!r} has no turn verifier (the pivots collector needs one)")
    if errors:
        raise ConfigError("invalid config:\n  " + "\n  ".join(errors))
    return kit


def build_mesh(c):
    """(mesh, replicated sharding); the batch must split evenly over its data shards."""
    from rlvr.parallel import make_mesh

    from rlvr.parallel import batch_axes

    m = c.mesh
    expert = m.get("expert", 1)
    mesh = make_mesh(m.data if m.data > 0 else jax.device_count() // (m.fsdp * m.tensor * expert),
                     m.fsdp, m.tensor, expert=expert)
    shards = int(np.prod([mesh.shape[a] for a in batch_axes(mesh)]))
    rows = c.sampling.prompts_per_step * c.algorithm.group_size
    if rows % shards:
        raise ConfigError(f"the batch must split evenly over the mesh's {shards} data shards "
                          f"(mesh.data × mesh.fsdp × mesh.expert): prompts_per_step × group_size "
                          f"= {rows} rows; change sampling.prompts_per_step or mesh.data")
    return mesh, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())


def critic_from_policy(c, policy, mesh):
    """(graphdef, parameters on the mesh, rest) of a critic whose trunk copies `policy`'s
    (value pre-training starts from the policy, docs/algorithms.md §7). All its parameters, frozen ones
    included, are the TrainState's `critic_params`; the learner trains the
    `algorithm.critic_freeze_attention` subset."""
    from rlvr.parallel import param_shardings

    graphdef, params, rest = split_model(ValueModel.from_policy(policy, rngs=nnx.Rngs(c.seed + 1)))
    return graphdef, jax.device_put(params, param_shardings(params, mesh)), rest


def build_algorithm(c, policy, mesh, lora=None, *, single_turn: bool = False):
    """(algorithm, policy graphdef / params / rest, optimiser, critic params and optimiser).
    `lora`: the policy's `LoRAPolicy` (only its adapters are trained), or None. single_turn:
    see `algorithm_settings`."""
    from rlvr.parallel import param_shardings

    cls = resolved(c)["cls"]
    graphdef, params, rest = split_model(policy)
    params = jax.device_put(params, param_shardings(params, mesh))
    optimizer = optimizer_from_config(c)
    kw = dict(policy_graphdef=graphdef, policy_rest=rest, optimizer=optimizer, lora=lora, mesh=mesh)
    critic_params = critic_opt = None
    if cls.uses_critic:
        a = c.algorithm
        cg, critic_params, cr = critic_from_policy(c, policy, mesh)
        critic_opt = optimizer_from_config(c, learning_rate=a.critic_learning_rate)
        kw.update(critic_graphdef=cg, critic_rest=cr, critic_optimizer=critic_opt,
                  critic_trainable=(trainable_filter(True) if a.critic_freeze_attention else None))
    algorithm = cls(algorithm_settings(c, single_turn=single_turn), **kw)
    return algorithm, (graphdef, params, rest), optimizer, critic_params, critic_opt


def _pivot_settings(pv) -> PivotSettings:
    """PivotSettings from the `pivot` fields that are active for its selection."""
    kw = dict(candidates=pv.candidates, selection=pv.selection, hint=pv.hint,
              reprofile_every=pv.reprofile_every)
    if pv.selection in ("filter", "variance"):
        kw["m"] = pv.m
    if pv.selection == "filter":
        kw["lambda_diff"] = pv.lambda_diff
    if pv.selection == "random":
        kw["random_fraction"] = pv.random_fraction
    if pv.hint:
        kw["hint_fraction"] = pv.hint_fraction
    return PivotSettings(**kw)


def build_collector(c, kit, tokenizer, engine, judge, sampling, workdir, process_index, num_processes):
    """The collector the algorithm asks for (groups or pivots), optionally asynchronous, or
    under the modelled clock (`rollout.clock`)."""
    a, t, s, ro = c.algorithm, c.task, c.sampling, c.rollout
    groups = resolved(c)["collector"] == "groups"
    sampler_kw = {}
    if groups and t.curriculum != "none":
        sampler_kw = dict(curriculum=t.curriculum, ema=t.curriculum_ema, floor=t.curriculum_floor)
        if t.curriculum == "variance":
            sampler_kw["alpha"] = t.curriculum_alpha
    sampler = col.TaskSampler(kit.source, seed=c.seed, pool_size=t.pool_size, **sampler_kw)
    common = dict(group_size=a.group_size, prompts_per_step=s.prompts_per_step, sampling=sampling,
                  seed=c.seed, process_index=process_index, num_processes=num_processes)
    if groups:
        ds = dict(dynamic_sampling=True, max_rounds=a.dynamic_sampling_max_rounds) if a.dynamic_sampling else {}
        collector = col.GroupCollector(engine(judge), sampler, **common, **ds)
    else:
        pv = c.pivot
        turn_engine = col.TurnEngine(model_of=engine.model_of, tokenizer=tokenizer, judge=judge,
                                     terminator=kit.action_terminator, max_tokens=c.model.max_seq_len,
                                     prompt_bucket=ro.prompt_bucket, batch_bucket=ro.batch_bucket,
                                     environment_version=kit.environment_version(),
                                     sharding=engine.sharding, decode=engine.decode)
        collector = PivotCollector(
            turn_engine, kit=kit, tokenizer=tokenizer, pool=sampler.pool, settings=_pivot_settings(pv),
            workdir=workdir, episode_engine=engine(judge) if pv.candidates == "demo+rollout" else None,
            **common)
    if ro.clock == "modelled":  # virtual time: no rollout thread (rlvr.train.clock)
        from rlvr.train.clock import ModelledClockCollector, TimeModel, clock_mode

        stale = (dict(max_staleness=ro.max_staleness, staleness_decay=ro.staleness_decay,
                      backpressure=ro.staleness_backpressure,
                      sample_ahead=ro.clock_sample_ahead) if ro.asynchronous else {})
        return ModelledClockCollector(collector, TimeModel.from_json(ro.time_model), seed=c.seed,
                                      mode=clock_mode(a.group_size, ro.asynchronous), **stale)
    if ro.asynchronous:
        per_episode = ro.arrival == "episode"  # producer_batch or episode_slots, as applies
        collector = col.AsyncCollector(
            collector, prompts_per_step=s.prompts_per_step,
            producer_batch=0 if per_episode else ro.producer_batch,
            queue_size=ro.queue_size, max_staleness=ro.max_staleness,
            staleness_decay=ro.staleness_decay, backpressure=ro.staleness_backpressure,
            arrival=ro.arrival, slots=ro.episode_slots if per_episode else 0)
    return collector


class _Engines:
    """Builds the engine of the kit (single-turn text or multi-turn episodes) for a judge."""

    def __init__(self, c, kit, tokenizer, graphdef, rest, renderer=None, sharding=None):
        self.c, self.kit, self.tokenizer, self.renderer = c, kit, tokenizer, renderer
        self.sharding = sharding  # rlvr.parallel.GenerationSharding every sampler call runs with
        self.decode = DecodeSchedule(segments=c.rollout.decode_segments,
                                     compact_finished=c.rollout.compact_finished,
                                     shared_prefix=(not kit.multi_turn
                                                    and c.rollout.shared_prompt_cache))
        self.model_of = lambda p: nnx.merge(graphdef, p, rest)  # noqa: E731

    def __call__(self, judge):
        c, kit = self.c, self.kit
        T, bucket = c.model.max_seq_len, c.rollout.prompt_bucket
        if kit.multi_turn:
            return col.EpisodeEngine(model_of=self.model_of, tokenizer=self.tokenizer, judge=judge,
                                     kit=kit, max_turns=c.rollout.max_turns, max_tokens=T,
                                     prompt_bucket=bucket, batch_bucket=c.rollout.batch_bucket,
                                     kv_reuse=c.rollout.kv_reuse,
                                     max_env_retries=c.reward.max_retries,
                                     renderer=self.renderer, sharding=self.sharding,
                                     decode=self.decode,
                                     episode_timeout_s=c.rollout.episode_timeout_s)
        return col.TextEngine(model_of=self.model_of, tokenizer=self.tokenizer, judge=judge,
                              prompt_len=T - c.sampling.max_new_tokens, prompt_bucket=bucket,
                              renderer=self.renderer, sharding=self.sharding, decode=self.decode)


def build_run(config, workdir: str) -> Run:
    """All components of a run (module docstring). `config` is validated by the caller."""
    c = config
    if c.mesh.distributed:
        from rlvr.parallel import initialize_distributed

        initialize_distributed(c.mesh.coordinator or None, c.mesh.num_processes, c.mesh.process_id,
                               cpu_collectives=True)
    process_index, num_processes = jax.process_index(), jax.process_count()
    if c.rollout.asynchronous and num_processes > 1:
        raise ConfigError(f"config.rollout.asynchronous=True cannot run on {num_processes} "
                          f"processes yet (each would take the global sampling.prompts_per_step "
                          f"from its own queue): run it on one process or turn it off")
    kit = build_kit_checked(c)
    tokenizer = build_tokenizer(c, kit)
    kit = remote_environments(c, bind_kit(c, kit, tokenizer))
    renderer = build_renderer(c, kit, tokenizer)
    check_prompt_lengths(c, kit, renderer)
    if c.train.sft_steps and kit.demonstration is None:
        raise ConfigError(f"config.train.sft_steps={c.train.sft_steps}: task kit {kit.name!r} "
                          f"has no demonstrations (set train.sft_steps=0)")
    policy = build_policy(c, tokenizer.vocab_size)
    pc = policy.config
    if (not kit.multi_turn and c.rollout.shared_prompt_cache
            and any(pc.is_sliding(i) for i in range(pc.num_layers))):
        raise ConfigError("config.rollout.shared_prompt_cache=True does not support the model's "
                          "sliding-window attention layers: set rollout.shared_prompt_cache=False")
    lora = build_lora(c, policy)
    mesh, replicated = build_mesh(c)
    algorithm, (graphdef, params, rest), optimizer, critic_params, critic_opt = \
        build_algorithm(c, policy, mesh, lora, single_turn=not kit.multi_turn)

    s = c.sampling
    sampling = SamplingParams(temperature=s.temperature, top_k=s.top_k, top_p=s.top_p,
                              max_new_tokens=s.max_new_tokens, stop_token_ids=renderer.stop_ids)
    judge_kw = dict(executor=c.reward.executor, cache=c.reward.cache,
                    env_version=kit.environment_version())
    if c.reward.executor != "inline":
        judge_kw["num_workers"] = c.reward.num_workers
    judge_kw["timeout_s"] = c.reward.timeout_s
    if c.reward.executor == "ray":
        judge_kw["ray_address"] = c.reward.ray_address
    pivots = resolved(c)["collector"] == "pivots"
    reward_config = reward_config_from(c)
    verifier = kit.turn_verifiers[c.pivot.reward] if pivots else kit.verifier
    judges = [Judge(verifier, reward_config, **judge_kw)]
    # generation splits its rows over the run's mesh; multi-host, each process samples its own
    # rows on its local devices (the loop assembles the global batch)
    from rlvr.parallel import generation_sharding, local_generation_sharding

    gen_sharding = generation_sharding(mesh) if num_processes == 1 else local_generation_sharding()
    engine = _Engines(c, kit, tokenizer, graphdef, rest, renderer, gen_sharding)
    collector = build_collector(c, kit, tokenizer, engine, judges[0], sampling, workdir,
                                process_index, num_processes)

    # hidden check (docs/architecture.md §7): the kit's own; else, for kits whose outputs are the bare answer
    # (character-level procedural kits), exact match with the reference
    hidden = kit.hidden_verifier
    hidden_fn = ((lambda task, out: float(hidden.verify(task, out).passed)) if hidden is not None
                 else (exact_hidden_check if not kit.multi_turn and kit.alphabet is not None
                       else None))
    evaluator = None
    if c.eval.num_tasks:
        e = c.eval
        judges.append(Judge(kit.verifier, reward_config, **judge_kw))
        try:
            heldout = heldout_tasks(kit.source, e.num_tasks, e.seed)
        except ValueError as err:
            raise ConfigError(f"config.eval.num_tasks={e.num_tasks}: no held-out set: "
                              f"{err}") from None
        if e.greedy:
            eval_kw = dict(samples_per_task=1, pass_k=(1,),
                           sampling=dataclasses.replace(sampling, greedy=True))
        else:
            eval_kw = dict(samples_per_task=e.samples_per_task, pass_k=e.pass_k,
                           sampling=dataclasses.replace(sampling, temperature=e.temperature))
        evaluator = Evaluator(engine(judges[1]), heldout, seed=e.seed, hidden=hidden_fn, **eval_kw)

    from rlvr.parallel import batch_sharding

    return Run(config=c, workdir=workdir, kit=kit, tokenizer=tokenizer, renderer=renderer,
               graphdef=graphdef,
               rest=rest, init_params=params, critic_params=critic_params,
               critic_optimizer=critic_opt, optimizer=optimizer, algorithm=algorithm, mesh=mesh,
               batch_sharding=batch_sharding(mesh, 1), replicated=replicated, collector=collector,
               evaluator=evaluator, judges=tuple(judges),
               needs_ref=c.kl.mode != "none" or pivots, asynchronous=c.rollout.asynchronous,
               hidden=hidden_fn,
               policy=build_policy_seam(graphdef, rest, replicated, num_processes, lora),
               process_index=process_index,
               num_processes=num_processes)
