"""Shared base configuration for every rlvr experiment (SPEC R6.1, R7; seed 002 §5, §7, §9).

Every experiment config does `config = base.get_config()` and then overrides fields. The returned
ConfigDict is *locked*: assigning a key that does not exist here raises, so a typo in an experiment
file or on the command line (`--config.algorithm.clip_hihg=0.3`) fails at start. Types are fixed
by the defaults below (ml_collections type safety): `--config.train.num_steps=abc` fails too.
`rlvr.train.config.validate_config` checks allowed values and cross-field consistency.

Every field is documented where it is set.
"""

from __future__ import annotations

import ml_collections


def get_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()

    # Global seed: model init, task sampling, rollout sampling and minibatch shuffling all derive
    # their keys from it, so the same config + seed gives the same run (DESIGN.md house rules).
    c.seed = 0

    # ---------------------------------------------------------------- model (rlvr.models)
    c.model = ml_collections.ConfigDict()
    c.model.vocab_size = 0          # 0: take the tokenizer's vocabulary size.
    c.model.num_layers = 2          # decoder blocks.
    c.model.d_model = 64            # residual width.
    c.model.num_heads = 4           # attention heads.
    c.model.num_kv_heads = 4        # key/value heads (GQA when < num_heads).
    c.model.d_ff = 256              # MLP hidden width.
    c.model.max_seq_len = 64        # positions the model supports (prompt + completion).
    c.model.dtype = "float32"       # activation dtype: float32 | bfloat16.
    c.model.init_from = ""          # "": random init; else a Hugging Face checkpoint directory.

    # ---------------------------------------------------------------- tokenizer
    c.tokenizer = ml_collections.ConfigDict()
    c.tokenizer.kind = "char"       # "char": CharTokenizer over the task's alphabet (pad 0, bos 1, eos 2).

    # ---------------------------------------------------------------- task (rlvr.tasks)
    c.task = ml_collections.ConfigDict()
    c.task.names = ("arithmetic",)  # task sources (registry names); several = a mixture.
    c.task.weights = (1.0,)         # mixture weights, one per name (normalised).
    # Keyword arguments for the task source(s) (difficulty, ...); forwarded as-is, validated there.
    c.task.kwargs = ml_collections.ConfigDict()
    c.task.curriculum = "none"      # none | variance (eq.41 w ∝ [p(1-p)]^α) | learning_progress (eq.42).
    c.task.curriculum_alpha = 1.0   # α of eq.41.
    c.task.curriculum_pool = 256    # curriculum: size of the fixed training pool it tracks p_x on.
    c.task.curriculum_ema = 0.5     # curriculum: EMA factor for the per-task success estimate p_x.
    c.task.curriculum_floor = 0.05  # curriculum: floor on weights so no task gets probability 0.

    # ---------------------------------------------------------------- algorithm (rlvr.algorithms)
    c.algorithm = ml_collections.ConfigDict()
    c.algorithm.name = "grpo"       # grpo | rloo | reinforce | ppo.
    c.algorithm.group_size = 8      # G: samples per prompt (≥ 2 for grpo / rloo).
    c.algorithm.advantage = ""      # "": the algorithm's own; else grpo | rloo | reinforce | gae.
    c.algorithm.scale_rewards = "group"  # grpo: group (eq.74, divide by std) | none (no-std variant).
    c.algorithm.adv_eps = 1e-6      # δ of eq.74.
    c.algorithm.clip_low = 0.2      # ε_low: ratio lower bound 1-ε_low (eq.71).
    c.algorithm.clip_high = 0.2     # ε_high: ratio upper bound 1+ε_high (asymmetric clip, R3.5).
    c.algorithm.dual_clip = 0.0     # c of dual clip for negative advantages; 0 = off (must be > 1).
    c.algorithm.aggregation = "token-mean"  # token-mean | seq-mean-token-mean | seq-mean-token-sum (R3.8).
    c.algorithm.entropy_coef = 0.0  # c_e of eq.72 (entropy bonus).
    c.algorithm.baseline_momentum = 0.9  # reinforce: running-baseline EMA factor (eq.76).
    c.algorithm.gamma = 1.0         # ppo: discount γ of GAE (eq.68).
    c.algorithm.gae_lambda = 1.0    # ppo: λ of GAE (eq.69).
    c.algorithm.value_coef = 0.5    # ppo: c_v of eq.72 (weight of the value loss).
    c.algorithm.value_clip = 0.2    # ppo: value-loss clipping range; 0 = off.
    c.algorithm.critic_warmup_steps = 0  # ppo: steps that train only the critic before the policy.
    c.algorithm.critic_learning_rate = 1e-3  # ppo: critic optimiser learning rate.
    c.algorithm.critic_updates = 1  # ppo: critic updates per policy update (SAO uses 2).
    c.algorithm.dynamic_sampling = False  # drop groups whose rewards are all equal and refill.
    c.algorithm.dynamic_sampling_max_rounds = 3  # extra rollout rounds allowed to refill the batch.
    c.algorithm.recompute_old_logprobs = True  # score old log-probs with the learner before update.

    # ---------------------------------------------------------------- sampling (rlvr.rollout)
    c.sampling = ml_collections.ConfigDict()
    c.sampling.prompts_per_step = 8  # prompts per training step (batch = prompts × group_size).
    c.sampling.max_new_tokens = 16  # completion length cap (truncation beyond it).
    c.sampling.temperature = 1.0    # sampling temperature (also used when scoring log-probs).
    c.sampling.top_p = 1.0          # nucleus sampling; 1 = off.
    c.sampling.top_k = 0            # top-k sampling; 0 = off.

    # ---------------------------------------------------------------- optimizer (optax)
    c.optimizer = ml_collections.ConfigDict()
    c.optimizer.name = "adamw"      # adamw | adam | sgd.
    c.optimizer.learning_rate = 1e-4  # peak learning rate.
    c.optimizer.warmup_steps = 0    # linear warm-up (optimiser steps).
    c.optimizer.schedule = "constant"  # constant | cosine (decay to 0 over train.num_steps).
    c.optimizer.weight_decay = 0.0  # AdamW decoupled weight decay.
    c.optimizer.b1 = 0.9            # Adam β1.
    c.optimizer.b2 = 0.999          # Adam β2.
    c.optimizer.eps = 1e-8          # Adam ε.
    c.optimizer.max_grad_norm = 1.0  # global-norm gradient clipping; 0 = off.

    # ---------------------------------------------------------------- train (rlvr.train)
    c.train = ml_collections.ConfigDict()
    c.train.num_steps = 100         # RL steps (rollout → verify → update → publish).
    c.train.epochs = 1              # optimisation epochs over each rollout batch.
    c.train.num_minibatches = 1     # optimiser steps per epoch (batch split into minibatches).
    c.train.num_microbatches = 1    # gradient-accumulation chunks per minibatch (exact token-mean).
    c.train.sft_steps = 0           # supervised warm-start steps on task demonstrations (0 = none).
    c.train.sft_batch_size = 32     # demonstrations per SFT step.
    c.train.sft_learning_rate = 1e-3  # SFT learning rate (AdamW).
    c.train.progress = True         # tqdm progress bar on the console.

    # ---------------------------------------------------------------- kl (R3.7, eq.21-23)
    c.kl = ml_collections.ConfigDict()
    c.kl.mode = "none"              # none | reward (eq.22 penalty) | loss (β·KL term in the loss).
    c.kl.estimator = "k3"           # k1 | k2 | k3 per-token estimators of KL(π_θ‖π_ref).
    c.kl.coef = 0.0                 # β (initial value when adaptive).
    c.kl.adaptive = False           # adapt β by eq.23.
    c.kl.target = 0.01              # D_target of eq.23.
    c.kl.horizon = 10.0             # adaptive β: η_β of eq.23 = 1 / horizon per step (larger = slower).

    # ---------------------------------------------------------------- reward (rlvr.verifiers.compose)
    c.reward = ml_collections.ConfigDict()
    c.reward.correct_weight = 1.0   # weight of the correctness component.
    c.reward.format_weight = 0.0    # weight of the format component (≪ correctness, R2.4).
    c.reward.unknown_as = "fail"    # fail | mask: how an `unknown` decision enters training.
    c.reward.clip = 0.0             # clip composed reward to [-clip, clip]; 0 = off (eq.65).
    # Verification runs through rlvr.verifiers.pool.VerificationPool with this executor; each
    # enforces timeout_s: inline (one call at a time on a watchdog thread; a call past the limit
    # is abandoned and the next runs on a fresh thread — cheap, the default), thread (a thread
    # pool; calls past timeout_s are abandoned) or process (worker processes, killed and
    # replaced past timeout_s: use it for verifiers that may hang for good or burn CPU).
    c.reward.executor = "inline"
    c.reward.num_workers = 2        # pool workers (thread / process executors; ≥ 1).
    c.reward.timeout_s = 5.0        # per-call limit, every executor: past it → env_error, retried, masked.
    c.reward.max_retries = 2        # env_error retries (by the pool) before the sample is masked (R2.1).

    # ---------------------------------------------------------------- eval (R7.1, R7.3)
    c.eval = ml_collections.ConfigDict()
    c.eval.every = 10               # held-out evaluation every N steps (0 = only at start/end).
    c.eval.num_tasks = 64           # size of the fixed held-out seed set.
    c.eval.samples_per_task = 4     # n samples per task (pass@k needs n ≥ k).
    c.eval.pass_k = (1, 4)          # k values reported as pass@k (eq.93).
    c.eval.temperature = 1.0        # eval sampling temperature (sampled success).
    c.eval.seed = 12345             # seed of the held-out set (disjoint from training streams).

    # ---------------------------------------------------------------- checkpoint (orbax)
    c.checkpoint = ml_collections.ConfigDict()
    c.checkpoint.every = 50         # save every N steps (0 = only at the end).
    c.checkpoint.max_to_keep = 2    # checkpoints kept on disk.
    c.checkpoint.resume = True      # resume from the latest checkpoint in the workdir if any.

    # ---------------------------------------------------------------- logging
    c.logging = ml_collections.ConfigDict()
    c.logging.every = 1             # write metrics every N steps.
    c.logging.tensorboard = True    # also write TensorBoard events (tensorboardX).
    c.logging.plot = True           # write curves.png to the workdir at the end.

    # ---------------------------------------------------------------- mesh (rlvr.parallel)
    c.mesh = ml_collections.ConfigDict()
    c.mesh.data = -1                # data-parallel axis size; -1 = all remaining devices.
    c.mesh.fsdp = 1                 # parameter-sharding axis size.
    c.mesh.tensor = 1               # tensor-parallel axis size.
    c.mesh.distributed = False      # call jax.distributed.initialize() (multi-host).
    c.mesh.coordinator = ""         # multi-host: "host:port" of process 0 ("" = auto-detect).
    c.mesh.num_processes = 1        # multi-host: number of processes.
    c.mesh.process_id = 0           # multi-host: this process's id.

    c.lock()
    c.task.kwargs.unlock()  # free-form: forwarded to the task source, which validates them.
    return c
