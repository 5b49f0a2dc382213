"""Command line, output folders, provenance and markdown / plot writing of the study scripts.

Every script takes `--seeds`, `--quick` (seconds-long runs of every code path, the tests' mode),
`--out` (where result files go; default experiments/results), `--workdir` (run folders,
resumable) and `--cache` (run records and warm starts; default <out>/.study_cache), and writes
`<out>/study_<name>.md` (+ `.png`, + `.json` with the numbers the text was written from).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shlex
import sys
import time
from typing import Callable, Optional

os.environ.setdefault("JAX_PLATFORMS", "cpu")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

RESULTS = os.path.join(ROOT, "experiments", "results")


@dataclasses.dataclass
class Ctx:
    """What a study script works with: settings, folders, the log and the run records."""

    name: str
    args: argparse.Namespace
    sc: dict
    out: str
    cache: str
    workdir: str
    seeds: tuple
    started: float
    arms: Optional[frozenset] = None
    records: list = dataclasses.field(default_factory=list)
    # warm-start key -> {"wall_s", "cpu_s"} of the SFT warm starts the runs started from
    warm_starts: dict = dataclasses.field(default_factory=dict)

    def log(self, msg: str) -> None:
        print(f"[study_{self.name} {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    def wants(self, arm: str, *, required: tuple = ("grpo",)) -> bool:
        """Whether `arm` runs in this invocation (`--arms`; the comparison's reference arms
        always run)."""
        return self.arms is None or arm in self.arms or arm in required

    def path(self, suffix: str) -> str:
        return os.path.join(self.out, f"study_{self.name}{suffix}")


def parser(description: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1")
    ap.add_argument("--quick", action="store_true", help="tiny settings: every code path in seconds")
    from experiments.study.arms import SCALE_ABOUT

    ap.add_argument("--scale", default="full", help="settings preset: " + "; ".join(
        f"{name} ({about})" for name, about in SCALE_ABOUT.items()))
    ap.add_argument("--arms", default="", help="comma-separated arms to run (default: all of the "
                    "script's arms; GRPO, PivotRL and SAO always run where they are the reference)")
    ap.add_argument("--out", default="", help="folder of the result files (default experiments/results, "
                    "or its subfolder the scale names)")
    ap.add_argument("--workdir", default="", help="run folders, resumable (default <cache>/work)")
    ap.add_argument("--cache", default="", help="run records and warm starts (default <out>/.study_cache, "
                    "or experiments/results/.study_cache without --out)")
    return ap


def setup(name: str, args: argparse.Namespace) -> Ctx:
    from experiments.study.arms import scale

    quiet()
    sc = scale("quick" if args.quick else args.scale)
    chosen = frozenset(a.strip() for a in args.arms.split(",") if a.strip())
    from experiments.study.arms import ARMS

    unknown = sorted(chosen - set(ARMS) - {"two_stage"})
    if unknown:
        raise SystemExit(f"--arms: unknown arm(s) {unknown}; allowed: {sorted(ARMS) + ['two_stage']}")
    # the default folders: results/ (or the scale's subfolder) and one cache for every scale, so
    # a scale that shares the session's warm start finds it
    out = os.path.abspath(args.out or os.path.join(RESULTS, sc.get("results_subdir", "")))
    os.makedirs(out, exist_ok=True)
    cache = os.path.abspath(args.cache or os.path.join(args.out or RESULTS, ".study_cache"))
    enable_compile_cache(os.path.join(cache, "jax_cache"))
    return Ctx(name=name, args=args, sc=sc, out=out, cache=cache,
               workdir=os.path.abspath(args.workdir or os.path.join(cache, "work")),
               seeds=tuple(range(args.seeds)), started=time.time(), arms=chosen or None)


def quiet() -> None:
    from absl import logging as absl_logging

    absl_logging.set_verbosity(absl_logging.ERROR)


def enable_compile_cache(path: str) -> None:
    """JAX's persistent compilation cache at `path`: later processes of the study load compiled
    sampler / learner shapes instead of compiling them again."""
    import jax

    try:
        jax.config.update("jax_compilation_cache_dir", path)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    except Exception:  # noqa: BLE001 — an optional speed-up
        pass


def command(args) -> str:
    return "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:])


def count(n: int, noun: str) -> str:
    """`n` and `noun`, plural unless `n` is 1: `count(1, "seed")` → "1 seed", `count(3, "seed")` → "3 seeds"."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def shown_path(path: str) -> str:
    """`path` relative to the repository when inside it, else as given."""
    return os.path.relpath(path, ROOT) if path.startswith(ROOT) else path


def provenance(ctx: Ctx) -> str:
    """Code version, command, which runs came from the cache (computed with that code), and the
    machines the runs were computed on."""
    from rlvr.version import code_version

    cached = [r for r in ctx.records if r.get("from_cache")]
    fresh = [r for r in ctx.records if not r.get("from_cache")]
    versions = sorted({r["code_version"] for r in ctx.records})
    lines = [f"Code version (`rlvr.version.code_version()`): `{code_version()}`"
             + (f"; runs computed with: {', '.join(f'`{v}`' for v in versions)}" if versions else ""),
             f"Command: `{command(ctx.args)}`",
             f"Runs: {len(ctx.records)} ({len(fresh)} computed now, {len(cached)} from the cache "
             f"`{shown_path(ctx.cache)}`, keyed by code "
             f"version + config)."]
    if cached:
        lines.append("From the cache: " + ", ".join(sorted(r.get("label") or r["key"] for r in cached)) + ".")
    machines = sorted({r.get("machine") or "not recorded" for r in ctx.records})
    if machines:
        lines.append("Computed on (CPU, jaxlib; a run repeats bit for bit only on the same kind): "
                     + "; ".join(machines) + ".")
    wall = sum(r.get("wall_s", 0.0) for r in ctx.records)
    cpu = sum(r.get("cpu_s", 0.0) for r in ctx.records)
    lines.append(f"Compute of these runs (summed over the invocations that computed them): "
                 f"{wall / 3600:.2f} wall-hours, {cpu / 3600:.2f} CPU-hours (process CPU time).")
    return "\n\n".join(lines)


def table(header: list, rows: list) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(x) for x in r) + " |" for r in rows]
    return "\n".join(out)


def write(ctx: Ctx, title: str, body: str, numbers: dict, settings: Optional[dict] = None) -> str:
    """Writes study_<name>.md (title, body, provenance, settings) and .json (numbers)."""
    parts = [f"# {title}", body, "## Provenance", provenance(ctx)]
    if settings is not None:
        parts += ["Settings:", "```json\n" + json.dumps(settings, indent=1, sort_keys=True,
                                                        default=str) + "\n```"]
    text = "\n\n".join(parts) + "\n"
    with open(ctx.path(".md"), "w") as f:
        f.write(text)
    from rlvr.version import code_version

    numbers = {**numbers, "code_version": code_version(),
               "run_code_versions": sorted({r["code_version"] for r in ctx.records}),
               "compute": {"runs": len(ctx.records),
                           "wall_h": sum(r.get("wall_s", 0.0) for r in ctx.records) / 3600,
                           "cpu_h": sum(r.get("cpu_s", 0.0) for r in ctx.records) / 3600},
               # per run, so that a summary over several result files counts a shared run once
               "run_compute": {r["key"]: {"label": r.get("label", ""), "wall_s": r.get("wall_s", 0.0),
                                          "cpu_s": r.get("cpu_s", 0.0)} for r in ctx.records},
               # per warm start, for the same reason (several files start from one warm start)
               "warm_compute": dict(ctx.warm_starts)}
    with open(ctx.path(".json"), "w") as f:
        json.dump(numbers, f, indent=1, sort_keys=True, default=_jsonable)
    ctx.log(f"wrote {ctx.path('.md')}")
    return text


def readme_markers(out: str) -> Optional[tuple]:
    """The begin / end markers of the experiments/README.md block that results in `out` own:
    experiments/results → the study summary, experiments/results/<sub> → the `<sub>` block; None
    for a folder elsewhere (its runs leave the README alone)."""
    rel = os.path.relpath(os.path.abspath(out), RESULTS)
    if rel == ".":
        tag = "study summary"
    elif rel.startswith("..") or os.sep in rel:
        return None
    else:
        tag = f"study summary {rel}"
    return _markers(tag)


def _markers(tag: str) -> tuple:
    return f"<!-- {tag}: begin (written by study_all.py) -->", f"<!-- {tag}: end -->"


def update_readme(ctx: Ctx, block: str) -> None:
    """Replaces this output folder's block of experiments/README.md (`readme_markers`) with
    `block`; a `--out` outside experiments/results leaves the README alone."""
    markers = readme_markers(ctx.out)
    if markers is None:
        return
    _replace_between(*markers, block)
    ctx.log(f"updated {os.path.join(os.path.dirname(RESULTS), 'README.md')}")


def replace_readme_block(tag: str, block: str, readme: str = "") -> None:
    """Replaces the block of experiments/README.md (or `readme`) between the `<!-- tag: begin
    (written by study_all.py) -->` and `<!-- tag: end -->` markers with `block`."""
    _replace_between(*_markers(tag), block, readme)


def _replace_between(begin: str, end: str, block: str, readme: str = "") -> None:
    path = readme or os.path.join(os.path.dirname(RESULTS), "README.md")
    with open(path) as f:
        text = f.read()
    if begin not in text or end not in text:
        raise SystemExit(f"{path}: the markers of this block are missing ({begin!r} ... {end!r})")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    with open(path, "w") as f:
        f.write(f"{head}{begin}\n{block.strip()}\n{end}{tail}")


def _jsonable(x):
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


def label_colours(panels: list, palette: list) -> dict:
    """One colour per series label across all panels, in order of first appearance (an arm keeps
    its colour from panel to panel)."""
    colours: dict = {}
    for _, _, series, _ in panels:
        for label, _, _ in series:
            colours.setdefault(label, palette[len(colours) % len(palette)])
    return colours


def plot_curves(path: str, panels: list) -> None:
    """panels: [(title, xlabel, [(label, x, y), ...], hline or None)] → one figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = label_colours(panels, list(plt.get_cmap("tab10").colors))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
    for ax, (title, xlabel, series, hline) in zip(axes[0], panels):
        for label, x, y in series:
            ax.plot(x, y, marker=".", label=label, color=colours[label])
        if hline is not None:
            ax.axhline(hline, color="k", ls=":", lw=1)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("held-out success")
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def mean_curve(curves: list, x: str, grid: np.ndarray) -> np.ndarray:
    """Mean over seeds of success interpolated on a common grid of measure `x` (NaN beyond a
    seed's last evaluation)."""
    import warnings

    ys = [np.interp(grid, c[x], c["success"], left=np.nan, right=np.nan) for c in curves]
    if not ys:
        return grid * np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # grid points no seed reached
        return np.nanmean(np.array(ys), axis=0)


def load_json(path: str, what: str, hint: str) -> dict:
    if not os.path.exists(path):
        raise SystemExit(f"{what} not found at {path}: {hint}")
    with open(path) as f:
        return json.load(f)


def lr_source(ctx: Ctx) -> tuple:
    """(the scale whose sweep sets this run's learning rates, the folder of its study_lr.json):
    a scale may take the rates another scale's sweep chose — from `--out` where that folder holds
    a sweep, otherwise from the default results folder (so a run written elsewhere keeps the
    rates its scale is defined with)."""
    scale = "quick" if ctx.args.quick else ctx.args.scale
    lr_scale = "quick" if ctx.args.quick else getattr(ctx, "sc", {}).get("lr_scale", scale)
    if lr_scale != scale and not (getattr(ctx.args, "out", "")
                                  and os.path.exists(os.path.join(ctx.out, "study_lr.json"))):
        return lr_scale, RESULTS
    return lr_scale, ctx.out


def chosen_lrs(ctx: Ctx, method_default: Callable[[str], float]) -> dict:
    """The learning rates chosen by study_lr (its json), or the config defaults if the sweep has
    not run (the reading says so)."""
    lr_scale, folder = lr_source(ctx)
    p = os.path.join(folder, "study_lr.json")
    swept = None
    if os.path.exists(p):
        with open(p) as f:
            swept = json.load(f)
        if swept.get("scale") == lr_scale:
            return {"lr": swept["chosen"], "source": f"study_lr.json ({lr_scale} scale)"}
    defaults = {m: method_default(m) for m in ("grpo", "pivotrl", "sao", "reinforce")}
    if swept is None:
        return {"lr": defaults, "source": "config defaults (study_lr has not run)"}
    return {"lr": defaults, "source": f"config defaults (study_lr.json was swept at scale "
                                      f"{swept.get('scale', 'unknown')!r}, not {lr_scale!r})"}


def load_result(p: str) -> Optional[dict]:
    """A study result file's numbers, with its provenance and compute read from the .md where the
    json predates them; None where the file does not exist."""
    if not os.path.exists(p):
        return None
    with open(p) as f:
        numbers = json.load(f)
    md = p[:-len(".json")] + ".md"
    text = open(md).read() if os.path.exists(md) else ""
    # written before the json recorded provenance: read it from the .md's provenance lines
    if "run_code_versions" not in numbers:
        m = re.search(r"runs computed with: (.*)", text)
        numbers["run_code_versions"] = re.findall(r"`([0-9a-f]+)`", m.group(1)) if m else []
    if "compute" not in numbers:
        runs = re.search(r"^Runs: (\d+)", text, re.M)
        m = re.search(r"Compute of these runs.*?: ([\d.]+) wall-hours, ([\d.]+) CPU-hours", text)
        numbers["compute"] = ({"runs": int(runs.group(1)) if runs else 0, "wall_h": float(m.group(1)),
                               "cpu_h": float(m.group(2))} if m else None)
    return numbers
