"""The LM head + log-softmax + entropy on a (data, fsdp, tensor) mesh of simulated CPU devices:
XLA's per-device cost analysis of the compiled program for `chunked`, `vocab_tiled` as one
program over the whole vocabulary (no mesh given: XLA gathers the head) and `vocab_tiled`
vocabulary-parallel (the mesh given: each tensor shard scans its own V / tensor columns).

    python benchmarks/vocab_parallel_head.py [--shapes small,qwen2.5-0.5b] [--mesh 2,2,2]
                                             [--rolled] [--out FILE]

The program is `benchmarks/compiled_cost.py`'s `logprob-head` one (value and gradient in the
hidden states and the head over the learner step's completion columns) with its inputs placed as
a training run places them: hidden states and tokens split over the batch axes (data, fsdp), the
fp32 head [D, V] split fsdp × tensor, and the gradients returned with the same shardings. The
figures are per device (the SPMD-partitioned module); `gathered` sums the result bytes of the
module's all-gathers and `widest gather` is the largest gathered shape. Loops are unrolled
unless `--rolled` (as in compiled_cost.py: unrolled, flops count every tile; rolled, the memory
figures are the loop's).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_force_host_platform_device_count=8").strip()
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

from benchmarks import compiled_cost as cc  # noqa: E402
from benchmarks.output import emit  # noqa: E402
from rlvr.models import ModelConfig  # noqa: E402
from rlvr.models.scoring import logprobs_from_hidden  # noqa: E402
from rlvr.models.transformer import jnp_dtype  # noqa: E402
from rlvr.parallel import batch_axes, make_mesh  # noqa: E402

VARIANTS = (("chunked", "chunked", False), ("vocab_tiled, one program", "vocab_tiled", False),
            ("vocab_tiled, vocabulary-parallel", "vocab_tiled", True))


def head_program(shape: dict, mesh, impl: str, give_mesh: bool):
    """(jitted value-and-gradient of the head over the completion columns, abstract sharded
    arguments) on `mesh`."""
    cfg = ModelConfig(**shape["model"])
    b = shape["prompts"] * shape["group"]
    t = shape["prompt_len"] + shape["new_tokens"]
    dt = jnp_dtype(cfg.dtype)
    rows = batch_axes(mesh)
    h_sh = NamedSharding(mesh, P(rows, None, None))
    w_sh = NamedSharding(mesh, P("fsdp", "tensor"))
    r_sh = NamedSharding(mesh, P(rows, None))
    S = jax.ShapeDtypeStruct
    args = (S((b, t, cfg.hidden_size), dt, sharding=h_sh),
            S((cfg.hidden_size, cfg.vocab_size), jnp.float32, sharding=w_sh),
            S((b, t), jnp.int32, sharding=r_sh), S((b, t), jnp.bool_, sharding=r_sh))

    def value(h, w, tokens, mask):
        lp, ent = logprobs_from_hidden(h, w, tokens, mask, dtype=dt, impl=impl,
                                       start=shape["prompt_len"],
                                       mesh=mesh if give_mesh else None)
        return jnp.sum(lp) + jnp.sum(ent)

    fn = jax.jit(jax.value_and_grad(value, argnums=(0, 1)),
                 out_shardings=(NamedSharding(mesh, P()), (h_sh, w_sh)))
    return (fn, *args)


_HLO_BYTES = {"pred": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s16": 2, "f32": 4, "s32": 4,
              "u32": 4, "f64": 8, "s64": 8}


def analyse(fn, *args) -> dict:
    """Per-device flops, bytes accessed, temp bytes and all-gather figures of the compiled fn."""
    t0 = time.perf_counter()
    compiled = fn.lower(*args).compile()
    cost = compiled.cost_analysis()
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    cost = cost or {}
    gathered, widest = gathers(compiled.as_text())
    return dict(flops=cost.get("flops"), bytes=cost.get("bytes accessed"),
                temp=compiled.memory_analysis().temp_size_in_bytes, gathered=gathered,
                widest=widest, compile_s=time.perf_counter() - t0)


def gathers(hlo: str):
    """(bytes of every all-gather result, the largest gathered shape) in a compiled module."""
    total, widest, widest_n = 0, "—", 0
    for line in hlo.splitlines():
        m = re.search(r"=\s*(.*?)\s+all-gather(?:-start)?\(", line)
        if not m:
            continue
        for dtype, dims in re.findall(r"(\w+)\[([\d,]*)\]", m.group(1)):
            n = int(np.prod([int(d) for d in dims.split(",") if d]))
            total += n * _HLO_BYTES.get(dtype, 4)
            if n > widest_n:
                widest, widest_n = f"{dtype}[{dims}]", n
    return total, widest


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--shapes", default="small,qwen2.5-0.5b")
    ap.add_argument("--mesh", default="2,2,2", help="data,fsdp,tensor")
    ap.add_argument("--rolled", action="store_true")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    data, fsdp, tensor = (int(x) for x in args.mesh.split(","))
    mesh = make_mesh(data=data, fsdp=fsdp, tensor=tensor)
    if not args.rolled:
        jax.lax.scan = cc._unrolled_scan
    lines = [f"Command: `python benchmarks/vocab_parallel_head.py {' '.join(sys.argv[1:])}`; "
             f"{datetime.date.today()}, {platform.machine()} CPU backend ({jax.device_count()} "
             f"simulated devices), jax {jax.__version__}; mesh data {data} × fsdp {fsdp} × "
             f"tensor {tensor}; per device.", "",
             "| shape | head | flops | bytes accessed | temp bytes | gathered bytes | "
             "widest gather |", "|---|---|---:|---:|---:|---:|---|"]
    for name in args.shapes.split(","):
        for label, impl, give_mesh in VARIANTS:
            fn, *fargs = head_program(cc.SHAPES[name], mesh, impl, give_mesh)
            r = analyse(fn, *fargs)
            line = (f"| {name} | {label} | {cc._fmt(r['flops'])} | {cc._fmt(r['bytes'])} | "
                    f"{cc._fmt(r['temp'])} | {cc._fmt(r['gathered'])} | {r['widest']} |")
            print(line, f"(compiled in {r['compile_s']:.0f} s)", flush=True)
            lines.append(line)
    table = "\n".join(lines)
    emit(table, args.out)


if __name__ == "__main__":
    main()
