"""What the study scripts share: running an arm for a seed, and per-arm curves."""

from __future__ import annotations

import os

from experiments.study import arms, runner, stats


def method_default_lr(method: str) -> float:
    return arms.base_config(method, 0, arms.scale("full")).optimizer.learning_rate


def warm(ctx, seed: int) -> str:
    """The seed's warm-start folder (seed 0's for every seed when the scale shares one); its
    compute is noted in `ctx.warm_starts` (result files record it as `warm_compute`)."""
    seed = 0 if ctx.sc.get("shared_warm") else seed
    folder = runner.warm_folder(arms.base_config("grpo", seed, ctx.sc), seed, ctx.cache, log=ctx.log)
    info = runner.warm_info(folder)
    ctx.warm_starts[os.path.basename(folder)] = {"wall_s": info.get("wall_s", 0.0),
                                                 "cpu_s": info.get("cpu_s", 0.0)}
    return folder


def run_arm(ctx, name: str, seed: int, lrs: dict, *, budget=None, label: str = "") -> dict:
    """The record of arm `name` for `seed` (cached, resumable), labelled `label` (default
    "<name>/seed<seed>") in the provenance."""
    arm = arms.ARMS[name]
    c = arms.arm_config(name, seed, ctx.sc, warm=warm(ctx, seed), lr=lrs[arm.method], budget=budget)
    rec = runner.run_config(c, workdir_root=ctx.workdir, cache=ctx.cache, export=arm.export,
                            label=label or f"{name}/seed{seed}", log=ctx.log)
    ctx.records.append(rec)
    return rec


def run_stage2(ctx, seed: int, lrs: dict, first: dict) -> dict:
    """The stage-2 record: full-trajectory GRPO started from the final policy of `first` (the
    seed's PivotRL record, exported)."""
    c = arms.stage2_config(seed, ctx.sc, start=first["model"], lr=lrs["grpo"])
    rec = runner.run_config(c, workdir_root=ctx.workdir, cache=ctx.cache,
                            label=f"pivotrl_then_grpo/seed{seed}", log=ctx.log)
    ctx.records.append(rec)
    return rec


def arm_curve(rec: dict) -> dict:
    lag = int(rec["config"].get("rollout.max_staleness", 0)) if rec["config"].get("rollout.asynchronous") else 0
    return stats.curve(rec, async_lag=lag)


def sample_evaluation(r, params) -> tuple[list, list]:
    """(episodes, task rows) of policy `params` on a built run `r`'s held-out evaluation: the
    evaluator's tasks, each repeated for its samples, with its sampling keys and settings, so the
    episodes are the ones the run's evaluations score."""
    from rlvr.rollout.sampler import per_sample_keys

    ev = r.evaluator
    rows = [t for t in ev.tasks for _ in range(ev.n)]
    episodes, _, _ = ev.engine.sample_episodes(params, rows, per_sample_keys(ev.key, len(rows)),
                                               ev.sampling)
    return episodes, rows


def cached_on_policy(config, folder: str, *, cache: str, workdir: str, name: str, version: str,
                     compute, extra: tuple = (), legacy: bool = False) -> tuple[dict, bool]:
    """`compute(run)` on a run built from `config` started from the policy in `folder` (batch
    bucket 32, no export), cached as `<cache>/<name>/<key>.json`, the key over `version`, the
    code version, the portable config (paths inside the cache relative to it, so a moved cache
    still hits), the weights' hash and `extra`. `legacy`: a result filed under the absolute-path
    key (written before keys were portable) is found too. The run is closed and its work folder
    `<workdir>/<name>_<key>` removed afterwards. Returns (result, whether it came from the cache).
    """
    import json
    import shutil

    from rlvr.train.config import validate_config
    from rlvr.train.setup import build_run
    from rlvr.version import code_version

    c = runner.with_batch_bucket(arms.with_warm(config, folder), 32)
    c.checkpoint.export = False
    validate_config(c)
    weights = runner.weights_sha256(folder)
    key_of = lambda cfg: runner.content_key([version, code_version(), cfg, weights, *extra])  # noqa: E731
    key = key_of(runner.portable_config(c, cache))
    old = key_of(runner.config_dict(c)) if legacy else key
    found = runner.find_record(os.path.join(cache, name), key, old)
    if found:
        with open(found) as f:
            return json.load(f), True
    wd = os.path.join(workdir, f"{name}_{key}")
    r = build_run(c, wd)
    try:
        out = compute(r)
    finally:
        r.close()
        shutil.rmtree(wd, ignore_errors=True)
    runner.write_json(os.path.join(cache, name, f"{key}.json"), out)
    return out, False


def sample_demo_turns(r, params, m: int, key, *, select=None, tasks=None):
    """The policy `params` sampled m times at each demonstration prefix of `tasks` (default run
    `r`'s task pool: PivotRL's candidate states) that `select(candidate)` keeps (all when None),
    judged by the run's turn reward (functional) and by exact match against the demonstration's
    action.

    Returns (candidates, functional rewards [n, m], exact-match acceptances [n, m] as bools),
    row i holding candidate i's m samples.
    """
    import numpy as np

    from rlvr.train.pivots import demo_candidates
    from rlvr.verifiers.shop import ShopExactMatchVerifier

    pool = r.collector.pool if tasks is None else tasks
    cands = [c for c in demo_candidates(pool, tokenizer=r.tokenizer,
                                        demonstrations=r.kit.demonstration,
                                        render_episode=r.kit.render_episode)
             if select is None or select(c)]
    if not cands:
        return cands, np.zeros((0, m)), np.zeros((0, m), bool)
    got = r.collector.engine.run(params, [list(c.prefix_tokens) for c in cands for _ in range(m)],
                                 [c.turn_task for c in cands for _ in range(m)], key,
                                 r.collector.sampling, -1, 1)
    exact = ShopExactMatchVerifier()
    ex = [exact.accepts(cands[i // m].snapshot, s.text, cands[i // m].reference_action)
          for i, s in enumerate(got.samples)]
    rewards = np.asarray(got.batch.rewards).reshape(len(cands), m)
    return cands, rewards, np.asarray(ex, bool).reshape(len(cands), m)


def clip_fraction(rec: dict) -> float:
    """Mean fraction of policy tokens (or actions) clipped / masked by the ratio bound over the
    run's steps (`policy/clip_frac`, SAO's `policy/masked_frac`)."""
    import numpy as np

    vals = [r.get("policy/clip_frac", r.get("policy/masked_frac")) for r in rec["rows"]]
    vals = [v for v in vals if v is not None]
    return float(np.mean(vals)) if vals else float("nan")
