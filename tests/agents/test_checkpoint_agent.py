"""A tiny random Qwen2 checkpoint with the tool chat template runs tool-agent episodes with KV
reuse across turns."""
import jax
import numpy as np

from rlvr.agents import chat, kv_tools, qwen_tools_template, trajectories
from rlvr.agents.rollout import SessionGenerator, run_episode
from rlvr.agents.trajectories import load_trajectories

SHIPPED = trajectories.__file__.replace("trajectories.py", "data/kv_trajectories.jsonl")


def test_tiny_checkpoint_episode_prefills_only_appended_tokens(tmp_path):
    from transformers import AutoTokenizer

    from rlvr.models.hf import from_pretrained
    from rlvr.rollout.sampler import SamplingParams
    from rlvr.testing import build_checkpoint

    path = build_checkpoint(str(tmp_path / "ckpt"), saver="rlvr", vocab_size=512)
    tok = AutoTokenizer.from_pretrained(path)
    tok.chat_template = qwen_tools_template()
    model = from_pretrained(path)
    t = load_trajectories(SHIPPED)[0]
    gen = SessionGenerator(model, tok, SamplingParams(max_new_tokens=12), jax.random.key(0),
                           max_tokens=1024)
    ep = run_episode(gen, tok, kv_tools.ENVIRONMENT, t.snapshot, "What is a+b ?", max_turns=3)
    assert 1 <= ep.turns <= 3
    # a random policy writes no valid calls: its turns are answers or counted malformed calls
    eot = chat.end_of_turn_id(tok)
    # turn 1 prefills the prompt; later turns only what was appended after the last action
    prompt = chat.render_ids(tok, list(ep.messages[:2]), kv_tools.TOOLSET.specs(),
                             add_generation_prompt=True)
    assert gen.prefill_tokens[0] == len(prompt)
    assert np.all(ep.ids[:len(prompt)] == prompt) and ep.loss_mask[:len(prompt)].sum() == 0
    # the runs of non-policy tokens before each turn are exactly what each turn prefilled
    zero_runs, run = [], 0
    for m in ep.loss_mask.tolist():
        if m == 0:
            run += 1
        elif run:
            zero_runs.append(run)
            run = 0
    assert zero_runs[:ep.turns] == gen.prefill_tokens
    assert eot in ep.ids[len(prompt):].tolist()
