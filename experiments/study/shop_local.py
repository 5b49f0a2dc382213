"""The PivotRL block on the local checkout testbed, with today's checkout as the negative control.

    python experiments/study/shop_local.py --quick            # the whole pipeline in minutes
    python experiments/study/shop_local.py                    # the full block (tens of CPU-hours)
    python experiments/study/shop_local.py --difficulty standard   # the control
    python experiments/study/shop_local.py --warm-seeds 0 --rl-seeds 0 --arms grpo,pivotrl
                                                              # one sitting of the full block
    python experiments/study/shop_local.py --pivotrl-lr 1e-5 --warm-seeds 1 --rl-seeds 0
                                                              # an exploratory block at another
                                                              # PivotRL learning rate

Testbed: `rlvr.tasks.shop` difficulty "local3" (three baskets per episode, ~27 turns; each
basket's decisive payment is computable from the observation right before it); control:
"standard" (one basket; the payment needs prices from earlier observations, so its success
depends on the layout). Before training, the premise is checked on
each warm start (`experiments.study.premise`: payment success by layout within 0.05), and the
warm-start check (`warm_start_check`, declared before any run) decides whether its runs start: at
least MIN_PAYMENTS payments with the cart complete in each layout, and on the testbed the premise
holding. Warm starts are SFT in rounds, checked after each (`warm_round_folder`); on the testbed
the first round continues a one-basket curriculum stage (`curriculum_folder`). A block runs in
sittings (`--warm-seeds`, `--rl-seeds`, `--arms`), on any machine of the same kind: each warm start
that passes its check and each PivotRL-family run's selection are stored with the records
(`experiments.study.block_files`), so a sitting on a fresh clone starts its runs from the stored
warm start instead of training it again. Learning rates are declared
(`DECLARED_LEARNING_RATES`: GRPO 1e-4, PivotRL 3e-5, the long512 block's choices); a block at
another PivotRL rate (`--pivotrl-lr`) is exploratory, with its own records folder and report
(`block_name`); its GRPO runs have the declared block's configs, so a cache that holds them
reads them back instead of running them again.

Arms (`ARM_NAMES`), each built on `experiments.study.arms`:
  grpo              GRPO on full trajectories;
  pivotrl           PivotRL (σ̂² > 0 ∧ μ̂ < λ, functional reward);
  pivot_all_equal   PivotRL on all turns (no filter) for as many training steps (rows per step
                    equal: the same training samples) as PivotRL;
  pivot_exact       PivotRL with the exact-match reward;
  pivot_rollout     PivotRL with rollout candidates (`pivot.candidates="demo+rollout"`) and
                    re-profiling (`pivot.reprofile_every`).
The PivotRL arms train for the steps PivotRL's token budget plans (budget ÷ tokens per step), so
the one-time probe, which the loop's token budget would count, takes no training from them; GRPO
stops at its token budget. Primary endpoint: GRPO ÷ PivotRL training turns (`cost/turns`) to
0.9 × the lower of the two plateaus (`primary_endpoint`: geometric mean of the per-run ratios with its paired t-interval;
runs that never reach the level give bounds; `endpoint_level`: when an arm did not learn, the
level is 0.9 × the other's plateau). 512 held-out tasks; 20 evaluations per run plus 10
early ones in its first tenth (`with_dense_evals`: `eval.dense_steps` / `eval.dense_every`, so
PivotRL's early rise is seen); 2 warm starts × 3 RL seeds
(`BlockSeeds`: each warm start is an SFT run with its own seed; each run's held-out set and
sampling key derive from its seed, `arms.eval_seed`, shared by the arms of that seed).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

ARM_NAMES = ("grpo", "pivotrl", "pivot_all_equal", "pivot_exact", "pivot_rollout")
LEVEL = 0.9  # primary endpoint: turns to LEVEL × the lower plateau


@dataclasses.dataclass(frozen=True)
class BlockSeeds:
    """The seeds of one run of the block: warm-start index `warm` and RL seed index `rl`.

    `warm` is the SFT warm start's seed (`runner.warm_folder`, part of its cache key); `seed`
    = 100 · warm + rl is the run's `config.seed` (task pool, sampling, initial keys), and the held-out
    set and its key are `arms.eval_seed(seed)` (`eval.seed`, part of the run's cache key). The
    arms of one BlockSeeds share all three (paired comparisons).
    """

    warm: int
    rl: int

    def __post_init__(self):
        for name in ("warm", "rl"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < 100:
                raise ValueError(f"BlockSeeds.{name} must be an int in [0, 100), got {v!r}")

    @property
    def seed(self) -> int:
        return 100 * self.warm + self.rl

    @property
    def eval_seed(self) -> int:
        from experiments.study import arms

        return arms.eval_seed(self.seed)

    @property
    def label(self) -> str:
        return f"w{self.warm}s{self.rl}"


def block_seeds(sc: dict) -> list:
    """Every run's `BlockSeeds` of scale `sc` (warm starts × RL seeds), warm start by warm start."""
    return [BlockSeeds(w, s) for w in sc["warm_seeds"] for s in sc["rl_seeds"]]


# The testbed: three local baskets per episode (`rlvr.tasks.shop` difficulty "local3"). Measured
# on the demonstrations of 1,000 train and 512 eval tasks (character tokenizer): 324 tokens on
# average, at most 402; 27 turns on average (21-33); 177 action tokens per episode (one basket:
# 108 tokens, at most 134; 59 action tokens); a decisive action is 7 tokens.
LOCAL_DIFFICULTY = "local3"
LOCAL_SEQ_LEN = 480     # the longest demonstration (402 tokens) + ~20 % for longer policy actions
LOCAL_MAX_TURNS = 34    # the longest episode: 3 · (2 · 5 + 1) + 1 spare turn
LOCAL_GRPO_TOKENS_PER_STEP = 5700  # 32 episodes × 177 action tokens (one basket: 1900)


def local_scale(name: str = "full", difficulty: str = "local") -> dict:
    """The study scale `name` (`arms.SCALES`) on the checkout `difficulty`, with the block's
    settings: 512 held-out tasks, 20 evaluations (full), 2 warm starts × 3 RL seeds.

    difficulty "local": the 3-basket local testbed (`LOCAL_DIFFICULTY`, sequence length
    `LOCAL_SEQ_LEN`, up to `LOCAL_MAX_TURNS` turns; GRPO's token budget three times the
    one-basket study's, as its episodes are); "standard": today's one-basket checkout, the
    negative control (quick: "small")."""
    from experiments.study import arms

    if difficulty not in ("local", "standard"):
        raise ValueError(f"difficulty must be 'local' or 'standard', got {difficulty!r}")
    sc = arms.scale(name)
    sc["seed_eval"] = True  # held-out set and key by seed (`BlockSeeds`)
    sc["difficulty"] = (LOCAL_DIFFICULTY if difficulty == "local" else
                        "standard" if name != "quick" else "small")
    if difficulty == "local":
        sc["max_turns"] = LOCAL_MAX_TURNS
        sc["model"]["max_seq_len"] = LOCAL_SEQ_LEN
        sc["budget"]["grpo"] = 3 * sc["budget"]["grpo"]
        sc["tokens_per_step"]["grpo"] = (LOCAL_GRPO_TOKENS_PER_STEP if name != "quick"
                                         else 3 * sc["tokens_per_step"]["grpo"])
    if name == "quick":
        sc.update(warm_seeds=(0,), rl_seeds=(0,))
    else:
        sc.update(eval_tasks=512, eval_points=20, warm_seeds=(0, 1), rl_seeds=(0, 1, 2))
    return sc


# Early-dense evaluations: during the first DENSE_FRACTION of a run's planned steps, DENSE_POINTS
# evaluations (`eval.dense_steps` / `eval.dense_every`), then the scale's `eval_points` spacing.
DENSE_FRACTION = 0.1
DENSE_POINTS = 10


def with_dense_evals(config, steps: int):
    """`config` (a run planned for `steps` steps) also evaluated every dense_every steps during
    its first dense_steps = max(1, DENSE_FRACTION · steps) steps, DENSE_POINTS times."""
    c = copy.deepcopy(config)
    c.eval.dense_steps = max(1, int(steps * DENSE_FRACTION))
    c.eval.dense_every = max(1, c.eval.dense_steps // DENSE_POINTS)
    return c


def planned_steps(name: str, sc: dict) -> int:
    """The steps block arm `name` plans at scale `sc` (its budget ÷ its method's tokens per step)."""
    from experiments.study import arms

    arm = arms.ARMS["pivot_all" if name == "pivot_all_equal" else
                    "pivotrl" if name == "pivot_rollout" else name]
    return max(1, int(round(sc["budget"][arm.budget] / sc["tokens_per_step"][arm.method])))


def arm_config(name: str, seed: int, sc: dict, *, warm: str, lr: float):
    """The config of block arm `name` for RL seed `seed` (see the module docstring), with the
    early-dense evaluations (`with_dense_evals`)."""
    from experiments.study import arms

    if name not in ARM_NAMES:
        raise ValueError(f"arm must be one of {ARM_NAMES}, got {name!r}")
    steps = planned_steps(name, sc)
    if name == "grpo":
        return with_block_rollout(with_dense_evals(arms.arm_config(name, seed, sc, warm=warm, lr=lr),
                                                   steps))
    # PivotRL arms train for the planned steps (32 turn samples each), not to a token budget: the
    # loop's budget counts the one-time probe (~90k tokens on 3 baskets at the full scale), which
    # would leave each arm a different amount of training
    c = arms.arm_config({"pivot_all_equal": "pivot_all", "pivot_rollout": "pivotrl"}.get(name, name),
                        seed, sc, warm=warm, lr=lr)
    c.train.token_budget = 0
    c.train.num_steps = steps
    if name == "pivot_rollout":
        c.pivot.candidates = "demo+rollout"
        c.pivot.reprofile_every = max(1, c.eval.every)
    return with_block_rollout(with_dense_evals(c, steps))


def with_block_rollout(config):
    """`config` with each episode's KV cache kept across turns (`rollout.kv_reuse`): the same
    sampler on the same keys as re-prefilling the history every turn (equal up to floating-point
    rounding) and faster (`benchmarks/multiturn.py`).
    Every arm of the block, and its control, collects and evaluates this way."""
    c = copy.deepcopy(config)
    c.rollout.kv_reuse = True
    return c


# A level the pair's shared start already meets measures no learning. Declared before any run of
# the block: an arm "learned" when its plateau exceeds the start (the step-0 success, the same warm
# start and held-out set for both arms) by at least MIN_GAIN. ℓ = LEVEL × the lower plateau when
# both learned; when one did not, ℓ = LEVEL × the other's plateau, which the arm that did not learn
# is then expected not to reach (its cost is censored: a bound, e.g. GRPO ÷ PivotRL "at least"
# when full-trajectory GRPO never sees a successful episode); when neither did, ℓ is undefined and
# the run pair gives no ratio.
MIN_GAIN = 0.05


def endpoint_level(grpo_curve: dict, pivot_curve: dict) -> tuple[float, str]:
    """(ℓ, which arms learned: "both" / "grpo" / "pivotrl" / "neither") of one run pair's curves
    (`stats.curve`), by the rule above; ℓ is nan when neither learned."""
    from experiments.study import stats

    start = max(float(grpo_curve["success"][0]), float(pivot_curve["success"][0]))
    plat = {"grpo": stats.plateau(grpo_curve), "pivotrl": stats.plateau(pivot_curve)}
    learned = [a for a in ("grpo", "pivotrl") if plat[a] >= start + MIN_GAIN]
    if not learned:
        return float("nan"), "neither"
    if len(learned) == 2:
        return LEVEL * min(plat.values()), "both"
    return LEVEL * plat[learned[0]], learned[0]


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """GRPO ÷ PivotRL training turns to ℓ (`endpoint_level`: LEVEL × the lower plateau when both
    arms learned), over paired runs.

    Attributes:
      ratio, lo, hi: geometric mean of the per-run ratios and its 95 % paired t-interval.
      per_run: [(grpo_turns, pivot_turns, kind)] with kind "exact" / "at most" / "at least" /
        "unknown" (a run that never reaches the level gives its last cost, a bound; a pair where
        neither arm learned is "unknown" with nan turns).
      levels: [(ℓ, which arms learned)] per run pair, in per_run's order.
      pairs: how many run pairs give a ratio (the others are "unknown").
      kind: the ratio's kind over those pairs (`stats.combined_kind`): "exact", or "at most" /
        "at least" when it rests on censored runs.
    """

    ratio: float
    lo: float
    hi: float
    per_run: tuple
    levels: tuple = ()
    pairs: int = 0
    kind: str = "exact"


def endpoint_text(ratio: float, lo: float, hi: float, pairs: int, kind: str) -> str:
    """An `Endpoint`'s reading as text: "at most" / "at least" before a bound, the interval only
    over two or more pairs (one pair's ratio has none), "n/a" with no pair."""
    from experiments.study import stats

    if not pairs or not math.isfinite(ratio):
        return "n/a"
    point = (stats.fmt_ci(ratio, lo, hi, unit="×") if pairs > 1
             else f"{ratio:.3f}× (one pair: no interval)")
    return f"{kind} {point}" if kind in (stats.AT_MOST, stats.AT_LEAST) else point


def primary_endpoint(grpo_records, pivot_records) -> Endpoint:
    """The primary endpoint from paired run records (same warm start and RL seed). Training
    turns leave out PivotRL's pivot profiling (`stats.curve(..., one_time="exclude")`: a
    one-time selection, reported on its own by `block_report`)."""
    from experiments.study import stats

    per, levels = [], []
    for g, p in zip(grpo_records, pivot_records):
        cg, cp = stats.curve(g, one_time="exclude"), stats.curve(p, one_time="exclude")
        level, learned = endpoint_level(cg, cp)
        levels.append((level, learned))
        if learned == "neither":
            per.append((float("nan"), float("nan"), stats.UNKNOWN))
            continue
        (tg, rg), (tp, rp) = stats.cost_to(cg, level, x="turns"), stats.cost_to(cp, level, x="turns")
        per.append((tg, tp, stats.censored_ratio_kind(rg, rp)))
    ratio, lo, hi = stats.paired_ratio([a for a, _, _ in per], [b for _, b, _ in per])
    kinds = [k for a, b, k in per if k != stats.UNKNOWN and a > 0 and b > 0]
    return Endpoint(ratio=ratio, lo=lo, hi=hi, per_run=tuple(per), levels=tuple(levels),
                    pairs=len(kinds), kind=stats.combined_kind(kinds))


# The warm-start check, declared before any run of the block: the premise check is read on the
# warm start's payments made with the cart complete; fewer than MIN_PAYMENTS in a layout and the
# warm start never gets far enough in an episode for the block's runs to compare anything.
MIN_PAYMENTS = 30


def premise_result(stored: dict):
    """The `premise.PremiseResult` of a premise entry of block.json (which also keeps the warm
    start's key and SFT NLL)."""
    from experiments.study.premise import PremiseResult

    return PremiseResult(**{f.name: stored[f.name] for f in dataclasses.fields(PremiseResult)})


def warm_entry(rounds: list) -> dict:
    """block.json's premise entry of a warm start from its SFT rounds' checks (oldest first): the
    last round's premise check, warm start key and SFT NLL, the rounds' summed wall and CPU
    seconds, and the rounds themselves."""
    last = rounds[-1]
    return {**{k: last[k] for k in last if k not in ("round", "wall_s", "cpu_s")},
            "wall_s": float(sum(r["wall_s"] for r in rounds)),
            "cpu_s": float(sum(r["cpu_s"] for r in rounds)), "rounds": list(rounds)}


def warm_identity_error(stored: dict, folder: str) -> str:
    """'' when the warm start in `folder` is the one a block's premise round entry `stored`
    checked (its weights' sha256 where the entry records it, else its SFT NLL, which training
    repeats bit for bit only on the same kind of machine and thread count), else why not. A
    warm start trained again elsewhere has the same cache key (code and settings) but other
    weights: runs from it would not pair with the block's."""
    from experiments.study import runner

    if stored.get("weights_sha256"):
        got = runner.weights_sha256(folder)
        if got != stored["weights_sha256"]:
            return f"its weights' sha256 is {got[:16]}…, the block's {stored['weights_sha256'][:16]}…"
        return ""
    got = float(runner.warm_info(folder).get("sft_nll", float("nan")))
    want = float(stored.get("sft_nll", float("nan")))
    if got != want:
        return f"its SFT NLL is {got!r}, the block's {want!r}"
    return ""


def warm_start_check(difficulty: str, check) -> str:
    """'' when the block's runs from a warm start with premise check `check`
    (`premise.PremiseResult`) can be read, else why not:

      * every difficulty: each layout has ≥ MIN_PAYMENTS payments with the cart complete (the
        premise is testable: the warm policy completes carts);
      * "local" (the testbed): the premise holds (|difference| ≤ tolerance), the regime claim 1
        is made for. The control ("standard") runs where it fails: that is what it controls.
    """
    if difficulty not in ("local", "standard"):
        raise ValueError(f"difficulty must be 'local' or 'standard', got {difficulty!r}")
    n = check.payments
    few = {k: v for k, v in sorted(n.items()) if v < MIN_PAYMENTS}
    if few:
        return ("the warm start's payments with the cart complete are too few to test the premise ("
                + ", ".join(f"{k} {v}" for k, v in few.items()) + f"; at least {MIN_PAYMENTS} each)")
    if difficulty == "local" and not check.agree:
        return (f"the premise fails on the testbed (difference {check.difference:+.3f}, "
                f"tolerance {check.tolerance:g})")
    return ""


def failing_warm_starts(difficulty: str, premise: dict) -> list:
    """The warm starts ("warm<w>" keys of block.json's premise entries) that fail
    `warm_start_check`, in order."""
    return [w for w, p in sorted(premise.items()) if warm_start_check(difficulty, premise_result(p))]


# The warm-start recipe, declared before any run of the block: SFT in rounds of the scale's
# `sft_steps`, each round continuing the last one's parameters (AdamW restarted, its own
# demonstration draws), checked after each round (`warm_start_check`), at most SFT_ROUNDS rounds;
# the first round that passes is the block's warm start. Quick scale: one round.
SFT_ROUNDS = 6

# On a several-basket testbed the rounds start from a curriculum stage (recipe "curriculum"), not a
# random init (recipe "scratch", the control's): SFT on ONE basket of the same variant
# (`CURRICULUM_DIFFICULTY`: the testbed's knobs with baskets=1; rows of CURRICULUM_SEQ_LEN tokens,
# its longest demonstration being 134) for the scale's `sft_steps`. From a random init the study's
# 2-layer character model trained on 480-token three-basket episodes learns no copying: after
# 3000 steps its NLL on the order's item letters is near a uniform guess over the shop's items
# (block.json keeps those rounds, recipe "scratch"); on one-basket episodes it learns to copy
# them within 1000 steps.
RECIPES = ("scratch", "curriculum")
CURRICULUM_DIFFICULTY = "local"
CURRICULUM_SEQ_LEN = 160


def warm_recipe(sc: dict) -> str:
    """The block's warm-start recipe at scale `sc`: "curriculum" when the scale's difficulty has
    several baskets per episode, else "scratch"."""
    from rlvr.tasks.shop import as_difficulty

    return "curriculum" if as_difficulty(sc["difficulty"])[1].baskets > 1 else "scratch"


def curriculum_config(config):
    """`config` with the curriculum stage's task (`CURRICULUM_DIFFICULTY`)."""
    c = copy.deepcopy(config)
    c.task.kwargs.difficulty = CURRICULUM_DIFFICULTY
    return c


def curriculum_spec(config, seed: int) -> dict:
    """What warm start `seed`'s curriculum stage depends on (its cache key's spec)."""
    from experiments.study import runner

    return {**runner.warm_spec(curriculum_config(config), seed), "stage": "curriculum",
            "length": CURRICULUM_SEQ_LEN}


def curriculum_folder(config, seed: int, cache: str, *, log=print, build: bool = True) -> str:
    """The Hugging Face folder of warm start `seed`'s curriculum stage: `config`'s model trained from
    its random init for `config.train.sft_steps` SFT steps on one-basket episodes
    (`CURRICULUM_DIFFICULTY`, rows of CURRICULUM_SEQ_LEN tokens; demonstration draws from `seed`),
    cached under `<cache>/warm/<key>`. `build=False`: its path, whether or not the cache has it."""
    from experiments.study import runner

    c = curriculum_config(config)
    spec = curriculum_spec(config, seed)
    folder = os.path.join(cache, "warm", runner.content_key(spec))
    if not build or os.path.exists(os.path.join(folder, "warm.json")):
        return folder
    return runner.sft_to_folder(c, seed, folder, spec, log=log, length=CURRICULUM_SEQ_LEN,
                                label=f"warm start seed {seed}, curriculum stage")


def warm_round_folder(config, seed: int, cache: str, rnd: int, *, recipe: str = "scratch",
                      log=print) -> str:
    """The Hugging Face folder of round `rnd` (1-based) of warm start `seed`'s SFT under `recipe`.

    "scratch": round 1 is `runner.warm_folder(config, seed, cache)` (from the random init);
    "curriculum": round 1 continues `curriculum_folder(config, seed, cache)`. Every other round r
    trains round r − 1's parameters (round 1's, under "curriculum": the curriculum stage's) for
    `config.train.sft_steps` more steps (demonstrations drawn with seed r · 100000 + seed), cached
    under `<cache>/warm/<key>` with the key of (round 1's spec, r[, recipe]). Its warm.json's
    `wall_s` / `cpu_s` are this round's alone."""
    from experiments.study import arms, runner

    if recipe not in RECIPES:
        raise ValueError(f"recipe must be one of {RECIPES}, got {recipe!r}")
    if rnd < 1:
        raise ValueError(f"rnd must be ≥ 1, got {rnd}")
    if rnd == 1 and recipe == "scratch":
        return runner.warm_folder(config, seed, cache, log=log)
    spec = {**runner.warm_spec(config, seed), "round": rnd}
    if recipe != "scratch":
        spec["recipe"] = recipe
    folder = os.path.join(cache, "warm", runner.content_key(spec))
    if os.path.exists(os.path.join(folder, "warm.json")):
        return folder
    before = (curriculum_folder(config, seed, cache, log=log) if rnd == 1 else
              warm_round_folder(config, seed, cache, rnd - 1, recipe=recipe, log=log))
    c = arms.with_warm(config, before)
    c.train.sft_steps = config.train.sft_steps  # with_warm turns SFT off; this round is SFT
    return runner.sft_to_folder(c, rnd * 100_000 + seed, folder, spec, log=log,
                                label=f"warm start seed {seed}, SFT round {rnd} ({recipe})")


def round_compute(config, seed: int, cache: str, rnd: int, recipe: str) -> dict:
    """{"sft_nll", "wall_s", "cpu_s"} of round `rnd` of warm start `seed` (`warm_round_folder`,
    which must exist): its SFT NLL, and its wall / CPU seconds, the curriculum stage's included
    in round 1's under "curriculum" (NaN when the cache lacks the stage: a warm start restored
    from the block's records, `block_files`, comes without it and is not trained again)."""
    from experiments.study import runner

    info = runner.warm_info(warm_round_folder(config, seed, cache, rnd, recipe=recipe))
    out = {k: float(info.get(k, float("nan"))) for k in ("sft_nll", "wall_s", "cpu_s")}
    if recipe == "curriculum" and rnd == 1:
        stage = curriculum_folder(config, seed, cache, build=False)
        cur = runner.warm_info(stage) if os.path.exists(os.path.join(stage, "warm.json")) else {}
        out["wall_s"] += float(cur.get("wall_s", float("nan")))
        out["cpu_s"] += float(cur.get("cpu_s", float("nan")))
    return out


# ----------------------------------------------------------------------------- records, report
@dataclasses.dataclass(frozen=True)
class BlockRun:
    """One run of the block: its arm, its seeds and its record (as stored, `records.read_record`)."""

    arm: str
    seeds: BlockSeeds
    record: dict


@dataclasses.dataclass(frozen=True)
class Block:
    """What the block's report is a function of, read from its records folder.

    Attributes:
      settings: {"scale", "difficulty", "learning_rates", "level"}.
      premise: "warm<w>" → the premise check of warm start w (`premise.PremiseResult` as a dict).
      runs: every `BlockRun`, ordered by warm start, RL seed and arm (`ARM_NAMES` order).
    """

    settings: dict
    premise: dict
    runs: tuple

    @property
    def name(self) -> str:
        """`block_name` of its settings: shop_local_<scale>_<difficulty>[_<method>_lr<rate>...]."""
        st = self.settings
        return block_name(st["scale"], st["difficulty"], st.get("learning_rates"))

    def records(self, arm: str) -> list:
        return [r.record for r in self.runs if r.arm == arm]

    def paired(self, arm_a: str, arm_b: str) -> tuple[list, list]:
        """The records of `arm_a` and `arm_b` run from the same seeds (warm start and RL seed),
        in matching order; a run whose twin is missing is left out."""
        a = {r.seeds: r.record for r in self.runs if r.arm == arm_a}
        b = {r.seeds: r.record for r in self.runs if r.arm == arm_b}
        both = [s for s in a if s in b]
        return [a[s] for s in both], [b[s] for s in both]


# the full-scale block's declared learning rates: the long512 block's choices
DECLARED_LEARNING_RATES = {"grpo": 1e-4, "pivotrl": 3e-5}


def declared_learning_rates(scale: str, difficulty: str = "local") -> dict:
    """{method: learning rate} the block at `scale` declares (quick: the first of each grid)."""
    if scale != "quick":
        return dict(DECLARED_LEARNING_RATES)
    grid = local_scale(scale, difficulty)["lr_grid"]
    return {m: grid[m][0] for m in DECLARED_LEARNING_RATES}


def lr_departures(settings: dict) -> dict:
    """{method: (learning rate, declared)} where a block's settings depart from the declared
    learning rates ({} for the declared block; another is an exploratory block)."""
    declared = declared_learning_rates(settings["scale"], settings["difficulty"])
    return {m: (lr, declared[m]) for m, lr in sorted(settings.get("learning_rates", {}).items())
            if m in declared and lr != declared[m]}


def block_name(scale: str, difficulty: str, learning_rates: dict | None = None) -> str:
    """shop_local_<scale>_<difficulty> for the declared block; a block at other learning rates
    (exploratory) adds `_<method>_lr<rate>` for each rate that departs."""
    settings = {"scale": scale, "difficulty": difficulty,
                "learning_rates": learning_rates or declared_learning_rates(scale, difficulty)}
    return f"shop_local_{scale}_{difficulty}" + "".join(
        f"_{m}_lr{lr:g}" for m, (lr, _) in lr_departures(settings).items())


def records_folder(scale: str, difficulty: str, learning_rates: dict | None = None) -> str:
    """experiments/study/records/<block_name>: the block's committed records."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "records",
                        block_name(scale, difficulty, learning_rates))


def reader_arguments(description: str) -> argparse.ArgumentParser:
    """The command line of a script that reads a local block's records and its runs' work folders
    (`copying.py`, `pivot_kinds.py`, `local_failures.py`): --quick, --records, --workdir, --out
    and the study cache's --cache."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--cache", default=os.path.join("experiments", "results", ".study_cache"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--records", default="", help="the block's records folder (default: the scale's)")
    ap.add_argument("--workdir", default=os.path.join("experiments", "results", ".study_cache", "work"),
                    help="the runs' work folders (shop_local.py's --workdir)")
    ap.add_argument("--out", default=os.path.join("experiments", "results", "shop_local"))
    return ap


def exit_when_none_found(found: list, what: str) -> None:
    """Exits, writing nothing, when `found` (one flag per item the script reads) has items and
    none was found: e.g. on a fresh clone, where the committed report must stay as it is. `what`
    completes "none of the block's <n> ..."."""
    if found and not any(found):
        raise SystemExit(f"none of the block's {len(found)} {what}: nothing written")


@dataclasses.dataclass(frozen=True)
class OpenBlock:
    """What a reader script (`copying.py`, `pivot_kinds.py`, `local_failures.py`) reads.

    Attributes:
      args: its parsed `reader_arguments`.
      scale: "quick" with --quick, else "full".
      records: the block's records folder (--records, else the scale's).
      block: the `Block` loaded from it.
    """

    args: argparse.Namespace
    scale: str
    records: str
    block: "Block"


def open_block(description: str, argv=None) -> OpenBlock:
    """Parses a reader script's command line, loads the block its records folder holds (exits
    naming a missing folder) and restores the warm starts stored with it into --cache
    (`block_files.restore_warm_starts`), so a fresh clone reads the committed block."""
    from experiments.study import block_files

    args = reader_arguments(description).parse_args(argv)
    scale = "quick" if args.quick else "full"
    records = args.records or records_folder(scale, "local")
    try:
        block = load_block(records)
    except FileNotFoundError as e:
        raise SystemExit(str(e))
    block_files.restore_warm_starts(records, args.cache)
    return OpenBlock(args, scale, records, block)


def block_run_config(block: "Block", run: "BlockRun", cache: str):
    """The config `run` of `block` ran with, rebuilt from its arm and seeds (`arm_config` at the
    block's scale, difficulty and learning rates) on its warm start's folder in `cache`."""
    st = block.settings
    sc = local_scale(st["scale"], st["difficulty"])
    lrs = st.get("learning_rates") or declared_learning_rates(st["scale"], st["difficulty"])
    warm = os.path.join(cache, "warm", os.path.basename(run.record["config"].get("model.init_from", "")))
    return arm_config(run.arm, run.seeds.seed, sc, warm=warm,
                      lr=lrs["grpo" if run.arm == "grpo" else "pivotrl"])


def block_selection(block: "Block", run: "BlockRun", records: str, cache: str,
                    workdir: str) -> dict | None:
    """The pivot selection of PivotRL-family `run` (`block_files.selection`: its work folder's
    pivots.json, the copy stored in `records`, or recomputed on its warm start in `cache` and
    checked against its record); None when none is found or it cannot be recomputed (the reason
    printed to stderr: a selection is named missing, never guessed)."""
    from experiments.study import block_files

    try:
        return block_files.selection(records, run.arm, run.seeds.label, run.record, workdir,
                                     rebuild=lambda: block_run_config(block, run, cache), cache=cache)
    except ValueError as e:
        print(f"{run.arm} {run.seeds.label}: no selection: {e}", file=sys.stderr)
        return None


def diagnostic_name(prefix: str, scale: str, block: "Block") -> str:
    """<prefix>_<scale>_<difficulty>[_<method>_lr<rate>...]: the report name of a diagnostic read
    from `block` at `scale` (the control, difficulty "standard", and a block at other learning
    rates each get their own)."""
    name = block_name(scale, block_difficulty(block), block.settings.get("learning_rates"))
    return prefix + "_" + name.removeprefix("shop_local_")


def block_difficulty(block: "Block") -> str:
    """The checkout variant `block` ran on ("local" where its settings predate the field)."""
    return block.settings.get("difficulty", "local")


def reader_command(script: str, scale: str, block: "Block") -> str:
    """The command line that regenerates diagnostic `script` (a file of experiments/study/) of
    `block`: --quick at the quick scale, --records where the block is not the scale's declared
    one (besides the study cache and work folders the script reads)."""
    name = block_name(scale, block_difficulty(block), block.settings.get("learning_rates"))
    return (f"python experiments/study/{script}" + (" --quick" if scale == "quick" else "")
            + (f" --records experiments/study/records/{name}" if name != block_name(scale, "local") else ""))


def record_path(folder: str, arm: str, seeds: BlockSeeds) -> str:
    from experiments.study.records import SUFFIX

    return os.path.join(folder, f"{arm}.{seeds.label}{SUFFIX}")


def write_block_meta(folder: str, settings: dict, premise: dict) -> None:
    """The block's settings and premise checks (`block.json`, next to the run records), written
    whole or not at all."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "block.json")
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump({"settings": settings, "premise": premise}, f, indent=1, sort_keys=True, default=float)
        f.write("\n")
    os.replace(tmp, path)


def update_block_premise(folder: str, settings: dict, warm: str, entry: dict) -> dict:
    """Sets block.json's premise entry `warm` to `entry`, keeping every other entry as the file
    has it now (a sitting on another warm start may have written since this one started; the
    read and write hold a lock on `<folder>/block.lock`). Returns the premise entries written."""
    import fcntl

    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "block.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        prem = block_premise(folder, settings)
        prem[warm] = entry
        write_block_meta(folder, settings, prem)
    return prem


def read_block_meta(folder: str) -> dict:
    """block.json of the block in `folder` (its settings and premise entries)."""
    meta_path = os.path.join(folder, "block.json")
    if not os.path.exists(meta_path):
        raise FileNotFoundError(f"{meta_path}: no block here (run shop_local.py first)")
    with open(meta_path) as f:
        return json.load(f)


def warm_compute(premise: dict) -> dict:
    """{warm_starts, wall_h, cpu_h} of the warm starts a block's premise entries record (each
    entry sums its SFT rounds; a warm start never trained has no finite seconds and counts not)."""
    warm = [p for p in premise.values() if math.isfinite(p.get("wall_s", float("nan")))]
    return {"warm_starts": len(warm), "wall_h": sum(p["wall_s"] for p in warm) / 3600,
            "cpu_h": sum(p.get("cpu_s", 0.0) for p in warm) / 3600}


def load_block(folder: str) -> Block:
    """The block stored in `folder` (block.json and one `<arm>.w<W>s<S>.jsonl.gz` per run)."""
    import re

    from experiments.study.records import SUFFIX, read_record

    meta = read_block_meta(folder)
    runs = []
    for name in os.listdir(folder):
        m = re.fullmatch(r"([a-z_]+)\.w(\d+)s(\d+)" + re.escape(SUFFIX), name)
        if m and m.group(1) in ARM_NAMES:
            runs.append(BlockRun(m.group(1), BlockSeeds(int(m.group(2)), int(m.group(3))),
                                 read_record(os.path.join(folder, name))))
    runs.sort(key=lambda r: (r.seeds.warm, r.seeds.rl, ARM_NAMES.index(r.arm)))
    return Block(settings=meta["settings"], premise=meta["premise"], runs=tuple(runs))


def block_version_error(folder: str, version: str) -> str | None:
    """Why a sitting under rlvr code `version` may not add runs to the block in `folder` (None
    when it may): the block's records were computed with another code version. A block's runs
    share one (its run keys, warm starts and caches include it), so a changed `rlvr/` starts a
    block of its own rather than mixing into one."""
    try:
        block = load_block(folder)
    except FileNotFoundError:
        return None
    versions = sorted({r.record.get("code_version", "?") for r in block.runs} - {version})
    if not versions:
        return None
    return (f"{folder}: its runs were computed with rlvr code version {', '.join(versions)} and "
            f"this checkout's is {version}; a block's runs share one code version. Continue it "
            f"from a checkout whose rlvr/ has that version (`python -c 'from rlvr.version import "
            f"code_version; print(code_version())'` prints a checkout's), or write a new block "
            f"to another --records folder")


def fmt_num(v: float | None, digits: int = 3, missing: str = "n/a") -> str:
    """`v` to `digits` decimals, or `missing` where it is None or not finite (a run that never
    reached its level has no turns to it)."""
    return missing if v is None or not math.isfinite(v) else f"{v:.{digits}f}"


RUN_COLUMNS = ["arm", "run", "eval.seed", "success at step 0", "final success", "plateau (last 3)",
               "steps", "training turns", "training tokens", "evaluations", "one-time turns",
               "pivots kept / probed at step 0", "training reward, first → last tenth of steps",
               "wall-hours"]


def run_numbers(record: dict) -> dict:
    """One run's readings on training cost (the one-time cost left out): success at step 0, at
    the end and its plateau; steps, training turns and tokens, evaluations; the one-time turns;
    the mean training reward (`reward/mean`: the fraction of successful episodes for GRPO, the
    pivot turns' reward for PivotRL) over the first and the last tenth of its steps; wall-hours;
    for a PivotRL arm the pivots its step-0 selection kept of the turns it probed (NaN for GRPO):
    its training samples are drawn from those pivots alone."""
    from experiments.study import stats

    c = stats.curve(record, one_time="exclude")
    rows = sorted(record["rows"], key=lambda r: r["step"])
    rewards = [float(r["reward/mean"]) for r in rows if "reward/mean" in r]
    tenth = max(1, len(rewards) // 10)
    first = rows[0] if rows else {}
    return {"start_success": float(c["success"][0]) if len(c["success"]) and c["step"][0] == 0
            else float("nan"),
            "final_success": _last(c["success"]),
            "plateau": stats.plateau(c) if len(c["success"]) else float("nan"),
            "steps": int(rows[-1]["step"]) if rows else 0,
            "training_turns": _last(c["turns"]), "training_tokens": _last(c["tokens"]),
            "evaluations": int(len(c["step"])), "one_time_turns": stats.one_time_cost(record).turns,
            "reward_first": _mean(rewards[:tenth]), "reward_last": _mean(rewards[-tenth:]),
            "wall_h": float(record.get("wall_s", float("nan"))) / 3600,
            "pivots_kept": float(first.get("pivot/kept", float("nan"))),
            "pivots_probed": float(first.get("pivot/candidates", float("nan"))),
            "eval_seed": record.get("config", {}).get("eval.seed")}


def _last(xs) -> float:
    return float(xs[-1]) if len(xs) else float("nan")


def _mean(xs) -> float:
    return float(np.mean(xs)) if len(xs) else float("nan")


def pivots_text(run: dict) -> str:
    """"kept / probed" of a `run_numbers` row, "—" for a run that selected no pivots."""
    if not math.isfinite(run["pivots_kept"]):
        return "—"
    return f"{fmt_num(run['pivots_kept'], 0)} / {fmt_num(run['pivots_probed'], 0, '?')}"


def block_report(block: Block) -> tuple[str, dict]:
    """(markdown, numbers) of the block, a function of `block` alone: the premise checks, one
    line per PivotRL arm with its one-time cost (pivot profiling: tokens, turns, wall-clock),
    every run's reading on training cost (the one-time cost left out), the primary endpoint and
    the exploratory final-success differences against PivotRL."""
    from experiments.study import stats
    from experiments.study.report import count, table

    st = block.settings
    departs = lr_departures(st)
    lines = [f"# Local checkout block: difficulty `{st['difficulty']}`, scale `{st['scale']}`"
             + (f" (exploratory: {departures_text(departs)})" if departs else ""),
             f"Learning rates: {', '.join(f'{k} {v:g}' for k, v in sorted(st['learning_rates'].items()))}. "
             f"Runs: {len(block.runs)}" + (f" ({', '.join(sorted({r.seeds.label for r in block.runs}))})"
                                           if block.runs else "") + ".",
             "## Premise on each warm start (payment success by layout, within "
             f"{stats_tol(block)})"]
    prem_rows = []
    for w, p in sorted(block.premise.items()):
        r, n = p["pay_right"], p["payments"]
        why = warm_start_check(st["difficulty"], premise_result(p))
        prem_rows.append([w, fmt_num(p.get("sft_nll", float("nan"))),
                          f"{fmt_num(r['reads_first'])} (n={n['reads_first']})",
                          f"{fmt_num(r['interleaved'])} (n={n['interleaved']})",
                          fmt_num(p["difference"]),
                          "agree" if p["agree"] else "DISAGREE" if math.isfinite(p["difference"])
                          else "untested (a layout was never paid with the cart complete)",
                          "passes" if not why else f"fails: {why}"])
    lines.append(table(["warm start", "SFT NLL", "reads first", "interleaved", "difference", "premise",
                        "warm-start check (at the study scale its runs start only if it passes)"], prem_rows))
    round_rows = [[w, r["recipe"], r["round"],
                   f"{r['sft_steps']}" + (f" (+ {r['curriculum_steps']} one-basket)" if r["curriculum_steps"] else ""),
                   fmt_num(r["sft_nll"]),
                   f"{r['payments']['reads_first']}, {r['payments']['interleaved']}", fmt_num(r["difference"]),
                   warm_start_check(st["difficulty"], premise_result(r)) or "passes",
                   f"{r['wall_s'] / 60:.0f}"]
                  for w, p in sorted(block.premise.items()) for r in p.get("rounds", [])]
    if round_rows:
        lines += [f"SFT rounds (each continues the last for the scale's SFT steps; the first that "
                  f"passes the check is the warm start; at most {SFT_ROUNDS} per recipe). Recipe "
                  f"\"scratch\": round 1 from the random init; \"curriculum\": round 1 continues SFT on "
                  f"one-basket episodes (its steps and wall-minutes included in round 1's):",
                  table(["warm start", "recipe", "round", "SFT steps", "SFT NLL", "payments with the cart complete "
                         "(reads first, interleaved)", "difference", "check", "wall-minutes"], round_rows)]
    # the one-time cost, on its own lines
    lines.append("## One-time cost: pivot profiling (outside the compared budgets)")
    once_lines, once_num = [], {}
    for arm in ARM_NAMES:
        recs = block.records(arm)
        costs = [stats.one_time_cost(r) for r in recs]
        if not costs or not any(c.tokens or c.turns for c in costs):
            continue
        timed = [c.wall_s for c in costs if math.isfinite(c.wall_s)]
        mean = stats.OneTimeCost(*(float(np.mean([getattr(c, f) for c in costs]))
                                   for f in ("tokens", "prompt_tokens", "turns")),
                                 wall_s=float(np.mean(timed)) if timed else float("nan"))
        once_num[arm] = {**dataclasses.asdict(mean), "runs": len(costs), "wall_s_runs": len(timed)}
        over = count(len(costs), "run")
        if 0 < len(timed) < len(costs):  # a run whose probing invocation died before saving its time
            over += f"; wall-clock over the {len(timed)} that recorded it"
        once_lines.append(f"- one-time cost, `{arm}` (mean over {over}): {mean.line()}")
    lines.append("\n".join(once_lines) if once_lines else "No run spent anything before its first step.")
    if once_lines:
        lines.append("Wall-clock is the probe's duration in its run's process; the first PivotRL run of "
                     "a process includes compiling the sampler's shapes.")
    # every run on training cost
    run_rows, run_num = [], {}
    for br in block.runs:
        run_num[f"{br.arm}/{br.seeds.label}"] = r = run_numbers(br.record)
        run_rows.append([br.arm, br.seeds.label, r["eval_seed"], fmt_num(r["start_success"]),
                         fmt_num(r["final_success"]), fmt_num(r["plateau"]), r["steps"],
                         fmt_num(r["training_turns"], 0), fmt_num(r["training_tokens"], 0),
                         r["evaluations"], fmt_num(r["one_time_turns"], 0), pivots_text(r),
                         f"{fmt_num(r['reward_first'])} → {fmt_num(r['reward_last'])}",
                         fmt_num(r["wall_h"], 2)])
    lines += ["## Runs (training cost: the one-time cost left out)",
              table(RUN_COLUMNS, run_rows)]
    # the primary endpoint
    ep = primary_endpoint(*block.paired("grpo", "pivotrl"))
    per = ", ".join(f"{fmt_num(g, 0, '—')}/{fmt_num(p, 0, '—')} ({kind}; ℓ {fmt_num(lv)}, learned: {who})"
                    for (g, p, kind), (lv, who) in zip(ep.per_run, ep.levels))
    lines += ["## Primary endpoint" if not departs else
              "## Endpoint (exploratory: the primary endpoint is read on the declared block)",
              f"GRPO ÷ PivotRL training turns to ℓ = {st['level']} × the lower plateau (an arm learned "
              f"when its plateau is ≥ {MIN_GAIN:g} above the start; if one did not, ℓ = {st['level']} × "
              f"the other's plateau and the ratio is a bound): "
              f"{endpoint_text(ep.ratio, ep.lo, ep.hi, ep.pairs, ep.kind)} (geometric mean, 95 % "
              f"paired t-interval over the {count(ep.pairs, 'paired run')} with a ratio, of "
              f"{len(ep.per_run)}; GRPO/PivotRL turns per run: "
              f"{per or 'none'})."]
    # exploratory
    pv = {r.seeds: run_num[f"pivotrl/{r.seeds.label}"]["final_success"] for r in block.runs if r.arm == "pivotrl"}
    exp_rows, exp_num = [], {}
    for arm in ARM_NAMES:
        if arm == "pivotrl":
            continue
        mine = {r.seeds: run_num[f"{arm}/{r.seeds.label}"]["final_success"] for r in block.runs if r.arm == arm}
        both = [s for s in mine if s in pv]
        d = stats.diffs([mine[s] for s in both], [pv[s] for s in both])
        point, lo, hi = stats.t_interval(d)
        exp_num[arm] = {"per_run": d, "point": point, "lo": lo, "hi": hi}
        exp_rows.append([f"{arm} − pivotrl", ", ".join(f"{x:+.3f}" for x in d) or "none",
                         f"{point:+.3f} (one pair: no interval)" if len(d) == 1
                         else stats.fmt_ci(point, lo, hi)])
    lines += ["## Exploratory: final success against PivotRL (paired by run)",
              table(["difference", "per run", "mean [95% t-CI]"], exp_rows)]
    wall = sum(r.record.get("wall_s", 0.0) for r in block.runs)
    cpu = sum(r.record.get("cpu_s", 0.0) for r in block.runs)
    versions = sorted({r.record.get("code_version", "?") for r in block.runs})
    lines += ["## Compute",
              f"{count(len(block.runs), 'run')}: {wall / 3600:.2f} wall-hours, {cpu / 3600:.2f} "
              f"CPU-hours in runs (premise checks not included); runs' code version: "
              f"{', '.join(f'`{v}`' for v in versions) or 'none'}."]
    warm = warm_compute(block.premise)
    if warm["warm_starts"]:
        lines[-1] += (f" SFT warm starts: {warm['warm_starts']}, {warm['wall_h']:.2f} wall-hours, "
                      f"{warm['cpu_h']:.2f} CPU-hours.")
    numbers = {"settings": st, "premise": block.premise, "one_time_cost": once_num, "runs": run_num,
               "primary_endpoint": dataclasses.asdict(ep), "exploratory": exp_num,
               "compute": {"runs": len(block.runs), "wall_h": wall / 3600, "cpu_h": cpu / 3600},
               "run_code_versions": versions}
    return "\n\n".join(lines) + "\n", numbers


def departures_text(departs: dict) -> str:
    """"pivotrl learning rate 1e-05 (declared 3e-05)" for `lr_departures`' result."""
    return ", ".join(f"{m} learning rate {lr:g} (declared {d:g})" for m, (lr, d) in departs.items())


def stats_tol(block: Block) -> str:
    tols = sorted({p["tolerance"] for p in block.premise.values()})
    return ", ".join(f"{t:g}" for t in tols) or "n/a"


def write_report(block: Block, out: str) -> tuple[str, str]:
    """Writes the block's report as <block.name>.md / .json under `out`."""
    md, numbers = block_report(block)
    return write_md_json(out, block.name, md, numbers)


def write_md_json(out: str, name: str, md: str, numbers) -> tuple[str, str]:
    """Writes a report's text and its numbers as `<out>/<name>.md` / `.json` (sorted keys)."""
    os.makedirs(out, exist_ok=True)
    stem = os.path.join(out, name)
    with open(stem + ".md", "w") as f:
        f.write(md)
    with open(stem + ".json", "w") as f:
        json.dump(numbers, f, indent=1, sort_keys=True, default=float)
        f.write("\n")
    return stem + ".md", stem + ".json"


@dataclasses.dataclass(frozen=True)
class Sitting:
    """What one invocation runs: a subset of the block's warm starts, RL seeds and arms (a long
    block runs in several sittings; runs already cached are read back, not rerun)."""

    warm_seeds: tuple
    rl_seeds: tuple
    arms: tuple

    @staticmethod
    def parse(sc: dict, warm_seeds: str, rl_seeds: str, arm_names: str) -> "Sitting":
        """The sitting named by comma-separated flag values ("" = all the scale's); a value the
        block does not declare is refused, naming the flag and the allowed values."""

        def pick(flag, text, allowed, conv):
            if not text.strip():
                return tuple(allowed)
            try:
                vals = [conv(x.strip()) for x in text.split(",") if x.strip()]
            except ValueError:
                raise ValueError(f"--{flag} must be comma-separated values of {tuple(allowed)}, "
                                 f"got {text!r}") from None
            bad = [v for v in vals if v not in allowed]
            if bad or not vals:
                raise ValueError(f"--{flag} must name values of {tuple(allowed)}, got {text!r}")
            return tuple(v for v in allowed if v in vals)  # the block's order, no repeats

        return Sitting(warm_seeds=pick("warm-seeds", warm_seeds, sc["warm_seeds"], int),
                       rl_seeds=pick("rl-seeds", rl_seeds, sc["rl_seeds"], int),
                       arms=pick("arms", arm_names, ARM_NAMES, str))


def block_premise(folder: str, settings: dict) -> dict:
    """The premise checks already in `folder`'s block.json ({} when there is none). A block
    written under other settings (scale, difficulty, learning rates or level) is refused: its
    runs could not be read as one block with this sitting's."""
    path = os.path.join(folder, "block.json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        meta = json.load(f)
    if meta["settings"] != json.loads(json.dumps(settings)):
        raise SystemExit(f"{path}: written with settings {meta['settings']}, this run has "
                         f"{settings}; use another --records folder")
    return dict(meta["premise"])


def main(argv=None) -> int:
    from experiments.study import arms, block_files, premise, runner
    from experiments.study.records import write_record

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--difficulty", default="local", choices=("local", "standard"))
    # the study's cache (git-ignored; shared with the other study scripts)
    ap.add_argument("--cache", default=os.path.join("experiments", "results", ".study_cache"))
    ap.add_argument("--workdir", default=os.path.join("experiments", "results", ".study_cache", "work"))
    ap.add_argument("--out", default=os.path.join("experiments", "results", "shop_local"))
    ap.add_argument("--records", default="", help="folder of the block's compressed run records "
                    "(default experiments/study/records/shop_local_<scale>_<difficulty>)")
    ap.add_argument("--from-records", action="store_true",
                    help="run nothing: regenerate the report from the records folder")
    ap.add_argument("--warm-seeds", default="",
                    help="comma-separated warm starts to run this sitting (default: all the scale's)")
    ap.add_argument("--rl-seeds", default="",
                    help="comma-separated RL seeds to run this sitting (default: all the scale's)")
    ap.add_argument("--arms", default="", help=f"comma-separated arms of {ARM_NAMES} (default: all)")
    ap.add_argument("--pivotrl-lr", type=float, default=None,
                    help="the PivotRL family's learning rate (default: the block's declared one); "
                    "another makes an exploratory block with its own records folder and report")
    a = ap.parse_args(argv)
    scale = "quick" if a.quick else "full"
    lrs = declared_learning_rates(scale, a.difficulty)
    if a.pivotrl_lr is not None:
        if not (math.isfinite(a.pivotrl_lr) and 0 < a.pivotrl_lr < 1):
            raise SystemExit(f"--pivotrl-lr must be a learning rate in (0, 1), got {a.pivotrl_lr}")
        lrs["pivotrl"] = a.pivotrl_lr
    folder = a.records or records_folder(scale, a.difficulty, lrs)
    if a.from_records:
        try:
            block = load_block(folder)
        except FileNotFoundError as e:
            raise SystemExit(str(e))
        md, _ = write_report(block, a.out)
        print(open(md).read(), flush=True)
        return 0
    sc = local_scale(scale, a.difficulty)
    try:
        sitting = Sitting.parse(sc, a.warm_seeds, a.rl_seeds, a.arms)
    except ValueError as e:
        raise SystemExit(str(e))
    from rlvr.version import code_version

    why = block_version_error(folder, code_version())
    if why:
        raise SystemExit(why)
    settings = {"scale": scale, "difficulty": a.difficulty, "learning_rates": lrs, "level": LEVEL}
    prem = block_premise(folder, settings)
    restored = block_files.restore_warm_starts(folder, a.cache)
    if restored:
        print(f"warm starts {restored} restored from the stored warm starts beside {folder}",
              flush=True)
    refused = []
    recipe = warm_recipe(sc)
    for w in sitting.warm_seeds:
        rounds = list(prem.get(f"warm{w}", {}).get("rounds", []))
        for rnd in range(1, (1 if a.quick else SFT_ROUNDS) + 1):
            wc = arms.base_config("grpo", w, sc)
            warm = warm_round_folder(wc, w, a.cache, rnd, recipe=recipe)
            key = os.path.basename(os.path.normpath(warm))
            done = {r["warm_start"]: r for r in rounds}
            if key in done:  # checked in an earlier sitting: this round's own check
                differs = warm_identity_error(done[key], warm)
                if differs:
                    raise SystemExit(
                        f"warm start {w} ({warm}) is not the one the block's runs started from: "
                        f"{differs}. It was trained again (another machine or thread count); "
                        f"restore the block's own (stored under {block_files.warm_store(folder)}) "
                        f"or write a new block to another --records folder")
                res = premise_result(done[key])
            else:
                wd = os.path.join(a.workdir, f"premise_w{w}")
                # on the held-out set of the warm start's first run
                pc = arms.with_warm(arms.base_config("pivotrl", BlockSeeds(w, 0).seed, sc), warm)
                res = premise.warm_start_premise(runner.with_batch_bucket(pc, 32), wd)
                # another recipe's rounds stay (the compute they took, and why it changed)
                rounds = [r for r in rounds if r["recipe"] != recipe or r["round"] < rnd] + [{
                    **dataclasses.asdict(res), "warm_start": key, "round": rnd, "recipe": recipe,
                    "sft_steps": rnd * sc["sft_steps"],
                    "curriculum_steps": sc["sft_steps"] if recipe == "curriculum" else 0,
                    "weights_sha256": runner.weights_sha256(warm),
                    **round_compute(wc, w, a.cache, rnd, recipe)}]
                prem = update_block_premise(folder, settings, f"warm{w}", warm_entry(rounds))
            why = warm_start_check(a.difficulty, res)
            print(f"warm start {w}, SFT round {rnd}: {res.line()}" + (f"; check fails: {why}" if why else
                  "; check passes"), flush=True)
            if not why:
                block_files.store_warm(folder, warm)  # a sitting elsewhere starts from it
                break
        if why and scale != "quick":
            print(f"warm start {w}: its runs are not started: {why}", flush=True)
            refused.append(w)
            continue
        if why:
            print(f"warm start {w}: {why} (quick scale, a pipeline check: its runs go on)", flush=True)
        for bs in (b for b in block_seeds(sc) if b.warm == w and b.rl in sitting.rl_seeds):
            for n in sitting.arms:
                method = "grpo" if n == "grpo" else "pivotrl"
                c = arm_config(n, bs.seed, sc, warm=warm, lr=lrs[method])
                rec = runner.run_config(c, workdir_root=a.workdir, cache=a.cache,
                                        label=f"local/{n}/{bs.label}")
                write_record(record_path(folder, n, bs), rec)
                if n != "grpo":
                    block_files.store_selection(folder, n, bs.label, os.path.join(a.workdir, rec["key"]))
    md, _ = write_report(load_block(folder), a.out)  # the tables come from the records only
    print(open(md).read(), flush=True)
    if refused:
        print(f"warm starts {refused} failed the warm-start check (above): their runs were not "
              f"started", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
