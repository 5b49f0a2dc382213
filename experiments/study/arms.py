"""The study's configs: one base per method (configs/shop_*.py), scale presets, and the arms.

Fairness rules every arm keeps (experiments/STUDY.md):
  * the same task kit, difficulty, latency and task pool (`task.pool_size`); the same held-out set
    (`eval.num_tasks` tasks, `eval.seed`); the same per-seed warm start (`model.init_from` = the
    seed's SFT folder, see `runner.warm_folder`); in a scale with `seed_eval` the held-out set and
    its sampling key differ from seed to seed (`eval_seed`) and are shared by the arms of one seed
    (the comparison stays paired), otherwise one set and key serve every seed;
  * the same KL term (β·KL(π_θ‖π_ref), k3, `kl.coef`), optimiser, epochs × minibatches and
    rows per step (32 episodes or 32 turn samples);
  * the same budget measure (`cost/sampled_tokens`: every token the policy generated, probes and
    value pre-training rollouts included) and one token budget per comparison;
  * an ablation arm changes exactly one thing of its method's main arm, and uses the method's
    learning rate (chosen by the sweep before the main runs).
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
from typing import Callable, Optional

METHODS = ("grpo", "pivotrl", "sao", "reinforce")

# Scale presets. "full": the calibrated plan (experiments/STUDY.md); "quick": seconds-long runs
# of every code path (tests).
SCALES = {
    "full": dict(
        model=dict(num_layers=2, d_model=128, num_heads=4, num_kv_heads=4, d_ff=512, max_seq_len=160),
        difficulty="standard", latency_s=0.01, pool_size=128, sft_steps=1000, sft_pool=1024,
        eval_tasks=512, max_turns=12, max_new_tokens=20, checkpoint_every=10, seed_eval=True,
        # rollout-token budgets (cost/sampled_tokens) per comparison and evaluation spacing
        budget={"pivot": 150_000, "grpo": 300_000, "sao": 300_000, "stage2": 100_000},
        lr_budget={"pivot": 60_000, "grpo": 100_000, "sao": 100_000},
        eval_points=10, sao_warmup={"none": 0, "small": 5, "large": 20},
        lr_grid={"grpo": (3e-5, 1e-4, 3e-4), "pivotrl": (3e-5, 1e-4, 3e-4),
                 "sao": (3e-5, 1e-4, 3e-4), "reinforce": (3e-5, 1e-4, 3e-4)},
        tokens_per_step={"grpo": 1900, "pivotrl": 250, "sao": 1900, "reinforce": 1900},
    ),
    # "session": the full testbed, model and warm start with budgets a few CPU-hours allow: one
    # warm start shared by every seed (seeds then differ in RL sampling and evaluation draws
    # only), 256 held-out episodes, shorter token budgets (not to convergence).
    "session": dict(
        model=dict(num_layers=2, d_model=128, num_heads=4, num_kv_heads=4, d_ff=512, max_seq_len=160),
        difficulty="standard", latency_s=0.01, pool_size=128, sft_steps=1000, sft_pool=1024,
        eval_tasks=256, max_turns=12, max_new_tokens=20, checkpoint_every=10, shared_warm=True,
        budget={"pivot": 60_000, "grpo": 60_000, "sao": 60_000, "stage2": 20_000},
        lr_budget={"pivot": 40_000, "grpo": 30_000, "sao": 30_000},
        eval_points=5, sao_warmup={"none": 0, "small": 5, "large": 20},
        lr_grid={"grpo": (3e-5, 1e-4, 3e-4), "pivotrl": (3e-5, 1e-4, 3e-4),
                 "sao": (3e-5, 1e-4, 3e-4), "reinforce": (3e-5, 1e-4, 3e-4)},
        tokens_per_step={"grpo": 1900, "pivotrl": 250, "sao": 1900, "reinforce": 1900},
    ),
    "quick": dict(
        model=dict(num_layers=1, d_model=32, num_heads=2, num_kv_heads=2, d_ff=64, max_seq_len=96),
        difficulty="small", latency_s=0.0005, pool_size=4, sft_steps=60, sft_pool=64,
        eval_tasks=8, max_turns=8, max_new_tokens=12, checkpoint_every=2,
        budget={"pivot": 1000, "grpo": 600, "sao": 600, "stage2": 300},
        lr_budget={"pivot": 800, "grpo": 300, "sao": 300},
        eval_points=2, sao_warmup={"none": 0, "small": 1, "large": 2},
        lr_grid={"grpo": (1e-4, 3e-4), "pivotrl": (1e-4,), "sao": (1e-4,), "reinforce": (1e-4,)},
        tokens_per_step={"grpo": 200, "pivotrl": 60, "sao": 200, "reinforce": 200},
    ),
}

# "long": the session's testbed, model, shared warm start and held-out set with the full plan's
# budgets (150k / 300k rollout tokens) and ten evaluations per run, at the learning rates the
# session-scale sweep chose; its result files go to results/long/ (the cache is shared), and
# study_all does not rerun the steps whose session-scale results apply.
SCALES["long"] = dict(
    copy.deepcopy(SCALES["session"]), budget=dict(SCALES["full"]["budget"]), eval_points=10,
    lr_scale="session", results_subdir="long",
    skip_steps=("study_testbed", "study_calibrate", "study_lr"))

# "long512": the long scale evaluated on 512 held-out episodes (the full plan's held-out size)
# instead of 256; nothing else changes (same warm start, budgets, spacing and learning rates), so
# its readings differ from the long scale's only by the evaluation's size and the runs' noise.
SCALES["long512"] = dict(copy.deepcopy(SCALES["long"]), eval_tasks=SCALES["full"]["eval_tasks"],
                         results_subdir="long512")

# "long512_lr": a sensitivity check of the learning rates on seed 0 at the long512 settings: the
# sweep runs at the main runs' budgets (150k / 300k rollout tokens) instead of the short sweep
# budgets, PivotRL over 3e-6 … 1e-4 (the session sweep chose 3e-5, its grid's smallest rate) and
# GRPO at its chosen 1e-4 as the reference; study_all runs study_lr only (results/long512_lr/),
# study_pivot.py at this scale runs PivotRL at the rate it picks. A check made after the main runs
# (`lr_check`): the rates the other scales use stay as chosen before them.
SCALES["long512_lr"] = dict(
    copy.deepcopy(SCALES["long512"]), lr_budget=dict(SCALES["long512"]["budget"]),
    lr_grid={"grpo": (1e-4,), "pivotrl": (3e-6, 1e-5, 3e-5, 1e-4), "sao": (1e-4,), "reinforce": (1e-4,)},
    lr_scale="long512_lr", results_subdir="long512_lr", lr_check=True,
    skip_steps=("study_testbed", "study_calibrate", "study_pivot", "study_failures", "study_sao"))

# "long512_lr_sao": the same check for SAO's pipeline: SAO and its running-mean-baseline twin
# swept at the main budget (300k rollout tokens) over rates a factor 2 either side of the chosen
# 1e-4 (3e-4 collapsed within the session sweep's 30k tokens), GRPO at 1e-4 as the reference;
# study_all runs study_lr only (results/long512_lr_sao/), study_sao.py at this scale runs the arms
# at the rates it picks.
SCALES["long512_lr_sao"] = dict(
    copy.deepcopy(SCALES["long512_lr"]),
    lr_grid={"grpo": (1e-4,), "pivotrl": (3e-5,), "sao": (5e-5, 1e-4, 2e-4),
             "reinforce": (5e-5, 1e-4, 2e-4)},
    lr_scale="long512_lr_sao", results_subdir="long512_lr_sao")

# "long512_lr_rm": the running-mean arm's rate below long512_lr_sao's grid, whose choice (5e-5)
# sat at its lower edge: the running-mean arm swept over 1.25e-5 … 1e-4 at the main budget,
# SAO at its chosen 1e-4 and GRPO at 1e-4 as the references; study_all runs study_lr only
# (results/long512_lr_rm/), study_sao.py at this scale runs the arms at the rates it picks.
SCALES["long512_lr_rm"] = dict(
    copy.deepcopy(SCALES["long512_lr_sao"]),
    lr_grid={"grpo": (1e-4,), "pivotrl": (3e-5,), "sao": (1e-4,),
             "reinforce": (1.25e-5, 2.5e-5, 5e-5, 1e-4)},
    lr_scale="long512_lr_rm", results_subdir="long512_lr_rm")

# "wallclock_quick": the quick scale's model and testbed with budgets long enough for the
# wall-clock arms (experiments/study/wallclock.py) to move off their warm start: a longer SFT warm
# start, 8000 rollout tokens per run, 32 held-out episodes evaluated 5 times. Minutes in all on
# a shared 2-core CPU; a pipeline-scale measurement, not the study's.
SCALES["wallclock_quick"] = dict(
    copy.deepcopy(SCALES["quick"]),
    model=dict(num_layers=2, d_model=64, num_heads=2, num_kv_heads=2, d_ff=128, max_seq_len=160),
    max_turns=12, max_new_tokens=20, sft_steps=600, sft_pool=512, eval_tasks=32, eval_points=5,
    budget=dict(SCALES["quick"]["budget"], grpo=8000, sao=8000),
    tokens_per_step=dict(SCALES["quick"]["tokens_per_step"], grpo=1100, sao=1100))

# One line per preset for `--scale`'s help.
SCALE_ABOUT = {
    "full": "the plan in STUDY.md",
    "session": "shorter budgets, one shared warm start; the same testbed and model",
    "long": "the session's settings with the full budgets; results in results/long/",
    "long512": "long on 512 held-out episodes; results in results/long512/",
    "long512_lr": "long512's learning-rate sensitivity on seed 0 at the main budgets; study_lr only",
    "long512_lr_sao": "the same check for SAO's and the running-mean arm's rates; study_lr only",
    "long512_lr_rm": "the running-mean arm's rate below long512_lr_sao's grid; study_lr only",
    "quick": "tiny settings, every code path in seconds (also --quick)",
    "wallclock_quick": "quick's model with budgets for the wall-clock arms (minutes)",
}


# The held-out set's seed and sampling key (`eval.seed`) of every run of a scale without
# `seed_eval` (the configs' default).
SHARED_EVAL_SEED = 12345


def eval_seed(seed: int) -> int:
    """The held-out set's seed and sampling key (`eval.seed`) of the runs of RL seed `seed` in a
    scale with `seed_eval`: a 31-bit hash of the seed (`rlvr.envs.base.derive_seed`), so two
    seeds evaluate on different held-out draws with different keys and one seed always on the
    same. It enters the run's config, hence its cache key (`runner.run_key`)."""
    from rlvr.envs.base import derive_seed

    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    return derive_seed("study/eval", seed) % (2**31 - 1)


def scale(name: str) -> dict:
    if name not in SCALES:
        raise ValueError(f"scale must be one of {sorted(SCALES)}, got {name!r}")
    return copy.deepcopy(SCALES[name])


def _method_config(method: str):
    module = {"grpo": "shop_grpo", "pivotrl": "shop_pivotrl", "sao": "shop_sao",
              "reinforce": "shop_sao"}[method]
    c = importlib.import_module(f"configs.{module}").get_config()
    if method == "reinforce":
        # SAO's pipeline (single rollout, asynchronous, trust region, whitening) with the critic
        # replaced by a running-mean baseline (docs/algorithms.md (A.4)).
        for k in ("gamma", "gae_lambda", "skip_observations", "critic_updates",
                  "critic_warmup_steps", "critic_learning_rate", "critic_freeze_attention"):
            c.algorithm[k] = importlib.import_module("configs.base").get_config().algorithm[k]
        c.algorithm.name = "reinforce"
        c.algorithm.policy_loss = "trust_region"
        c.algorithm.baseline_momentum = 0.9
        # no whitening: centring on the batch mean would cancel the running baseline exactly
        # ((R − b) − mean(R − b) = R − mean(R)), turning the arm into a batch-mean baseline
        c.algorithm.normalize_advantages = False
    return c


def base_config(method: str, seed: int, sc: dict):
    """The method's main-arm config at scale `sc` for `seed` (random-init shape; `with_warm`
    switches it to the warm-start folder)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    c = _method_config(method)
    c.seed = seed
    for k, v in sc["model"].items():
        c.model[k] = v
    c.task.kwargs.difficulty = sc["difficulty"]
    c.task.kwargs.latency_s = sc["latency_s"]
    c.task.pool_size = sc["pool_size"]
    c.train.sft_steps = sc["sft_steps"]
    c.train.sft_pool = sc["sft_pool"]
    c.eval.num_tasks = sc["eval_tasks"]
    c.eval.seed = eval_seed(seed) if sc.get("seed_eval") else SHARED_EVAL_SEED
    c.rollout.max_turns = sc["max_turns"]
    c.sampling.max_new_tokens = sc["max_new_tokens"]
    c.checkpoint.every = sc["checkpoint_every"]
    c.train.progress = False
    if method == "sao":
        c.algorithm.critic_warmup_steps = sc["sao_warmup"]["small"]
    return c


def with_warm(config, folder: str):
    """`config` starting from the warm-start folder: model.init_from set, the random-init shape
    fields back at their defaults (the folder's config.json gives the shape), no SFT."""
    from configs import base

    c = copy.deepcopy(config)
    d = base.get_config()
    for k in ("vocab_size", "num_layers", "d_model", "num_heads", "num_kv_heads", "d_ff"):
        c.model[k] = d.model[k]
    c.model.init_from = folder
    c.train.sft_steps = 0
    return c


def schedule(config, *, budget: int, tokens_per_step: float, eval_points: int,
             lr: Optional[float] = None):
    """Budget, step cap and evaluation spacing: stop at `budget` sampled tokens, evaluate about
    `eval_points` times over it (plus at the start and the end)."""
    c = copy.deepcopy(config)
    steps = max(1, int(round(budget / max(tokens_per_step, 1.0))))
    c.train.token_budget = int(budget)
    c.train.num_steps = int(steps * 3 + 10)  # cap: the token budget is what stops a run
    c.eval.every = max(1, steps // max(eval_points, 1))
    c.checkpoint.every = max(c.checkpoint.every, c.eval.every)
    if lr is not None:
        c.optimizer.learning_rate = float(lr)
    return c


# ----------------------------------------------------------------------------- arms
@dataclasses.dataclass(frozen=True)
class Arm:
    """One arm: its method (learning rate, tokens per step), what it changes, its budget key."""

    name: str
    method: str
    change: Callable
    budget: str
    label: str
    export: bool = False


def _set(**fields):
    def change(c, sc):
        for path, v in fields.items():
            section, key = path.split("__")
            if isinstance(v, str) and v.startswith("warmup:"):
                v = sc["sao_warmup"][v.split(":")[1]]
            c[section][key] = v
        return c
    return change


# The wall-clock arms run under the modelled clock (`rlvr.train.clock`, docs/algorithms.md §7):
# batches gathered in virtual time under the committed system model, so their wall-clock is the
# model's, not this machine's. Tool latency is the model's too: the environment's own sleep is off.
SYSTEM_MODEL = "experiments/study/system_model.json"  # relative to the repository root
# rollout fields of asynchronous collection that the modelled clock does not read (its time
# model's slots run the episodes, each unit arriving on its own)
_MODELLED_UNREAD = ("producer_batch", "queue_size", "arrival", "episode_slots")
_ASYNC_FIELDS = _MODELLED_UNREAD + ("max_staleness", "staleness_backpressure", "staleness_decay")


def _modelled(asynchronous: bool):
    """The change of a wall-clock arm: its method's config under the modelled clock, rollouts
    asynchronous (trained on arrival, the staleness bound of SAO's config) or synchronous (a
    barrier per step); the fields the mode does not read back at their defaults."""
    def change(c, sc):
        from configs import base

        ref = base.get_config().rollout
        c.rollout.clock = "modelled"
        c.rollout.time_model = SYSTEM_MODEL
        c.task.kwargs.latency_s = 0.0
        c.rollout.asynchronous = bool(asynchronous)
        if asynchronous:
            c.rollout.max_staleness = 2
            c.rollout.staleness_backpressure = True
            c.rollout.staleness_decay = 1.0
        for k in (_MODELLED_UNREAD if asynchronous else _ASYNC_FIELDS):
            c.rollout[k] = ref[k]
        return c
    return change


ARMS = {a.name: a for a in [
    # --- PivotRL family (rollout-token efficiency)
    Arm("grpo", "grpo", _set(), "grpo", "GRPO, full trajectories (group-synchronous)"),
    Arm("pivotrl", "pivotrl", _set(), "pivot", "PivotRL: σ̂²>0 ∧ μ̂<λ, functional reward",
        export=True),
    Arm("pivot_all", "pivotrl", _set(pivot__selection="all"), "pivot", "PivotRL, all turns (no filter)"),
    Arm("pivot_random", "pivotrl", _set(pivot__selection="random"), "pivot",
        "PivotRL, random 30% of turns"),
    Arm("pivot_variance", "pivotrl", _set(pivot__selection="variance"), "pivot",
        "PivotRL, σ̂²>0 only"),
    Arm("pivot_exact", "pivotrl", _set(pivot__reward="exact"), "pivot",
        "PivotRL, exact-match reward"),
    # --- SAO family (wall-clock with tool latency; critic ablations)
    Arm("sao", "sao", _set(), "sao", "SAO: skip-obs GAE, 2 critic updates, small value pre-training, frozen attention"),
    Arm("sao_naive_gae", "sao", _set(algorithm__skip_observations=False), "sao", "SAO, naive token GAE"),
    Arm("sao_k1", "sao", _set(algorithm__critic_updates=1), "sao", "SAO, 1 critic update"),
    Arm("sao_pretrain_none", "sao", _set(algorithm__critic_warmup_steps="warmup:none"), "sao",
        "SAO, no value pre-training"),
    Arm("sao_pretrain_large", "sao", _set(algorithm__critic_warmup_steps="warmup:large"), "sao",
        "SAO, large value pre-training"),
    Arm("sao_unfrozen", "sao", _set(algorithm__critic_freeze_attention=False), "sao",
        "SAO, critic attention trained"),
    Arm("reinforce", "reinforce", _set(), "sao", "Running-mean baseline instead of a critic"),
    # --- wall-clock arms under the modelled clock (mode: rlvr.train.clock.clock_mode)
    Arm("grpo_sync", "grpo", _modelled(False), "grpo",
        "GRPO-sync: groups, a barrier per step (modelled clock)"),
    Arm("grpo_async", "grpo", _modelled(True), "grpo",
        "GRPO-async: groups trained on arrival, staleness bound 2 (modelled clock)"),
    Arm("sao_modelled", "sao", _modelled(True), "sao",
        "SAO: single rollouts trained on arrival, staleness bound 2 (modelled clock)"),
    Arm("sao_sync", "sao", _modelled(False), "sao",
        "SAO-sync: single rollouts, a barrier per step (modelled clock)"),
]}

PIVOT_FAMILY = ("grpo", "pivotrl", "pivot_all", "pivot_random", "pivot_variance", "pivot_exact")
SAO_FAMILY = ("grpo", "sao", "sao_naive_gae", "sao_k1", "sao_pretrain_none", "sao_pretrain_large",
              "sao_unfrozen", "reinforce")

# the wall-clock arms by their modelled-clock mode (experiments/study/wallclock.py's arms)
WALLCLOCK_ARMS = {"grpo_sync": "grpo_sync", "grpo_async": "grpo_async", "sao": "sao_modelled",
                  "sao_sync": "sao_sync"}


def arm_config(name: str, seed: int, sc: dict, *, warm: str, lr: float, budget: Optional[int] = None):
    """The full config of arm `name` for `seed`: its method's base, its one change, the warm
    start, the method's learning rate, its family's budget and evaluation spacing."""
    arm = ARMS[name]
    c = base_config(arm.method, seed, sc)
    c = arm.change(c, sc)
    c = with_warm(c, warm)
    return schedule(c, budget=budget if budget is not None else sc["budget"][arm.budget],
                    tokens_per_step=sc["tokens_per_step"][arm.method],
                    eval_points=sc["eval_points"], lr=lr)


def stage2_config(seed: int, sc: dict, *, start: str, lr: float):
    """Second stage of "PivotRL then end-to-end RL": full-trajectory GRPO from the PivotRL run's
    final policy (`start`, a Hugging Face folder), with `budget["stage2"]` more tokens. Its KL
    reference is the stage's start (the loop's reference is the initial policy)."""
    c = base_config("grpo", seed, sc)
    c = with_warm(c, start)
    return schedule(c, budget=sc["budget"]["stage2"], tokens_per_step=sc["tokens_per_step"]["grpo"],
                    eval_points=max(2, sc["eval_points"] // 2), lr=lr)
