"""Where the pivot study's final policies fail: a per-turn breakdown on the held-out set.

    python experiments/study_failures.py --scale long512 --seeds 3
    python experiments/study_failures.py --quick --out /tmp/x

For the warm start and the final policy of every arm of study_pivot per seed (its runs, taken from
the run cache; a run not in the cache is run first), the held-out episodes of the evaluation
(the evaluator's tasks and sampling keys) are sampled again and judged twice: by the outcome
verifier (episode success, as the evaluation) and turn by turn by the functional verifier. Each
failed episode gets one cause, from its final state: a wrong cart line (minefield), a payment
before the cart was complete, a wrong total with the cart complete, or no payment before the
turn limit. Per policy also: turns the functional verifier rejects without ending the episode
(a price read twice, an unknown item, a malformed action), the decisive payment's success once
the cart is complete on the policy's own episodes, and the same payment on demonstration prefixes
of the task pool (the states PivotRL trains on; m samples each, functional and exact-match),
each split by the layout of the turns before the payment (every price read before the first
add, or reads and adds interleaved), with seed-paired arm − GRPO differences (95 % paired t-interval).
Writes study_failures.md/.json/.png.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from experiments.study import report  # noqa: E402  (sets JAX_PLATFORMS and sys.path)

import numpy as np  # noqa: E402

CAUSES = ("wrong_line", "paid_early", "wrong_total", "no_payment")
CAUSE_LABEL = {"wrong_line": "wrong cart line", "paid_early": "paid before the cart was complete",
               "wrong_total": "wrong total (cart complete)", "no_payment": "no payment by the turn limit",
               "other": "other"}
ORDER = ("warm", "grpo", "pivotrl", "pivot_variance", "pivot_random", "pivot_all", "pivot_exact",
         "two_stage")


def failure_cause(evidence: dict, cart_complete: bool) -> str:
    """One cause for a failed episode from the outcome verifier's evidence and whether the final
    cart holds exactly the order: a minefield add first (it fails the episode whatever follows),
    then the payment."""
    if evidence.get("minefield_events"):
        return "wrong_line"
    paid = evidence.get("paid")
    if paid is None:
        return "no_payment"
    if not cart_complete:
        return "paid_early"
    # the right total paid with the cart complete and still failed: a changed invariant or a
    # replay that does not reproduce the state
    return "other" if paid.get("value") == evidence.get("total") else "wrong_total"


LAYOUTS = ("reads_first", "interleaved")
LAYOUT_LABEL = {"reads_first": "every price read before the first add", "interleaved": "reads and adds interleaved"}


def layout(actions) -> str:
    """"reads_first" when every price read (get) comes before the first cart add in `actions`
    (the turns before a payment), else "interleaved" (the demonstrations use both:
    `rlvr.tasks.shop.PATTERNS`, "reads_first" and "pairs"). Both layouts are functionally right
    turn by turn; they differ in where the prices stand when the payment copies them."""
    from rlvr.verifiers.shop import turn_kind

    kinds = [turn_kind(a) for a in actions]
    gets = [i for i, k in enumerate(kinds) if k == "get"]
    adds = [i for i, k in enumerate(kinds) if k == "add"]
    return "reads_first" if not gets or not adds or max(gets) < min(adds) else "interleaved"


def _by_layout(layouts: list, oks: list) -> dict:
    """Share of each layout among the payments and the payment's success within it."""
    n = max(len(layouts), 1)
    out = {}
    for lay in LAYOUTS:
        sel = [ok for la, ok in zip(layouts, oks) if la == lay]
        out[lay] = {"share": len(sel) / n, "pay_right": float(np.mean(sel)) if sel else float("nan"),
                    "payments": len(sel)}
    return out


def episode_breakdown(episodes, tasks, kit) -> dict:
    """Outcome and per-turn statistics of judged episodes (one per task row)."""
    from rlvr.envs.shop import cart_complete
    from rlvr.verifiers.shop import ShopFunctionalVerifier, ShopOutcomeVerifier, turn_kind

    outcome, func = ShopOutcomeVerifier(), ShopFunctionalVerifier()
    causes = {c: 0 for c in CAUSES + ("other",)}
    passed, wasted, turns, pay_ok, pay_seen, pay_sum_form = 0, [], [], 0, 0, 0
    layouts, layout_ok = [], []
    for e, task in zip(episodes, tasks):
        v = outcome.verify(task, kit.episode_output(e.env))
        if v.decision == "pass":
            passed += 1
        else:
            causes[failure_cause(v.evidence, cart_complete(e.env.state()))] += 1
        bad = 0
        for i, a in enumerate(e.actions[:len(e.snapshots)]):
            kind = turn_kind(a)
            ok = func.accepts(e.snapshots[i], a)
            if kind == "pay":
                if cart_complete(e.snapshots[i].state()):
                    pay_seen += 1
                    pay_ok += ok
                    pay_sum_form += "+" in a
                    layouts.append(layout(e.actions[:i]))
                    layout_ok.append(bool(ok))
            elif not ok and kind != "add":
                bad += 1
        wasted.append(bad)
        turns.append(e.num_turns)
    n = max(len(episodes), 1)
    return {"episodes": len(episodes), "success": passed / n,
            "causes": {c: k / n for c, k in causes.items()},
            "wasted_turns": float(np.mean(wasted)) if wasted else 0.0,
            "turns": float(np.mean(turns)) if turns else 0.0,
            "pay_after_complete_cart": pay_ok / max(pay_seen, 1), "payments_seen": pay_seen / n,
            "pay_as_sum": pay_sum_form / max(pay_seen, 1),
            "layout": _by_layout(layouts, layout_ok)}


def demo_payment(r, params, m: int, key) -> dict:
    """The policy's payment on demonstration prefixes of the task pool (PivotRL's candidate
    states), m samples each: functional and exact-match success, and the functional success by
    the demonstration's layout."""
    from experiments.study.common import sample_demo_turns
    from rlvr.verifiers.shop import turn_kind

    cands, rewards, ex = sample_demo_turns(r, params, m, key,
                                           select=lambda c: turn_kind(c.reference_action) == "pay")
    lays = [layout([t.action for t in r.kit.demonstration(c.task)[:c.turn_index]]) for c in cands]
    return {"candidates": len(cands), "functional": float(rewards.mean()), "exact": float(ex.mean()),
            "layout": _by_layout([lay for lay in lays for _ in range(m)], list(rewards.ravel() > 0))}


BREAKDOWN_VERSION = "failures/2"


def policy_stats(ctx, seed: int, folder: str, m: int) -> tuple[dict, bool]:
    """Breakdown of the policy in `folder` on the seed's held-out evaluation, cached under
    `<cache>/failures/` by code version, the evaluation's config, the weights' hash and m;
    returns (breakdown, whether it came from the cache)."""
    import jax

    from experiments.study import arms
    from experiments.study.common import cached_on_policy, sample_evaluation

    def compute(r):
        params = r.init_params
        episodes, rows = sample_evaluation(r, params)
        out = episode_breakdown(episodes, rows, r.kit)
        out["demo_payment"] = demo_payment(r, params, m, jax.random.PRNGKey(3000 + seed))
        return out

    return cached_on_policy(arms.base_config("pivotrl", seed, ctx.sc), folder, cache=ctx.cache,
                            workdir=ctx.workdir, name="failures", version=BREAKDOWN_VERSION,
                            compute=compute, extra=(m,), legacy=True)


def main(argv=None):
    ap = report.parser(__doc__.splitlines()[0])
    ap.add_argument("--probe-m", type=int, default=4, help="samples per demonstration payment")
    args = ap.parse_args(argv)
    ctx = report.setup("failures", args)
    from experiments.study import arms, common

    lrs = report.chosen_lrs(ctx, common.method_default_lr)["lr"]
    required = ("grpo", "pivotrl")
    names = [a for a in arms.PIVOT_FAMILY if ctx.wants(a, required=required)]
    folders, logged = {"warm": {}}, {}
    for seed in ctx.seeds:
        folders["warm"][seed] = common.warm(ctx, seed)
        for a in names:
            recs = {a: common.run_arm(ctx, a, seed, lrs)}
            if a == "pivotrl" and ctx.wants("two_stage", required=()):
                recs["two_stage"] = common.run_stage2(ctx, seed, lrs, recs[a])
            for arm, rec in recs.items():
                folders.setdefault(arm, {})[seed] = run_policy(ctx, rec)
                logged[arm, seed] = last_logged_success(rec)
    if ctx.sc.get("shared_warm"):  # one warm start: one policy to break down
        folders["warm"] = {0: folders["warm"][0]}
    per, t0, cached = {}, time.time(), 0
    for a in [a for a in ORDER if a in folders]:
        per[a] = {}
        for seed, folder in folders[a].items():
            ctx.log(f"breakdown {a}/seed{seed}")
            per[a][seed], hit = policy_stats(ctx, seed, folder, args.probe_m)
            cached += hit
            if a != "warm":
                per[a][seed]["last_eval_success"] = logged[a, seed]
    rows = [summary_row(a, per[a]) for a in per]
    text = reading(per)
    body = [
        "Where each arm's final policy fails on the held-out set (the evaluation's tasks and "
        "sampling keys; success as the outcome verifier judges it). Causes are exclusive and, with "
        "success, sum to 1; means over seeds (range over seeds in brackets where more than one).",
        report.table(["arm", "seeds", "success", *[CAUSE_LABEL[c] for c in CAUSES],
                      "rejected non-final turns / episode", "turns",
                      "payment right (own states, cart complete)", "payments as a sum",
                      "payment right on demo prefixes (functional)", "(exact match)"],
                     [[label(a), *row] for a, row in zip(per, rows)]),
        "## The payment by layout",
        "Where the prices stand when the payment copies them: payments after "
        f"{LAYOUT_LABEL['reads_first']} vs {LAYOUT_LABEL['interleaved']} (both layouts are right turn "
        "by turn), on the policy's own episodes (cart complete) and on the demonstration prefixes "
        "(the demonstration's layout).",
        report.table(["arm", "own: share reads first", "own: right, reads first", "own: right, interleaved",
                      "demo: share reads first", "demo: right, reads first", "demo: right, interleaved"],
                     [[label(a), *layout_row(per[a])] for a in per]),
        "## Reading (generated from the numbers above)",
        text,
        f"The breakdowns of {sum(len(v) for v in per.values())} policies ({cached} from the cache "
        "`<cache>/failures/`, keyed by code version, evaluation config, weights and m) took "
        f"{(time.time() - t0) / 60:.1f} wall-minutes in this invocation, on top of the runs' compute below.",
    ]
    numbers = {"per_arm": per, "causes": list(CAUSES), "breakdown_wall_s": time.time() - t0,
               "reading": text}
    report.write(ctx, "Where the pivot study's final policies fail", "\n\n".join(body), numbers,
                 settings={"scale": ctx.sc, "probe_m": args.probe_m, "learning_rates": lrs})
    _plot(ctx, per)


LABELS = {"warm": "warm start (SFT)", "two_stage": "PivotRL then GRPO (two stages)"}


def label(arm: str) -> str:
    from experiments.study import arms

    return LABELS.get(arm) or arms.ARMS[arm].label


def run_policy(ctx, rec: dict) -> str:
    """The final policy of a study run: the loop's export in the run's work folder."""
    folder = os.path.join(ctx.workdir, rec["key"], "export")
    if not os.path.exists(os.path.join(folder, "config.json")):
        raise FileNotFoundError(
            f"run {rec.get('label', rec['key'])}: its final policy {folder} is missing (the work "
            f"folder was removed); delete {os.path.join(ctx.cache, 'runs', rec['key'] + '.json')} "
            "to run it again")
    return folder


def last_logged_success(rec: dict) -> float:
    """The run's last held-out success as the loop logged it (the breakdown's success should
    equal it: same tasks, keys and weights)."""
    vals = [row["eval/success"] for row in rec["rows"] if "eval/success" in row]
    return float(vals[-1]) if vals else float("nan")


def _ms(vals, digits=3) -> str:
    v = np.asarray(vals, float)
    v = v[np.isfinite(v)]
    if len(v) == 0:
        return "n/a"
    if len(v) == 1:
        return f"{v[0]:.{digits}f}"
    return f"{v.mean():.{digits}f} [{v.min():.{digits}f}, {v.max():.{digits}f}]"


def summary_row(arm: str, seeds: dict) -> list:
    s = list(seeds.values())
    return [len(s), _ms([x["success"] for x in s]),
            *[_ms([x["causes"][c] for x in s]) for c in CAUSES],
            _ms([x["wasted_turns"] for x in s], 2), _ms([x["turns"] for x in s], 2),
            _ms([x["pay_after_complete_cart"] for x in s]), _ms([x["pay_as_sum"] for x in s], 2),
            _ms([x["demo_payment"]["functional"] for x in s]), _ms([x["demo_payment"]["exact"] for x in s])]


def layout_row(seeds: dict) -> list:
    s = list(seeds.values())
    cells = []
    for src in (lambda x: x["layout"], lambda x: x["demo_payment"]["layout"]):
        cells += [_ms([src(x)["reads_first"]["share"] for x in s], 2),
                  _ms([src(x)["reads_first"]["pay_right"] for x in s]),
                  _ms([src(x)["interleaved"]["pay_right"] for x in s])]
    return cells


def finite_mean(values) -> float:
    """Mean of the finite values (NaN where there are none)."""
    v = np.asarray(values, float)
    return float(v[np.isfinite(v)].mean()) if np.isfinite(v).any() else float("nan")


def mean_of(per: dict, arm: str, f) -> float:
    """Mean over the arm's seeds of f(breakdown), seeds where it is undefined left out."""
    return finite_mean([f(x) for x in per.get(arm, {}).values()])


def vs_grpo(per: dict, arm: str, f) -> dict:
    """f(breakdown) of `arm` and of GRPO over their common seeds (means) and the seed-paired
    arm − GRPO difference with its 95 % paired t-interval (seeds where f is undefined left out
    of the difference)."""
    from experiments.study import stats

    a = {int(s): f(x) for s, x in per.get(arm, {}).items()}
    g = {int(s): f(x) for s, x in per.get("grpo", {}).items()}
    seeds = sorted(set(a) & set(g))
    return {"arm": finite_mean([a[s] for s in seeds]), "grpo": finite_mean([g[s] for s in seeds]),
            "diff": stats.paired_diff([a[s] for s in seeds], [g[s] for s in seeds])}


def payment_transfer(per: dict, arm: str) -> dict:
    """Seed-paired arm − GRPO comparison of the payment's success on the demonstration prefixes
    (the states PivotRL trains on) and on the arm's own episodes."""
    return {"demo": vs_grpo(per, arm, lambda x: x["demo_payment"]["functional"]),
            "own": vs_grpo(per, arm, lambda x: x["pay_after_complete_cart"])}


def reading(per: dict) -> str:
    """What the breakdown says, from the numbers: each arm's main cause of failure, and for each
    PivotRL arm whether its decisive payment caught up with GRPO's on the states it trains on
    (demonstration prefixes) and on the states its own episodes reach."""
    from experiments.study import stats

    out = []
    for a in per:
        causes = {c: mean_of(per, a, lambda x, c=c: x["causes"][c]) for c in CAUSES}
        top = max(causes, key=causes.get)
        out.append(f"{label(a)} succeeds {mean_of(per, a, lambda x: x['success']):.3f}; its most "
                   f"common failure is {CAUSE_LABEL[top]} ({causes[top]:.3f} of episodes)")
    lines = ["; ".join(out) + "."]
    if "grpo" in per:
        for a in [a for a in ("pivotrl", "pivot_variance", "pivot_random", "pivot_all", "pivot_exact")
                  if a in per]:
            t = payment_transfer(per, a)
            d, o = t["demo"], t["own"]
            same_demo = not stats.excludes(*d["diff"][1:], 0.0) or d["diff"][1] > 0
            below_own = o["diff"][2] < 0
            lines.append(
                f"{label(a)}: the payment is right on demonstration prefixes {d['arm']:.3f} of the "
                f"time vs GRPO's {d['grpo']:.3f} (arm − GRPO {stats.fmt_ci(*d['diff'])}), on its own "
                f"episodes once the cart is complete {o['arm']:.3f} vs {o['grpo']:.3f} "
                f"({stats.fmt_ci(*o['diff'])})"
                + (" — as good as GRPO on the states it trains on, clearly worse on the states its "
                   "own episodes reach." if same_demo and below_own else "."))
    lines.append(layout_reading(per))
    checks = [(a, s, x["success"], x["last_eval_success"]) for a in per for s, x in per[a].items()
              if "last_eval_success" in x]
    off = [f"{a}/seed{s} ({b:.3f} vs logged {e:.3f})" for a, s, b, e in checks if abs(b - e) > 1e-9]
    lines.append("The breakdown's success equals each run's last logged evaluation." if not off else
                 "The breakdown's success differs from the run's last logged evaluation for "
                 + ", ".join(off) + " (the evaluation re-sampled from the exported weights).")
    return " ".join(lines)


def layout_reading(per: dict) -> str:
    """The layout each policy pays from and how the payment fares in each (from the numbers)."""
    parts = []
    for a in per:
        share = mean_of(per, a, lambda x: x["layout"]["reads_first"]["share"])
        rf = mean_of(per, a, lambda x: x["layout"]["reads_first"]["pay_right"])
        il = mean_of(per, a, lambda x: x["layout"]["interleaved"]["pay_right"])
        parts.append(f"{label(a)} pays after reading every price first in {share:.2f} of its "
                     f"episodes (right {rf:.3f} then, {il:.3f} after interleaving)")
    text = "Layouts: " + "; ".join(parts) + "."
    if "grpo" in per:
        g = mean_of(per, "grpo", lambda x: x["layout"]["reads_first"]["share"])
        lagging = [a for a in ("pivotrl", "pivot_variance", "pivot_random", "pivot_all") if a in per
                   and mean_of(per, a, lambda x: x["layout"]["reads_first"]["share"]) < g - 0.2
                   and mean_of(per, a, lambda x: x["layout"]["reads_first"]["pay_right"])
                   > mean_of(per, a, lambda x: x["layout"]["interleaved"]["pay_right"]) + 0.1]
        if lagging:
            text += (" GRPO's episodes moved to the layout in which its payment is more often "
                     "right, while " + " and ".join(f"“{label(a)}”" for a in lagging) + " kept "
                     "interleaving though their own payment is also more often right after reading "
                     "first: the functional turn reward accepts both layouts, so it gives the "
                     "earlier turns no reason to prefer the one that makes the decisive turn easier; "
                     "the episode's reward does.")
        from experiments.study import stats

        within = [f"“{label(a)}” " + stats.fmt_ci(*vs_grpo(
            per, a, lambda x: x["layout"]["reads_first"]["pay_right"])["diff"])
            for a in per if a not in ("warm", "grpo")]
        if within:
            text += (" Within the reads-first layout, payment right, arm − GRPO (seed-paired): "
                     + "; ".join(within) + ".")
    return text


SHORT = {"warm": "warm start", "grpo": "GRPO", "pivotrl": "PivotRL", "pivot_variance": "σ̂²>0 only",
         "pivot_random": "random turns", "pivot_all": "all turns", "pivot_exact": "exact match",
         "two_stage": "two stages"}


def _plot(ctx, per):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(per)
    x = np.arange(len(names))
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4))
    bottom = np.zeros(len(names))
    parts = [("success", lambda r: r["success"])] + [(c, lambda r, c=c: r["causes"][c]) for c in CAUSES]
    for part, f in parts:
        vals = np.array([mean_of(per, a, f) for a in names])
        ax.bar(x, vals, bottom=bottom, label=CAUSE_LABEL.get(part, part))
        bottom += vals
    ax.set_xticks(x, [SHORT[a] for a in names], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("share of held-out episodes")
    ax.set_title("outcome of the final policy", fontsize=9)
    ax.set_ylim(0, 1.3)
    ax.legend(fontsize=7, loc="upper center", ncol=2)
    share = [mean_of(per, a, lambda r: r["layout"]["reads_first"]["share"]) for a in names]
    right = {lay: [mean_of(per, a, lambda r, lay=lay: r["layout"][lay]["pay_right"]) for a in names]
             for lay in LAYOUTS}
    bx.bar(x - 0.27, share, 0.27, label="share of payments after reading every price first")
    bx.bar(x, right["reads_first"], 0.27, label="payment right, reads first")
    bx.bar(x + 0.27, right["interleaved"], 0.27, label="payment right, interleaved")
    bx.set_xticks(x, [SHORT[a] for a in names], rotation=30, ha="right", fontsize=8)
    bx.set_ylim(0, 1.3)
    bx.set_title("the payment on the policy's own episodes, by layout", fontsize=9)
    bx.legend(fontsize=7, loc="upper center", ncol=2)
    fig.tight_layout()
    fig.savefig(ctx.path(".png"), dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
