"""Real seconds per learner step of the modelled clock's SAO mode, sampling ahead or not.

Under `rollout.clock="modelled"` the streaming modes sample each unit with the parameters current
at its virtual start. With `rollout.clock_sample_ahead` = 1 every unit is sampled alone (batch 1);
by default the units that start under one parameter version are sampled together
(`rlvr.train.clock.ModelledClockCollector`, docs/algorithms.md §7). This script builds the study's
SAO wall-clock arm (`experiments/study/arms.py`, `sao_modelled`) at `--scale`, from the SFT warm
start folder `--warm` (a study cache's `warm/<key>`; without it random-init weights, whose
episodes end at once and say little), and times `--steps` collections (each a learner step's batch; the parameters are not
trained, the version advances every step) for each `--ahead` value. The modelled timeline must
not depend on it: the table's last column says whether each setting's modelled seconds equal
the first setting's.

    python benchmarks/modelled_clock.py [--scale long512] [--warm FOLDER] [--steps 6]
        [--ahead 1,0] [--out benchmarks/results/modelled_clock_cpu.md]

No assertions: this prints a markdown table (and writes it to --out when given).
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import argparse
import datetime
import platform
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks.output import emit  # noqa: E402


def time_setting(scale: str, ahead: int, steps: int, seed: int, warm: str = ""):
    """(real seconds of each collection after the first, modelled seconds after each step,
    batch rows per step, units sampled ahead and never used) for one `clock_sample_ahead`."""
    import jax

    from experiments.study import arms
    from rlvr.train.config import validate_config
    from rlvr.train.setup import build_run

    sc = arms.scale(scale)
    c = arms.base_config("sao", seed, sc)
    c = arms.ARMS["sao_modelled"].change(c, sc)
    if warm:
        c = arms.with_warm(c, os.path.abspath(warm))
    c.rollout.time_model = os.path.join(ROOT, arms.SYSTEM_MODEL)
    c.rollout.clock_sample_ahead = ahead
    c.eval.num_tasks = 0
    c = validate_config(c)
    with tempfile.TemporaryDirectory() as workdir:
        r = build_run(c, workdir)
        try:
            col, params = r.collector, r.init_params
            secs, modelled, rows = [], [], []
            for step in range(steps + 1):  # the first collection compiles
                t0 = time.perf_counter()
                got = col.collect(params, step, step)
                jax.block_until_ready(got.batch.tokens)
                if step:
                    secs.append(time.perf_counter() - t0)
                modelled.append(got.stats["time/modelled_s"])
                rows.append(got.batch.batch_size)
            unused = got.stats.get("clock/sampled_ahead_unused", 0.0)
        finally:
            r.close()
    return secs, modelled, rows, unused


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scale", default="long512", help="a study scale (experiments/study/arms.py)")
    p.add_argument("--steps", type=int, default=6, help="timed collections per setting")
    p.add_argument("--ahead", default="1,0", help="comma-separated rollout.clock_sample_ahead "
                   "values (0: slots ÷ group_size)")
    p.add_argument("--warm", default="", help="Hugging Face folder of the policy to sample with "
                   "(the study's SFT warm start; default: random-init weights)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="")
    args = p.parse_args()
    settings = [int(a) for a in args.ahead.split(",")]
    results = {a: time_setting(args.scale, a, args.steps, args.seed, args.warm) for a in settings}
    first = results[settings[0]][1]
    import jax

    lines = [f"# Modelled clock, SAO mode: real seconds per learner step ({args.scale} scale)", "",
             f"{platform.machine()}, {os.cpu_count()} CPUs, jax {jax.__version__}, "
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; load average "
             f"{os.getloadavg()[0]:.1f}. `python benchmarks/modelled_clock.py --scale {args.scale} "
             f"--steps {args.steps} --ahead {args.ahead}{' --warm <warm start>' if args.warm else ''}`; "
             f"{'the SFT warm start' if args.warm else 'random-init weights'}, {args.steps} "
             f"collections after a first that compiles.", "",
             "| clock_sample_ahead | rows per step | s per step min | median | max | "
             "units sampled ahead, unused | modelled timeline as the first row's |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for a in settings:
        secs, modelled, rows, unused = results[a]
        lines.append(f"| {a} | {int(np.median(rows))} | {min(secs):.2f} | {np.median(secs):.2f} | "
                     f"{max(secs):.2f} | {int(unused)} | {'yes' if np.allclose(modelled, first) else 'no'} |")
    emit("\n".join(lines), args.out or None)


if __name__ == "__main__":
    main()
