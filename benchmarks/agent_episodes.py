"""Tool-agent episodes: action tokens/s and episodes/s of 8-turn `kv_tools` episodes through the
training loop's agent loop, in the checkpoint's chat format.

    python benchmarks/agent_episodes.py --out benchmarks/results/agent_episodes_cpu.md  # CPU, tiny
    python benchmarks/agent_episodes.py --size qwen2.5-0.5b --dtype bfloat16 --batch 32  # device

Builds a random Qwen2 checkpoint of the chosen shape with `rlvr.testing.build_checkpoint(...,
tools=True)` (BPE tokenizer, the shipped tool-aware Qwen2.5-style template; at the
Qwen2.5-0.5B shape the embedding is padded to 151,936 rows), binds the `kv_tools` kit to its
tokenizer and runs `--batch` episodes of `--turns` turns with `rlvr.rollout.agent_loop.
run_episodes`. A random model does not write tool calls, so each turn is: the model samples
`--action-len` tokens on the episode's whole history (the policy's compute, `sample_turn`,
history left-padded to a multiple of `--prompt-bucket`), then the turn's text is a scripted
tool call (`get` of the registers in turn, `answer` on the last turn), so every episode runs all
its turns with real tool calls, parsing, execution and template observations. The action tokens
counted are the tokens the model sampled (≤ batch × turns × action-len: a sample that hits eos
stops early).

A warm-up rollout compiles every shape (its wall time is reported); then `--repeats` timed
rollouts give min / median / max of action tokens/s and episodes/s. No assertions: prints a
markdown table (and writes it to --out when given).
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import argparse  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402

from benchmarks.model_shapes import QWEN2_SIZES  # noqa: E402
from benchmarks.output import emit  # noqa: E402

_Q = QWEN2_SIZES["qwen2.5-0.5b"]
SHAPES = {
    "tiny": {},
    "qwen2.5-0.5b": dict(hidden_size=_Q["hidden_size"], intermediate_size=_Q["intermediate_size"],
                         num_hidden_layers=_Q["num_layers"], num_attention_heads=_Q["num_heads"],
                         num_key_value_heads=_Q["num_kv_heads"], tie_word_embeddings=True,
                         model_vocab_size=_Q["vocab_size"], max_position_embeddings=4096),
}


def scripted_calls(task, turns: int) -> list[str]:
    """The tool-call texts of one episode: `get` of the task's registers in turn (cycling),
    `answer` with the goal on the last turn (Hermes format)."""
    state = task.environment_snapshot["state"]
    keys = sorted(state["registers"])
    calls = [{"name": "get", "arguments": {"key": keys[i % len(keys)]}} for i in range(turns - 1)]
    calls.append({"name": "answer", "arguments": {"value": int(state["goal"])}})
    return ["<tool_call>\n" + json.dumps(c) + "\n</tool_call>" for c in calls]


def make_policy(model, scripts, prompt_bucket: int, max_prompt_len: int):
    """run_episodes' `policy`: the model samples each turn (the compute), the text is scripted."""
    from rlvr.rollout.agent_loop import sample_turn, turn_samples_from_texts

    state = {"turn": 0, "sampled": 0}

    def policy(prefixes, keys, sampling, *, tokenizer, terminator_id, prompt_bucket=prompt_bucket):
        t = state["turn"]
        state["turn"] += 1
        out = sample_turn(model, prefixes, keys, sampling, tokenizer=tokenizer,
                          terminator_id=terminator_id, prompt_bucket=prompt_bucket,
                          max_prompt_len=max_prompt_len)
        jax.block_until_ready(out.tokens)
        state["sampled"] += sum(len(a) for a in out.action_ids)
        return turn_samples_from_texts(prefixes, [s[t] for s in scripts[:len(prefixes)]],
                                       tokenizer=tokenizer, terminator_id=terminator_id,
                                       max_new_tokens=sampling.max_new_tokens,
                                       prompt_bucket=prompt_bucket)
    policy.state = state
    return policy


def rollout(model, kit, tok, tasks, args, max_tokens):
    from rlvr.rollout.agent_loop import EpisodeStart, run_episodes
    from rlvr.rollout.sampler import SamplingParams

    # a stop set the random model never hits: every turn samples exactly --action-len tokens
    sampling = SamplingParams(temperature=1.0, max_new_tokens=args.action_len,
                              stop_token_ids=(tok.eos_id,))
    scripts = [scripted_calls(t, args.turns) for t in tasks]
    starts = [EpisodeStart(t, tuple(tok.encode(t.prompt))) for t in tasks]
    policy = make_policy(model, scripts, args.prompt_bucket, max_tokens - args.action_len)
    t0 = time.perf_counter()
    out = run_episodes(model, starts, kit.env_factory, jax.random.key(0), tokenizer=tok,
                       sampling=sampling, terminator=kit.action_terminator,
                       max_turns=args.turns, max_tokens=max_tokens, seq_bucket=max_tokens,
                       prompt_bucket=args.prompt_bucket, policy=policy, wall_time_s=1e9)
    wall = time.perf_counter() - t0
    return wall, policy.state["sampled"], out.episodes


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--size", default="tiny", choices=sorted(SHAPES))
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--batch", type=int, default=8, help="episodes per rollout")
    ap.add_argument("--turns", type=int, default=8)
    ap.add_argument("--action-len", type=int, default=32, help="tokens sampled per turn")
    ap.add_argument("--prompt-bucket", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="")
    args = ap.parse_args()

    from rlvr.models import from_pretrained
    from rlvr.models.tokenizer import HFTokenizer
    from rlvr.tasks.kit import get_kit
    from rlvr.testing import build_checkpoint

    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        path = build_checkpoint(d, saver="rlvr", tools=True, **SHAPES[args.size])
        tok = HFTokenizer(path)
        model = from_pretrained(path, dtype=args.dtype)
        built = time.perf_counter() - t0
    kit = get_kit("kv_tools", difficulty="hard").bind_tokenizer(tok.tok)
    tasks = kit.source.sample(args.batch, seed=0)
    longest = max(len(tok.encode(c)) + 1 for t in tasks for c in scripted_calls(t, args.turns))
    if args.action_len < longest:  # a scripted call cut short would end its episode
        print(f"--action-len raised from {args.action_len} to {longest} (the longest scripted "
              f"call and its end-of-turn token)", file=sys.stderr)
        args.action_len = longest
    prompt = max(len(tok.encode(t.prompt)) for t in tasks)
    obs = len(tok.encode(kit.demonstration(tasks[0])[0].observation))
    max_tokens = -(-(prompt + args.turns * (args.action_len + 2 * obs)) // args.prompt_bucket) \
        * args.prompt_bucket
    max_tokens = min(max_tokens, model.config.max_position_embeddings)

    warm, _, episodes = rollout(model, kit, tok, tasks, args, max_tokens)
    tps, eps = [], []
    for _ in range(args.repeats):
        wall, sampled, episodes = rollout(model, kit, tok, tasks, args, max_tokens)
        tps.append(sampled / wall)
        eps.append(len(episodes) / wall)
    turns = [e.num_turns for e in episodes]
    ok = sum(bool(kit.verifier.verify(t, kit.episode_output(e.env)).passed)
             for t, e in zip(tasks, episodes))
    cfg = model.config
    lines = [
        f"# agent_episodes ({datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC)",
        "",
        f"device: {jax.devices()[0].device_kind} ({jax.default_backend()}), "
        f"{platform.processor() or platform.machine()}; shape {args.size} ({cfg.num_layers} "
        f"layers, d {cfg.hidden_size}, vocab {cfg.vocab_size}), {args.dtype}; checkpoint built "
        f"in {built:.1f}s",
        f"{args.batch} episodes × {args.turns} turns (mean turns run {statistics.mean(turns):.1f},"
        f" outcome passed {ok}/{len(episodes)}), {args.action_len} tokens sampled per turn, "
        f"prompt {prompt} tokens, stream ≤ {max_tokens}; warm-up (compiles) {warm:.1f}s",
        "",
        "| metric | min | median | max |",
        "|---|---|---|---|",
        f"| action tokens/s | {min(tps):.1f} | {statistics.median(tps):.1f} | {max(tps):.1f} |",
        f"| episodes/s | {min(eps):.3f} | {statistics.median(eps):.3f} | {max(eps):.3f} |",
    ]
    text = "\n".join(lines) + "\n"
    emit(text, args.out)


if __name__ == "__main__":
    main()
