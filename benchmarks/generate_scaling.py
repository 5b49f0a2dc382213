"""Generation scaling: tokens/s of `sample(..., sharding=generation_sharding(mesh))` with the batch
split over 1, 2, 4, 8 devices (a data-parallel mesh over the first n devices; parameters
replicated). Random weights, no stop tokens: every row decodes `--new` tokens. Prints a markdown
table (min / median / max over repeats, after one compile run per device count).

CPU (default):   python benchmarks/generate_scaling.py --out benchmarks/results/generate_scaling_cpu.md
                 (8 simulated devices via XLA_FLAGS, set before JAX is imported; they share the
                 machine's cores, so the table shows that the sharded program runs, not speed-up)
Multi-device:    python benchmarks/generate_scaling.py --accel   (Qwen2-0.5B shape, bf16, batch 256,
                 prompt 128 + 256; device counts up to the devices present; writes
                 $OUT/generate_scaling.md if OUT is set)
"""

from __future__ import annotations

import os
import sys

if "--accel" not in sys.argv and "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import argparse  # noqa: E402
import datetime  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

from benchmarks.model import block, log, make_config  # noqa: E402
from rlvr.models import Transformer  # noqa: E402
from rlvr.parallel import generation_sharding, make_mesh  # noqa: E402
from rlvr.rollout.sampler import SamplingParams, sample  # noqa: E402


def run(size, dtype, batch, prompt, new, repeats, counts):
    config = make_config(size, dtype=dtype)
    model = Transformer(config, rngs=nnx.Rngs(0))
    rng = np.random.default_rng(0)
    tokens = rng.integers(3, config.vocab_size, (batch, prompt)).astype(np.int32)
    mask = np.ones((batch, prompt), bool)
    params = SamplingParams(max_new_tokens=new, temperature=1.0)
    rows = []
    for n in counts:
        mesh = make_mesh(data=n, devices=jax.devices()[:n])
        gs = generation_sharding(mesh)
        state = jax.device_put(nnx.state(model), jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))
        m = nnx.merge(nnx.graphdef(model), state)
        call = lambda: block(sample(m, tokens, mask, jax.random.PRNGKey(0), params, pad_id=0,  # noqa: E731
                                    sharding=gs))
        t0 = time.perf_counter()
        call()
        log(f"devices {n}: compile + first run {time.perf_counter() - t0:.1f}s")
        rates = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            call()
            rates.append(batch * new / (time.perf_counter() - t0))
        rows.append((n, min(rates), statistics.median(rates), max(rates)))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--accel", action="store_true", help="real devices, Qwen2-0.5B shape, bf16")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    if a.accel:
        size, dtype, batch, prompt, new = "qwen0.5b", "bfloat16", 256, 128, 256
    else:
        size, dtype, batch, prompt, new = "tiny", "float32", 16, 32, 32
    counts = [n for n in (1, 2, 4, 8) if n <= jax.device_count()]
    rows = run(size, dtype, batch, prompt, new, a.repeats, counts)
    dev = jax.devices()[0]
    lines = [f"Generation scaling — {size} shape, {dtype}, batch {batch}, prompt {prompt} + {new} new, "
             f"temperature 1; {jax.device_count()} × {dev.device_kind} ({dev.platform}), "
             f"jax {jax.__version__}, {datetime.date.today()}; {a.repeats} repeats", "",
             "| devices | tok/s min | tok/s median | tok/s max |", "|---:|---:|---:|---:|"]
    lines += [f"| {n} | {lo:,.0f} | {med:,.0f} | {hi:,.0f} |" for n, lo, med, hi in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    out = a.out or (os.path.join(os.environ["OUT"], "generate_scaling.md") if os.environ.get("OUT") else "")
    if out:
        with open(out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
