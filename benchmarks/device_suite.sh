#!/usr/bin/env bash
# The accelerator benchmarks, prepared to run unattended on one GPU inside a short lease.
#
#   bash benchmarks/device_wheels.sh                       # here, once: wheels into .whl/
#   bash benchmarks/device_suite.sh [PART ...]             # there, carrying .whl
#
# PARTs, each bounded by its own timeout (seconds), in this order by default:
#   core_ops  (90)   GAE forms (blocked over a sweep of block lengths) and the PPO /
#                    turn-level losses at [1024, 8192]                      (about 30 s on an H200)
#   rl_step   (240)  one GRPO step end to end, Qwen2.5-0.5B shape, 64 prompts x 8, 256 + 512 new
#   multiturn (300)  8-turn episodes, KV cache kept across turns vs re-prefilled (Qwen2-0.5B
#                    shape, 64 episodes, prompt 256, 64-token actions and observations); the
#                    re-prefill mode compiles one sampler per history length (13-22 s each there)
#   sampler   (240)  one prefill shared by G = 8 samples of a 1024-token prompt vs G prefills;
#                    top-p from the top-256 candidates vs the full-vocabulary sort  (about 165 s)
#   model     (250)  bf16 matmul, train-step MFU (Llama-3.2-1B shape), decode greedy / sampled
#                    and the transformers baselines (eager; static cache + torch.compile) (230 s)
#   decode_lengths (300, not in the default list) generation time of the full / segmented /
#                    compacting decode loops under lognormal stop lengths (Qwen2-0.5B shape, bf16,
#                    batch 64 and 256, prompt 128 + 512 new); not yet run on a GPU
#   fused     (300, not in the default list) separate vs fused q/k/v and gate/up kernels: decode
#                    (Qwen2-0.5B shape, bf16, batch 16 and 256, 128 + 256 new) and the Llama-3.2-1B
#                    train step (8 x 2048); not yet run on a GPU
# More than one 15-minute lease holds with the machine's start (a minute or two): core_ops,
# sampler and model have tables (BENCHMARKS.md), so run `rl_step multiturn` (under 9 minutes)
# in one call, and the rest only as time allows.
# Results: $OUT/*.md (markdown tables), $OUT/device.txt (GPU,
# driver, JAX version, date) and $OUT/suite.log (everything printed); without $OUT they go to
# benchmarks/results/device/.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results/device}
mkdir -p "$OUT"
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false TF_CPP_MIN_LOG_LEVEL=3
{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
  python3 -c "import jax, flax; print('jax', jax.__version__, 'flax', flax.__version__, jax.devices())"
  date -u +"%Y-%m-%d %H:%M UTC"
} 2>&1 | tee "$OUT/device.txt"

part() {  # part NAME SECONDS COMMAND...
  local name=$1 limit=$2
  shift 2
  echo "== $name (limit ${limit}s) $(date -u +%H:%M:%S)"
  timeout "$limit" "$@"
  echo "== $name exit $? $(date -u +%H:%M:%S)"
}

for p in ${*:-core_ops rl_step multiturn sampler model}; do
  case $p in
    core_ops) part core_ops 90 python3 benchmarks/core_ops.py --sizes 1024x8192 --repeats 5 \
                --methods scan,associative,blocked,blocked:64,blocked:128,blocked:512 \
                --out "$OUT/core_ops_gpu.md" ;;
    rl_step) part rl_step 240 python3 benchmarks/hf_train_loop.py --size qwen2.5-0.5b \
               --tasks gsm8k:builtin --steps 4 --skip 2 --out "$OUT/rl_step_gpu.md" ;;
    multiturn) part multiturn 300 python3 benchmarks/multiturn.py --size qwen0.5b \
                 --dtype bfloat16 --batch 64 --prompt-len 256 --obs-len 64 --action-len 64 \
                 --out "$OUT/multiturn_gpu.md" ;;
    sampler) part sampler 240 python3 benchmarks/sampler.py --gpu --out "$OUT/sampler_gpu.md" ;;
    model) part model 250 python3 benchmarks/model.py --gpu-suite --budget-s 220 \
             --out "$OUT/model_gpu.md" ;;
    decode_lengths) part decode_lengths 300 python3 benchmarks/decode_lengths.py --sizes qwen0.5b \
                      --vocab 0 --dtype bfloat16 --batches 64,256 --prompt-len 128 \
                      --new-tokens 512 --median 96 --segments 8 --reps 3 \
                      --out "$OUT/decode_lengths_gpu.md" ;;
    fused) part fused 300 python3 benchmarks/fused_projections.py --size qwen0.5b \
             --dtype bfloat16 --batches 16,256 --prompt 128 --new-tokens 256 \
             --train-size llama1b --train-batch 8 --train-seq 2048 --out "$OUT/fused_gpu.md" ;;
    *) echo "device_suite: unknown part $p (core_ops rl_step multiturn sampler model" \
            "decode_lengths fused)"; exit 2 ;;
  esac
done 2>&1 | tee -a "$OUT/suite.log"
