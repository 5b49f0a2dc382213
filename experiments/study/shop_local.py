"""The PivotRL block on the local checkout testbed, with today's checkout as the negative control.

    python experiments/study/shop_local.py --quick            # the whole pipeline in minutes
    python experiments/study/shop_local.py                    # the full block (tens of CPU-hours)
    python experiments/study/shop_local.py --difficulty standard   # the control

Testbed: `rlvr.tasks.shop` difficulty "local" (the decisive payment is computable from the
observation right before it); control: "standard" (the payment needs prices from earlier
observations, so its success depends on the layout). Before training, the premise is checked on
each warm start (`experiments.study.premise`: payment success by layout within 0.05).

Arms (`ARM_NAMES`), each built on `experiments.study.arms`:
  grpo              GRPO on full trajectories;
  pivotrl           PivotRL (σ̂² > 0 ∧ μ̂ < λ, functional reward);
  pivot_all_equal   PivotRL on all turns (no filter) for as many training steps (rows per step
                    equal: the same training samples) as PivotRL's budget gives, no token budget;
  pivot_exact       PivotRL with the exact-match reward;
  pivot_rollout     PivotRL with rollout candidates (`pivot.candidates="demo+rollout"`) and
                    re-profiling (`pivot.reprofile_every`).
Primary endpoint: GRPO ÷ PivotRL training turns (`cost/turns`) to 0.9 × the lower of the two
plateaus (`primary_endpoint`: geometric mean of the per-run ratios with its paired t-interval;
runs that never reach the level give bounds). 512 held-out tasks, 20 evaluations per run
(uniform spacing: the config has no early-dense schedule), 2 warm starts × 3 RL seeds
(`BlockSeeds`: each warm start is an SFT run with its own seed; each run's held-out set and
sampling key derive from its seed, `arms.eval_seed`, shared by the arms of that seed).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

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


def local_scale(name: str = "full", difficulty: str = "local") -> dict:
    """The study scale `name` (`arms.SCALES`) on the checkout `difficulty`, with the block's
    settings: 512 held-out tasks, 20 evaluations (full), 2 warm starts × 3 RL seeds."""
    from experiments.study import arms

    if difficulty not in ("local", "standard"):
        raise ValueError(f"difficulty must be 'local' or 'standard', got {difficulty!r}")
    sc = arms.scale(name)
    sc["seed_eval"] = True  # held-out set and key by seed (`BlockSeeds`)
    sc["difficulty"] = difficulty if name != "quick" else {"local": "local", "standard": "small"}[difficulty]
    if name == "quick":
        sc.update(warm_seeds=(0,), rl_seeds=(0,))
        if difficulty == "local":
            sc["max_turns"] = 12
            sc["model"]["max_seq_len"] = 192  # 5 items: prompt + 11 turns with "ok S" observations
    else:
        sc.update(eval_tasks=512, eval_points=20, warm_seeds=(0, 1), rl_seeds=(0, 1, 2))
    return sc


def arm_config(name: str, seed: int, sc: dict, *, warm: str, lr: float):
    """The config of block arm `name` for RL seed `seed` (see the module docstring)."""
    from experiments.study import arms

    if name not in ARM_NAMES:
        raise ValueError(f"arm must be one of {ARM_NAMES}, got {name!r}")
    if name in ("grpo", "pivotrl", "pivot_exact"):
        return arms.arm_config(name, seed, sc, warm=warm, lr=lr)
    if name == "pivot_all_equal":
        c = arms.arm_config("pivot_all", seed, sc, warm=warm, lr=lr)
        steps = max(1, int(round(sc["budget"]["pivot"] / sc["tokens_per_step"]["pivotrl"])))
        c.train.token_budget = 0
        c.train.num_steps = steps
        return c
    c = arms.arm_config("pivotrl", seed, sc, warm=warm, lr=lr)
    c.pivot.candidates = "demo+rollout"
    c.pivot.reprofile_every = max(1, c.eval.every)
    return c


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """GRPO ÷ PivotRL training turns to LEVEL × the lower plateau, over paired runs.

    Attributes:
      ratio, lo, hi: geometric mean of the per-run ratios and its 95 % paired t-interval.
      per_run: [(grpo_turns, pivot_turns, kind)] with kind "exact" / "at most" / "at least" /
        "unknown" (a run that never reaches the level gives its last cost, a bound).
    """

    ratio: float
    lo: float
    hi: float
    per_run: tuple


def primary_endpoint(grpo_records, pivot_records) -> Endpoint:
    """The primary endpoint from paired run records (same warm start and RL seed)."""
    from experiments.study import stats

    per = []
    for g, p in zip(grpo_records, pivot_records):
        cg, cp = stats.curve(g), stats.curve(p)
        level = LEVEL * min(stats.plateau(cg), stats.plateau(cp))
        (tg, rg), (tp, rp) = stats.cost_to(cg, level, x="turns"), stats.cost_to(cp, level, x="turns")
        per.append((tg, tp, stats.censored_ratio_kind(rg, rp)))
    ratio, lo, hi = stats.paired_ratio([a for a, _, _ in per], [b for _, b, _ in per])
    return Endpoint(ratio=ratio, lo=lo, hi=hi, per_run=tuple(per))


def main(argv=None) -> int:
    from experiments.study import arms, premise, runner

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--difficulty", default="local", choices=("local", "standard"))
    ap.add_argument("--cache", default=os.path.join("experiments", "results", "cache"))
    ap.add_argument("--workdir", default=os.path.join("experiments", "results", "work"))
    ap.add_argument("--out", default=os.path.join("experiments", "results", "shop_local"))
    a = ap.parse_args(argv)
    sc = local_scale("quick" if a.quick else "full", a.difficulty)
    lrs = {m: sc["lr_grid"][m][0] if a.quick else 1e-4 for m in ("grpo",)}
    lrs["pivotrl"] = sc["lr_grid"]["pivotrl"][0] if a.quick else 3e-5
    os.makedirs(a.out, exist_ok=True)
    out = {"difficulty": sc["difficulty"], "scale": "quick" if a.quick else "full",
           "premise": {}, "runs": {}}
    recs = {n: [] for n in ARM_NAMES}
    for w in sc["warm_seeds"]:
        warm = runner.warm_folder(arms.base_config("grpo", w, sc), w, a.cache)
        wd = os.path.join(a.workdir, f"premise_w{w}")
        # on the held-out set of the warm start's first run
        pc = arms.with_warm(arms.base_config("pivotrl", BlockSeeds(w, 0).seed, sc), warm)
        res = premise.warm_start_premise(runner.with_batch_bucket(pc, 32), wd)
        out["premise"][f"warm{w}"] = dataclasses.asdict(res)
        print(f"warm start {w}: {res.line()}", flush=True)
        for bs in (b for b in block_seeds(sc) if b.warm == w):
            for n in ARM_NAMES:
                method = "grpo" if n == "grpo" else "pivotrl"
                c = arm_config(n, bs.seed, sc, warm=warm, lr=lrs[method])
                rec = runner.run_config(c, workdir_root=a.workdir, cache=a.cache,
                                        label=f"local/{n}/{bs.label}")
                recs[n].append(rec)
                out["runs"][f"{n}/{bs.label}"] = {
                    "final_success": rec["rows"][-1].get("eval/success") if rec["rows"] else None,
                    "key": rec.get("key")}
    ep = primary_endpoint(recs["grpo"], recs["pivotrl"])
    out["primary_endpoint"] = dataclasses.asdict(ep)
    print(f"GRPO ÷ PivotRL training turns to {LEVEL} × lower plateau: {ep.ratio:.3g} "
          f"[{ep.lo:.3g}, {ep.hi:.3g}] per run {list(ep.per_run)}", flush=True)
    with open(os.path.join(a.out, f"shop_local_{out['scale']}_{a.difficulty}.json"), "w") as f:
        json.dump(out, f, indent=1, default=float)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
