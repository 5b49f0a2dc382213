"""Draw training curves from a workdir: `python -m rlvr.train.plot <workdir> [metric ...]`.

Reads `<workdir>/metrics.jsonl` (written by `rlvr.train.metrics.MetricWriter`) and writes
`<workdir>/curves.png` (a grid, one panel per metric) . Without metric names it plots a default
set (reward, held-out success, pass@k, KL, entropy, clip fraction, lengths, step time, the
modelled clock, throughput) — those
present in the file.
"""

from __future__ import annotations

import math
import os
import sys

DEFAULT_METRICS = (
    "reward/mean", "eval/success", "eval/pass@1", "eval/gap", "policy/loss", "kl/token_mean",
    "policy/entropy", "policy/clip_frac", "groups/mixed_frac", "length/mean",
    "time/step_s", "time/modelled_s", "throughput/tokens_per_s", "cost/sampled_tokens",
)


def plot_metrics(workdir: str, metrics=None, out: str | None = None) -> str:
    """Plots `metrics` (names; default DEFAULT_METRICS ∪ any eval/*) against step; returns the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rlvr.train.metrics import read_metrics

    rows = read_metrics(workdir)
    if not rows:
        raise FileNotFoundError(f"no metrics in {workdir}/metrics.jsonl")
    keys = set().union(*(r.keys() for r in rows))
    if metrics:
        missing = [m for m in metrics if m not in keys]
        if missing:
            raise KeyError(f"metrics {missing} not in {workdir}; available: {sorted(keys)}")
        names = list(metrics)
    else:
        names = [m for m in DEFAULT_METRICS if m in keys]
        names += sorted(k for k in keys if k.startswith("eval/pass@") and k not in names)
    n = max(len(names), 1)
    cols = min(3, n)
    rows_n = math.ceil(n / cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(4.5 * cols, 3.0 * rows_n), squeeze=False)
    for ax, name in zip(axes.flat, names):
        pts = [(r["step"], r[name]) for r in rows if name in r and isinstance(r[name], (int, float))]
        if pts:
            xs, ys = zip(*pts)
            ax.plot(xs, ys, marker="." if len(xs) < 30 else None)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    fig.tight_layout()
    out = out or os.path.join(workdir, "curves.png")
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        print(__doc__)
        return 2
    path = plot_metrics(argv[0], argv[1:] or None)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
