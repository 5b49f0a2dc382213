"""The one config schema of every rlvr run (docs/architecture.md (B.1), §7, §3).

Every experiment config does `config = base.get_config()` and then overrides fields. The returned
ConfigDict is *locked*: assigning a key that does not exist here raises, so a typo in an experiment
file or on the command line (`--config.algorithm.clip_hihg=0.3`) fails at start. Types are fixed
by the defaults below (ml_collections type safety): `--config.train.num_steps=abc` fails too.

`rlvr.train.config.validate_config` checks allowed values, cross-field consistency and
applicability: a field that does not apply to the chosen algorithm / collector / task (e.g.
`pivot.m` with GRPO, `algorithm.value_clip` without a critic) must keep its default here, or the
run is refused at start naming the field. Every other field is read by the run.

Every field is documented where it is set.
"""

from __future__ import annotations

import ml_collections


def get_config() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()

    # Global seed: model init, task sampling, rollout sampling and minibatch shuffling all derive
    # their keys from it, so the same config + seed gives the same run.
    c.seed = 0

    # ---------------------------------------------------------------- model (rlvr.models)
    c.model = ml_collections.ConfigDict()
    c.model.init_from = ""          # "": random init of the shape below; else a Hugging Face
                                    # checkpoint directory (its config.json gives the shape).
    c.model.vocab_size = 0          # random init: 0 takes the tokenizer's vocabulary size.
    c.model.num_layers = 2          # random init: decoder blocks.
    c.model.d_model = 64            # random init: residual width.
    c.model.num_heads = 4           # random init: attention heads.
    c.model.num_kv_heads = 4        # random init: key/value heads (GQA when < num_heads).
    c.model.d_ff = 256              # random init: MLP hidden width.
    c.model.max_seq_len = 64        # longest stream the run samples or trains on (prompt +
                                    # completion, or a whole multi-turn episode).
    # compute dtype of the activations: "float32" | "bfloat16", or the JAX / numpy dtype
    # (jnp.bfloat16); logits are float32 whatever it is.
    c.model.dtype = ml_collections.FieldReference("float32", field_type=object)
    # storage dtype of the parameters: "float32" | "bfloat16", or the JAX / numpy dtype.
    c.model.param_dtype = ml_collections.FieldReference("float32", field_type=object)
    c.model.remat = False           # recompute each block's activations in the backward pass.
    c.model.attention = "xla"       # attention implementation: xla | cudnn (GPU only; runs causal
                                    # attention with per-row lengths, no dense mask).
    c.model.fused_projections = False  # one q/k/v kernel and one gate/up kernel per layer, each
                                    # one matmul (same function; checkpoints and exports keep
                                    # the separate tensors; LoRA targets take all of q/k/v and
                                    # of gate/up or none).
    # LoRA / QLoRA (rlvr.models.lora): low-rank adapters on the block projections; only the
    # adapters are trained (and held in the optimiser state), the base is frozen, and the
    # reference policy (KL, PivotRL's probe) is the base with the adapters off (no second copy
    # of the weights). A warm start (train.sft_steps) trains the whole model before the adapters
    # are attached. Adapters want a larger learning rate than full fine-tuning (quickstart: 3x).
    c.model.lora = ml_collections.ConfigDict()
    c.model.lora.rank = 0           # adapter rank r; 0 = LoRA off (full fine-tuning).
    c.model.lora.alpha = 16.0       # the adapter update is scaled by alpha / rank.
    c.model.lora.dropout = 0.0      # dropout on the adapters' input in the learner's forward pass.
    # projections that get an adapter (any of the seven block projections).
    c.model.lora.targets = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                            "down_proj")
    c.model.lora.quantize = "none"  # QLoRA: none | int8 | nf4 storage of the frozen block
                                    # projections (embeddings, norms, LM head stay param_dtype).
    c.model.lora.train_norms = False  # also train the RMSNorm scales (a few d_model vectors): lets
                                      # RL sharpen the policy, which projection adapters cannot.

    # ---------------------------------------------------------------- tokenizer
    c.tokenizer = ml_collections.ConfigDict()
    c.tokenizer.kind = "char"       # "char": CharTokenizer over the task kit's alphabet (pad 0, bos 1,
                                    # eos 2; kits without an alphabet cannot use it) | "hf": the
                                    # Hugging Face tokenizer of tokenizer.path (AutoTokenizer).
    c.tokenizer.path = ""           # hf: local tokenizer folder; "" = model.init_from.
    c.tokenizer.chat_template = False  # hf: render prompts with the tokenizer's chat template
                                    # (system + user turn, assistant turn opened); single-turn
                                    # kits (tool kits always render with it). Generation stops on eos and the template's
                                    # end-of-turn token (rlvr.models.prompts).
    c.tokenizer.system_prompt = ""  # chat template: the system message ("" = none).
    c.tokenizer.instruction = ""    # hf: text appended to every prompt on its own line, e.g.
                                    # "Put your final answer within \boxed{}." ("" = none).

    # ---------------------------------------------------------------- task (rlvr.tasks kits)
    c.task = ml_collections.ConfigDict()
    c.task.names = ("arithmetic",)  # task kits (rlvr.tasks.kit registry); several = a mixture of
                                    # single-turn kits.
    c.task.weights = (1.0,)         # mixture weights, one per name (normalised).
    # Keyword arguments for the task kit(s) (difficulty, demo_style, max_record_bytes of a
    # dataset file kit, ...); forwarded as-is and validated by the kit's builder.
    c.task.kwargs = ml_collections.ConfigDict()
    c.task.eval_path = ""           # dataset-file kit (gsm8k: / math: / code: / structured: /
                                    # jsonl:PATH): a second file of the same format whose records
                                    # are all "eval" (e.g. the test.parquet beside train.parquet);
                                    # "" = none. Any other task refuses it at start.
    c.task.pool_size = 0            # 0: fresh training tasks every step; N: a fixed pool of N
                                    # train tasks drawn once (needed by curricula and PivotRL,
                                    # whose candidate states are the pool's demonstration turns).
    c.task.curriculum = "none"      # none | variance (docs/algorithms.md (A.20) w ∝ [p(1-p)]^α) | learning_progress.
    c.task.curriculum_alpha = 1.0   # variance curriculum: α of docs/algorithms.md (A.20).
    c.task.curriculum_ema = 0.5     # curriculum: EMA factor for the per-task success estimate p_x.
    c.task.curriculum_floor = 0.05  # curriculum: floor on weights so no task gets probability 0.

    # ---------------------------------------------------------------- algorithm (rlvr.algorithms)
    c.algorithm = ml_collections.ConfigDict()
    c.algorithm.name = "grpo"       # grpo | rloo | reinforce | ppo | pivotrl | sao | a registered name.
    c.algorithm.group_size = 8      # G samples (or episodes) per task; PivotRL: K per kept state.
    c.algorithm.advantage = ""      # "": the algorithm's own; else grpo | rloo | reinforce (critic-free)
                                    # or gae (critic algorithms).
    c.algorithm.policy_loss = ""    # "": the algorithm's own; else clip (PPO token clip) |
                                    # trust_region (SAO token mask) | sequence_clip (PivotRL turn ratio)
                                    # | gspo (GSPO length-normalised sequence ratio; wants a small
                                    # clip range, e.g. clip_low=3e-4, clip_high=4e-4) | cispo
                                    # (MiniMax-M1: clipped stop-gradient IS weight × Â log π).
    c.algorithm.scale_rewards = "group"  # grpo advantages: group (docs/algorithms.md (A.2), divide by std) | none (no-std).
    c.algorithm.adv_eps = 1e-6      # grpo advantages: δ of docs/algorithms.md (A.2).
    c.algorithm.normalize_advantages = False  # whiten advantages over the batch's policy tokens.
    c.algorithm.clip_low = 0.2      # ε_low: ratio lower bound 1-ε_low (docs/algorithms.md (A.8); PivotRL's ε).
    c.algorithm.clip_high = 0.2     # ε_high: ratio upper bound 1+ε_high (asymmetric clip, docs/algorithms.md (A.8)-(A.9)).
    c.algorithm.dual_clip = 0.0     # clip policy loss: dual clip c for negative advantages; 0 = off (> 1).
    c.algorithm.aggregation = "token-mean"  # token losses: token-mean | seq-mean-token-mean |
                                    # seq-mean-token-sum | seq-mean-token-sum-norm (Dr. GRPO:
                                    # Σ_t over a constant length L); also the value loss's.
    c.algorithm.loss_length_normalizer = 0  # seq-mean-token-sum-norm: the constant L; 0 =
                                    # sampling.max_new_tokens.
    # off-policy correction: a stop-gradient weight π_old/μ on each token's (or sequence's) loss,
    # μ = the sampler's behaviour log-probs (needs recompute_old_logprobs=True).
    c.algorithm.is_correction = "none"  # none | tis (truncated: min(ρ, C)) | mis (masked:
                                    # ρ·1[lo ≤ ρ ≤ C]).
    c.algorithm.is_level = "token"  # token (ρ per token) | sequence (ρ = Π_t ρ_t per row; the only
                                    # level of the sequence objectives sequence_clip / gspo).
    c.algorithm.is_threshold = 2.0  # C: tis cap / mis upper bound (> 0).
    c.algorithm.is_threshold_low = 0.0  # mis: lower bound lo of the kept ratios (0 = none; < C).
    c.algorithm.overlong_buffer = 0  # DAPO overlong shaping (critic-free algorithms): soft
                                    # punishment over the last L_cache tokens before
                                    # sampling.max_new_tokens: reward += penalty·(L_max−L_cache−|y|)/
                                    # L_cache there (−penalty at L_max); 0 = off.
    c.algorithm.overlong_penalty = 1.0  # overlong shaping: the penalty at max length (≥ 0).
    c.algorithm.overlong_filter = False  # DAPO overlong filtering: truncated rows give no loss
                                    # (their reward still counts in their group's advantages).
    c.algorithm.entropy_coef = 0.0  # c_e of docs/algorithms.md (A.12) (entropy bonus).
    c.algorithm.baseline_momentum = 0.9  # reinforce advantages: running-baseline EMA factor (docs/algorithms.md (A.4)).
    c.algorithm.gamma = 1.0         # critic: discount γ of GAE (docs/algorithms.md (A.5)).
    c.algorithm.gae_lambda = 1.0    # critic: λ of GAE (docs/algorithms.md (A.5)).
    c.algorithm.skip_observations = True  # critic: Skip-Observation GAE (docs/algorithms.md (A.6)); False = naive token GAE.
    c.algorithm.value_coef = 0.5    # critic: c_v of docs/algorithms.md (A.12) (weight of the value loss). The critic has
                                    # its own optimiser, so under Adam (scale-invariant) c_v acts
                                    # only through clipping and ε: tune critic_learning_rate.
    c.algorithm.value_clip = 0.2    # critic: value-loss clipping range; 0 = off.
    c.algorithm.critic_warmup_steps = 0  # critic: first N steps train only the critic (value
                                    # pre-training on the warm policy's rollouts, docs/algorithms.md §7).
    c.algorithm.critic_learning_rate = 1e-3  # critic: optimiser learning rate.
    c.algorithm.critic_updates = 1  # critic: critic updates per policy update (SAO uses 2, docs/algorithms.md §7).
    c.algorithm.critic_freeze_attention = False  # critic: train only MLP projections + value head (docs/algorithms.md §7).
    c.algorithm.dynamic_sampling = False  # groups collector: drop groups whose rewards are all
                                    # equal and refill.
    c.algorithm.dynamic_sampling_max_rounds = 3  # dynamic sampling: extra rollout rounds allowed.
    c.algorithm.recompute_old_logprobs = True  # π_old = the learner's own scores before the update;
                                    # False: the sampler's behaviour log-probs (SAO, docs/algorithms.md (A.19)).
    c.algorithm.old_logprobs_gap_bound = 0.0  # > 0: when the π_old pass would run (several
                                    # optimiser steps), score one micro-batch of rows first; if its
                                    # mean |log π_θ − log μ| over loss tokens is <= this bound, π_old
                                    # = the behaviour log-probs μ and the rest of the pass is skipped,
                                    # else it is recomputed. 0 = always recomputed.
    c.algorithm.score_completions_only = True  # single-turn runs: the learner's LM head and
                                    # log-softmax run on the completion columns only (the loss
                                    # covers no prompt token); the same loss up to float summation
                                    # order. False = every column (multi-turn runs always do).

    # ---------------------------------------------------------------- rollout (rlvr.train.collectors)
    c.rollout = ml_collections.ConfigDict()
    c.rollout.collector = ""        # "": the algorithm's own; groups (G samples / episodes per task)
                                    # | pivots (PivotRL's probed turn states).
    c.rollout.max_turns = 8         # multi-turn kits: most actions per episode.
    c.rollout.episode_timeout_s = 0.0  # multi-turn: wall-clock bound on an episode from its start
                                    # (0 = none); past it the episode stops as "timeout"
                                    # (truncated, judged as it stands). The episodes of a batch
                                    # start together, so it bounds the batch: size it for the
                                    # largest batch (an evaluation's), or a slow batch fails them.
    c.rollout.prompt_bucket = 64    # prompts / histories padded to a multiple of this many tokens,
                                    # capped at max_seq_len - max_new_tokens (a few jit shapes,
                                    # short prompts stay short); 0: one shape, that cap.
    c.rollout.batch_bucket = 0      # multi-turn / pivot turns: the active rows of each sampler call
                                    # are padded (copies, dropped after) to the next power of two
                                    # (0) or a multiple of k (k >= 1; 1 = no padding), bounding the
                                    # sampler's batch shapes (compiles) as episodes finish.
    c.rollout.kv_reuse = False      # multi-turn: keep each episode's KV cache across turns and
                                    # prefill only the new observation (not the whole history);
                                    # same samples up to float rounding, cache of
                                    # model.max_seq_len slots per episode.
    c.rollout.decode_segments = 1   # the sampler's decode loop in k parts, each attending only to
                                    # the cache slots written so far (prompt + its last step), not
                                    # all prompt + max_new_tokens slots; same tokens, log-probs up
                                    # to float rounding; k compiled decode programs. 1: one part.
    c.rollout.compact_finished = False  # decode_segments > 1: between parts, continue only the
                                    # unfinished rows (gathered into a power-of-two batch, a
                                    # multiple of the mesh's batch shards); bitwise the same rows
                                    # as without; decode time follows the mean length, not the max.
    c.rollout.shared_prompt_cache = False  # single-turn groups (group_size >= 2): decode against
                                    # one prompt KV cache per group plus a per-sample cache of the
                                    # generated tokens (merged by log-sum-exp), not the prompt
                                    # cache repeated group_size times; same tokens, log-probs up to
                                    # float rounding. With compact_finished the prompt cache
                                    # stays whole and the running rows keep their place in their
                                    # group. Not with kv_reuse or sliding-window models.
    c.rollout.asynchronous = False  # a rollout thread fills a bounded queue the learner consumes on
                                    # arrival (docs/algorithms.md §7, docs/architecture.md §1): no group barrier between steps.
    c.rollout.producer_batch = 0    # asynchronous: tasks per rollout-thread call (0 = prompts_per_step).
    c.rollout.queue_size = 32       # asynchronous: most groups waiting (back-pressure beyond it).
    c.rollout.max_staleness = 2     # asynchronous: drop groups whose policy-version lag exceeds this.
    c.rollout.staleness_backpressure = True  # asynchronous: the thread waits while its next batch
                                    # would arrive with lag > max_staleness (no stale work made).
    c.rollout.staleness_decay = 1.0  # asynchronous: sample weight decay**lag (1 = no down-weighting).
    c.rollout.arrival = "batch"     # asynchronous: "batch" (producer_batch tasks' groups at a time)
                                    # | "episode" (multi-turn, group_size 1: episode_slots episodes in
                                    # flight, each queued as it ends; docs/algorithms.md §7).
    c.rollout.episode_slots = 0     # arrival "episode": episodes in flight (0 = prompts_per_step).
    c.rollout.env_executor = "local"  # multi-turn: "local" environments in this process | "ray":
                                    # in Ray actors on reward.ray_address (rlvr.verifiers.ray_envs).
    c.rollout.env_workers = 2       # env_executor "ray": host actors (each runs many environments).
    c.rollout.env_call_timeout_s = 60.0  # env_executor "ray": a call past it ends its episode as
                                    # env_error and its host actor is replaced.
    c.rollout.clock = "real"        # "real" | "modelled": batches gathered in virtual time by a
                                    # deterministic event loop (rlvr.train.clock, docs/algorithms.md
                                    # §7); mode from asynchronous and group_size: grpo_sync, sao_sync,
                                    # grpo_async, sao; logs time/modelled_s.
    c.rollout.time_model = ""       # clock "modelled": the time model's JSON file (seconds per token,
                                    # tool latency, learner step, slots, topology).
    c.rollout.clock_sample_ahead = 0  # clock "modelled", asynchronous: units sampled in one batch
                                    # ahead of their virtual starts while the parameters stay the
                                    # same (0: the time model's slots ÷ group_size; 1: each alone).

    # ---------------------------------------------------------------- pivot (PivotRL, docs/algorithms.md §6)
    c.pivot = ml_collections.ConfigDict()
    c.pivot.candidates = "demo"     # demo | demo+rollout (docs/algorithms.md §6: also the policy's own turns).
    c.pivot.selection = "filter"    # filter (σ̂²>0 ∧ μ̂<λ) | variance (σ̂²>0 only) | all | random.
    c.pivot.m = 4                   # filter / variance: probe samples per candidate from π_ref (docs/algorithms.md (A.17)).
    c.pivot.lambda_diff = 0.75      # filter: keep iff σ̂² > 0 and μ̂ < λ_diff.
    c.pivot.random_fraction = 0.3   # random: fraction of candidates kept.
    c.pivot.reward = "functional"   # turn verifier: functional (docs/algorithms.md §6) | exact (match the demonstration).
    c.pivot.hint = ""               # corrective hint appended to local prefixes only ("" = off, docs/algorithms.md §6).
    c.pivot.hint_fraction = 0.5     # hint: fraction of each step's states hinted (the rest un-hinted).
    c.pivot.reprofile_every = 0     # re-probe the candidates every N steps with π_θ (0 = never); a checkpoint keeps the kept states (rollout ones with their histories and snapshots), so a resume continues on them.

    # ---------------------------------------------------------------- agent (tool kits, rlvr.tasks.tool_agent)
    c.agent = ml_collections.ConfigDict()
    c.agent.tool_format = "auto"    # tool-call format the policy writes: auto (read from the chat
                                    # template) | hermes (<tool_call>{json}</tool_call>, Qwen) |
                                    # llama3 (Llama 3.x JSON calls).
    c.agent.trajectories = ""       # trajectories file (.jsonl / .parquet, OpenAI messages with
                                    # tool_calls): its records are the tasks and demonstrations
                                    # (SFT, PivotRL candidates); "" = the kit's generated tasks.

    # ---------------------------------------------------------------- sampling (rlvr.rollout)
    c.sampling = ml_collections.ConfigDict()
    c.sampling.prompts_per_step = 8  # tasks (or pivot states) per training step (batch = × group_size).
    c.sampling.max_new_tokens = 16  # tokens per completion (or per action, multi-turn).
    c.sampling.temperature = 1.0    # sampling temperature (also used when scoring log-probs).
    c.sampling.top_p = 1.0          # nucleus sampling; 1 = off.
    c.sampling.top_k = 0            # top-k sampling; 0 = off.

    # ---------------------------------------------------------------- optimizer (optax)
    c.optimizer = ml_collections.ConfigDict()
    c.optimizer.name = "adamw"      # adamw | adam | sgd.
    c.optimizer.learning_rate = 1e-4  # peak learning rate.
    c.optimizer.warmup_steps = 0    # linear warm-up (optimiser steps).
    c.optimizer.schedule = "constant"  # constant | cosine (decay to 0 over train.num_steps).
    c.optimizer.weight_decay = 0.0  # adamw: decoupled weight decay.
    c.optimizer.b1 = 0.9            # adam / adamw: β1.
    c.optimizer.b2 = 0.999          # adam / adamw: β2.
    c.optimizer.eps = 1e-8          # adam / adamw: ε.
    c.optimizer.max_grad_norm = 1.0  # global-norm gradient clipping; 0 = off.

    # ---------------------------------------------------------------- train (rlvr.train)
    c.train = ml_collections.ConfigDict()
    c.train.num_steps = 100         # RL steps (collect → verify → update → publish).
    c.train.token_budget = 0        # stop once this many tokens were sampled (probes included); 0 = off.
    c.train.epochs = 1              # optimisation epochs over each rollout batch.
    c.train.num_minibatches = 1     # optimiser steps per epoch (batch split into minibatches).
    c.train.num_microbatches = 1    # gradient-accumulation chunks per minibatch (exact token-mean);
                                    # above 1, the no-grad π_old / π_ref / value passes also run in
                                    # chunks of a micro-batch's rows (memory of one micro-batch).
    c.train.length_bucket = 0       # > 0: length-aware learner micro-batches: rows sorted by length,
                                    # each micro-batch cut to its longest row rounded up to a
                                    # multiple of this many columns (⌈T / it⌉ compiled widths;
                                    # same loss and gradients); 0 = every row at the batch's width.
    c.train.logprob_impl = "chunked"  # how the LM head + log-softmax + entropy run (the RL
                                    # learner and the SFT warm start):
                                    # chunked (position chunks of [rows, chunk, V] float32 logits) |
                                    # vocab_tiled (an online log-sum-exp over vocabulary tiles, no
                                    # logits kept; same values) | pallas (the same as Pallas
                                    # kernels; GPU / TPU backends only).
    c.train.sft_steps = 0           # supervised warm-start steps on task demonstrations (0 = none).
    c.train.sft_batch_size = 32     # SFT: demonstrations per step.
    c.train.sft_learning_rate = 1e-3  # SFT: learning rate (AdamW).
    c.train.sft_pool = 0            # SFT: 0 = fresh train tasks every step; N = a fixed pool of N.
    c.train.progress = True         # tqdm progress bar on the console (shows the compiling and
                                    # evaluating phases; ends at the step where the run stops).

    # ---------------------------------------------------------------- kl (docs/algorithms.md (A.13)-(A.15))
    c.kl = ml_collections.ConfigDict()
    c.kl.mode = "none"              # none | reward (docs/algorithms.md (A.14) penalty) | loss (β·KL term in the loss).
    c.kl.estimator = "k3"           # k1 | k2 | k3 per-token estimators of KL(π_θ‖π_ref).
    c.kl.coef = 0.0                 # β (initial value when adaptive; must be > 0 then).
    c.kl.adaptive = False           # adapt β by docs/algorithms.md (A.15).
    c.kl.target = 0.01              # adaptive: D_target of docs/algorithms.md (A.15).
    c.kl.horizon = 10.0             # adaptive: η_β of docs/algorithms.md (A.15) = 1 / horizon per step (larger = slower).

    # ---------------------------------------------------------------- reward (rlvr.verifiers.compose)
    c.reward = ml_collections.ConfigDict()
    c.reward.correct_weight = 1.0   # reward of a pass (decision weight; binary reward when 1 and
                                    # format_weight is 0).
    c.reward.format_weight = 0.0    # weight of the verdict's "format" component (≪ correctness, docs/verifiers.md §2).
    c.reward.unknown_as = "fail"    # fail | mask: how an `unknown` decision enters training.
    c.reward.clip = 0.0             # clip composed reward to [-clip, clip]; 0 = off (docs/architecture.md §4).
    c.reward.cache = False          # reward cache keyed by task, output, versions, reward config (docs/verifiers.md §4).
    # Verification runs through rlvr.verifiers.pool.VerificationPool with this executor; each
    # enforces timeout_s: inline (one call at a time on a watchdog thread; a call past the limit
    # is abandoned and the next runs on a fresh thread — cheap, the default), thread (a thread
    # pool; calls past timeout_s are abandoned) or process (worker processes, killed and
    # replaced past timeout_s: use it for verifiers that may hang for good or burn CPU) or ray
    # (Ray actors on the cluster at ray_address, killed and replaced past timeout_s; needs
    # `pip install "rlvr[ray]"`).
    c.reward.executor = "inline"
    c.reward.num_workers = 2        # thread / process / ray executors: pool workers (≥ 1).
    c.reward.ray_address = "local"  # ray executor: local (start Ray here) | auto (`ray start` cluster) | host:port.
    c.reward.timeout_s = 5.0        # per-call limit, every executor: past it → env_error, retried, masked.
    c.reward.max_retries = 2        # env_error retries (by the pool) before the sample is masked (docs/verifiers.md (V.1)).

    # ---------------------------------------------------------------- eval (docs/algorithms.md (A.21), docs/architecture.md §7)
    c.eval = ml_collections.ConfigDict()
    c.eval.num_tasks = 64           # size of the fixed held-out set (0 = no evaluation).
    c.eval.every = 10               # held-out evaluation every N steps (0 = only at start and end).
    c.eval.dense_steps = 0          # early-dense schedule: during the first N steps also evaluate
                                    # every eval.dense_every steps (0 = off; for curves that rise
                                    # early, e.g. PivotRL's).
    c.eval.dense_every = 0          # evaluation spacing during the first eval.dense_steps steps
                                    # (0 = off; set both or neither).
    c.eval.samples_per_task = 4     # n samples (or episodes) per task (pass@k needs n ≥ k).
    c.eval.pass_k = (1, 4)          # k values reported as pass@k (docs/algorithms.md (A.21)).
    c.eval.temperature = 1.0        # eval sampling temperature (sampled success).
    c.eval.greedy = False           # greedy decoding: one sample per task (success = pass@1);
                                    # samples_per_task, pass_k and temperature are then unused.
    c.eval.seed = 12345             # seed of the held-out set (disjoint from training streams).

    # ---------------------------------------------------------------- checkpoint (orbax)
    c.checkpoint = ml_collections.ConfigDict()
    c.checkpoint.every = 50         # save every N steps (0 = only at the end, -1 = never).
    c.checkpoint.max_to_keep = 2    # checkpoints kept on disk.
    c.checkpoint.resume = True      # resume from the latest checkpoint in the workdir if any.
    # resume: fields (or whole sections, e.g. "optimizer") whose value may differ from the
    # config the checkpoint was trained with. A resume that changes a field altering the run
    # (seed, model, task, algorithm, optimiser, ...) is refused otherwise, naming each field;
    # run-neutral ones (train.num_steps, logging, eval.every, ... rlvr.train.workdir) never are.
    c.checkpoint.allow_changes = ()  # e.g. ("optimizer.learning_rate",)
    c.checkpoint.overwrite = False  # allow a launch that starts over (checkpoint.resume=False, or
                                    # checkpoints off) in a workdir holding an earlier run: that
                                    # run's checkpoints, metrics and results are deleted first.
    c.checkpoint.export = True      # at the end of training write <workdir>/export/: a Hugging Face
                                    # folder (config, safetensors, tokenizer, chat template) that
                                    # transformers loads (also: launch.py --mode=export).

    # ---------------------------------------------------------------- logging
    c.logging = ml_collections.ConfigDict()
    c.logging.every = 1             # write metrics every N steps.
    c.logging.tensorboard = True    # also write TensorBoard events (tensorboardX).
    c.logging.plot = True           # write curves.png to the workdir at the end.
    c.logging.samples_every = 0     # every N steps write sampled records to samples.jsonl (0 = off).
    c.logging.samples_per_step = 8  # samples: rows written (half the top-reward tail, docs/architecture.md §7; half random).

    # ---------------------------------------------------------------- mesh (rlvr.parallel)
    c.mesh = ml_collections.ConfigDict()
    c.mesh.data = -1                # data-parallel axis size; -1 = all remaining devices.
    c.mesh.fsdp = 1                 # parameter-sharding axis size.
    c.mesh.tensor = 1               # tensor-parallel axis size.
    c.mesh.expert = 1               # expert-parallel axis size (mixture-of-experts models).
    c.mesh.distributed = False      # call jax.distributed.initialize() (multi-host).
    c.mesh.coordinator = ""         # distributed: "host:port" of process 0 ("" = auto-detect).
    c.mesh.num_processes = 1        # distributed: number of processes.
    c.mesh.process_id = 0           # distributed: this process's id.

    c.lock()
    c.task.kwargs.unlock()  # free-form: forwarded to the task kit, which validates them.
    return c
