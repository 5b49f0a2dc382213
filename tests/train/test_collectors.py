"""Collectors and the reward path on a scripted engine (no model): dynamic sampling refills,
curricula move the draws, the asynchronous collector records each row's behaviour version and
staleness weight, reward options act, env_error samples are excluded from evaluation."""

import dataclasses
import time

import numpy as np
import pytest

from rlvr.records.batch import RolloutBatch
from rlvr.records.task import TaskSpec
from rlvr.records.verdict import Verdict
from rlvr.rollout.sampler import SamplingParams
from rlvr.train.collectors import (AsyncCollector, Collected, GroupCollector, RolloutCost,
                                   TaskSampler, make_samples)
from rlvr.train.evaluate import Evaluator
from rlvr.train.judge import Judge, reward_config_from
from tests.train.tiny import tiny_config


class Tasks:
    """Tasks "t0".."t{n-1}" whose reference answer is their index."""

    name, alphabet = "scripted", "0123456789"

    def __init__(self, n=8):
        self.all = [TaskSpec(task_id=f"t{i}", prompt=f"{i}", task_type="text", reference_answer=i)
                    for i in range(n)]

    def sample(self, n, seed):
        rng = np.random.default_rng(sum(map(ord, str(seed))))
        idx = rng.permutation(len(self.all))[:n] if n <= len(self.all) else rng.choice(len(self.all), n)
        return [self.all[i] for i in idx]


class Exact:
    version = "exact/1"

    def verify(self, task, output):
        if output == "?":
            return Verdict("unknown", components={"format": 0.0})
        if output == "down":
            from rlvr.records.verdict import env_error

            return env_error("service down")
        ok = output == str(task.reference_answer)
        return Verdict("pass" if ok else "fail", components={"correct": float(ok), "format": 1.0})


class ScriptedEngine:
    """Outputs per task id from `answers` (a callable (task, i) -> text); judged for real."""

    def __init__(self, judge, answers):
        self.judge, self.answers, self.calls = judge, answers, 0

    def run(self, params, tasks, group_size, keys, sampling, policy_version):
        self.calls += 1
        rows = [t for t in tasks for _ in range(group_size)]
        texts = [self.answers(t, i % group_size) for i, t in enumerate(rows)]
        j = self.judge.judge(rows, texts)
        b = len(rows)
        batch = RolloutBatch.create(tokens=np.ones((b, 4), np.int32), loss_mask=np.ones((b, 4)),
                                    behavior_logprobs=np.zeros((b, 4)), rewards=j.rewards, valid=j.valid,
                                    policy_version=np.full(b, policy_version))
        samples = make_samples(rows, texts, j, stop_reasons=["eos"] * b, policy_versions=policy_version,
                               sampling=SamplingParams(), environment_version="", prompts=[t.prompt for t in rows])
        return Collected(batch, samples, tuple(rows), group_size, RolloutCost(b, 4 * b, 4 * b))


def _judge(**reward):
    return Judge(Exact(), reward_config_from(tiny_config(**{f"reward__{k}": v for k, v in reward.items()})),
                 executor="inline")


def test_dynamic_sampling_drops_all_equal_groups_and_refills():
    # even tasks: every sample right (all-equal group); odd tasks: half right (mixed)
    answers = lambda t, i: str(t.reference_answer) if (t.reference_answer % 2 == 0 or i % 2) else "x"  # noqa: E731
    engine = ScriptedEngine(_judge(), answers)
    col = GroupCollector(engine, TaskSampler(Tasks(), seed=0), group_size=4, prompts_per_step=4,
                         sampling=SamplingParams(), seed=0, dynamic_sampling=True, max_rounds=6)
    got = col.collect(None, 0, 0)
    r = np.asarray(got.batch.rewards).reshape(-1, 4)
    assert got.num_groups == 4 and got.stats["sampling/kept_group_frac"] == 1.0
    assert np.all(r.max(1) > r.min(1))  # every kept group is mixed
    assert got.cost.turns == 16 * engine.calls  # the discarded rounds are charged too
    off = GroupCollector(ScriptedEngine(_judge(), answers), TaskSampler(Tasks(), seed=0), group_size=4,
                         prompts_per_step=4, sampling=SamplingParams(), seed=0)
    r_off = np.asarray(off.collect(None, 0, 0).batch.rewards).reshape(-1, 4)
    assert np.any(r_off.max(1) == r_off.min(1))  # without it the same draw keeps all-equal groups


def test_variance_curriculum_moves_draws_to_uncertain_tasks():
    src = Tasks(8)
    sampler = TaskSampler(src, seed=0, pool_size=8, curriculum="variance", alpha=1.0, ema=0.0, floor=0.01)
    ids = [t.task_id for t in sampler.pool]
    # tasks at index 0-3 of the pool: p = 0.5 (uncertain); the rest always solved (p = 1)
    sampler.update(ids, [0.5 if i < 4 else 1.0 for i in range(len(ids))])
    drawn = [t.task_id for t in sampler.draw(1, 2000)]
    uncertain = {ids[i] for i in range(4)}
    assert np.mean([d in uncertain for d in drawn]) > 0.9
    flat = TaskSampler(src, seed=0, pool_size=8)
    assert 0.3 < np.mean([t.task_id in uncertain for t in flat.draw(1, 2000)]) < 0.8


def test_curriculum_credits_each_groups_success_to_its_own_task():
    """observe() updates p(task) from that task's own group: tasks with an even answer are always
    solved, the others never (ema 0 makes p the last success rate exactly)."""
    answers = lambda t, i: str(t.reference_answer) if t.reference_answer % 2 == 0 else "x"  # noqa: E731
    sampler = TaskSampler(Tasks(8), seed=0, pool_size=8, curriculum="variance", alpha=1.0, ema=0.0,
                          floor=0.01)
    col = GroupCollector(ScriptedEngine(_judge(), answers), sampler, group_size=2,
                         prompts_per_step=4, sampling=SamplingParams(), seed=0)
    got = col.collect(None, 0, 0)
    col.observe(got)
    seen = {t.task_id: t.reference_answer for t in got.tasks}
    assert len(seen) >= 2 and {v % 2 for v in seen.values()} == {0, 1}  # both kinds were drawn
    p = dict(zip([t.task_id for t in sampler.pool], sampler.p))
    for tid, ref in seen.items():
        assert p[tid] == (1.0 if ref % 2 == 0 else 0.0), (tid, p[tid])


def test_pool_larger_than_the_task_space_fails_at_start_naming_the_field():
    from rlvr.tasks.kit import get_kit

    kit = get_kit("arithmetic", difficulty={"num_operands": 2, "num_digits": 1, "operators": "+-"})
    with pytest.raises(ValueError, match=r"config.task.pool_size=256: the task source cannot give"):
        TaskSampler(kit.source, seed=0, pool_size=256)


class SlowInner:
    """An inner collector whose every call takes a moment and returns 2 groups of 1 row."""

    def __init__(self, judge):
        self.engine = ScriptedEngine(judge, lambda t, i: str(t.reference_answer))
        self.calls = []

    def collect(self, params, step, version, num_groups=None):
        self.calls.append((step, version))
        time.sleep(0.01)
        return self.engine.run(params, Tasks().all[:num_groups], 1, None, SamplingParams(), version)

    def close(self):
        pass


def test_async_rows_carry_the_behaviour_version_and_staleness_weight():
    inner = SlowInner(_judge())
    col = AsyncCollector(inner, prompts_per_step=2, producer_batch=2, queue_size=6, max_staleness=3,
                         staleness_decay=0.5, backpressure=False)
    try:
        col.publish("params-v0", 0)
        first = col.collect(None, 0, 0)
        assert set(np.asarray(first.batch.policy_version)) == {0}
        while len(col.queue) < 6:  # the thread fills the queue with version-0 groups
            time.sleep(0.01)
        col.publish("params-v2", 2)
        later = [col.collect(None, s, 2) for s in range(1, 6)]
        versions = np.concatenate([np.asarray(c.batch.policy_version) for c in later])
        weights = np.concatenate([np.asarray(c.batch.sample_weights) for c in later])
        assert 0 in versions and 2 in versions  # the behaviour version, not the learner's (2)
        np.testing.assert_allclose(weights, 0.5 ** (2 - versions))
        assert all(s.policy_version == v for c in later for s, v in
                   zip(c.samples, np.asarray(c.batch.policy_version)))
        col.publish("params-v9", 9)
        col.collect(None, 6, 9)
        assert col.queue.stats()["queue/dropped_stale"] > 0  # lag > 3: never trained on
    finally:
        col.close()


def test_reward_options_act_and_env_errors_are_masked():
    task = Tasks().all[3]
    texts = ["3", "4", "?", "down"]
    base = _judge().judge([task] * 4, texts)
    np.testing.assert_array_equal(base.rewards, [1.0, 0.0, 0.0, 0.0])
    np.testing.assert_array_equal(base.valid, [True, True, True, False])  # env_error masked
    doubled = _judge(correct_weight=2.0).judge([task] * 4, texts)
    np.testing.assert_array_equal(doubled.rewards, [2.0, 0.0, 0.0, 0.0])
    fmt = _judge(format_weight=0.1).judge([task] * 4, texts)
    np.testing.assert_allclose(fmt.rewards, [1.1, 0.1, 0.0, 0.0])
    masked = _judge(unknown_as="mask").judge([task] * 4, texts)
    np.testing.assert_array_equal(masked.valid, [True, True, False, False])
    clipped = _judge(correct_weight=2.0, clip=1.5).judge([task] * 4, texts)
    np.testing.assert_array_equal(clipped.rewards, [1.5, 0.0, 0.0, 0.0])
    # a task's own reward_config overrides the run's fields it sets
    own = dataclasses.replace(task, reward_config={"kind": "weighted", "pass_weight": 3.0})
    j = _judge().judge([own, task], ["3", "3"])
    np.testing.assert_array_equal(j.rewards, [3.0, 1.0])
    assert j.reward_config_hashes[0] != j.reward_config_hashes[1]


def test_reward_cache_serves_repeats():
    cfg = reward_config_from(tiny_config())
    calls = []

    class Counting(Exact):
        def verify(self, task, output):
            calls.append(output)
            return super().verify(task, output)

    judge = Judge(Counting(), cfg, executor="inline", cache=True)
    task = Tasks().all[2]
    judge.judge([task] * 2, ["2", "5"])
    judge.judge([task] * 2, ["2", "5"])
    assert calls == ["2", "5"]
    assert judge.pool.stats()["cache_hits"] == 2


def test_evaluation_excludes_env_error_samples_and_reports_the_valid_rate():
    answers = {0: "0", 1: "down", 2: "x", 3: "down"}
    engine = ScriptedEngine(_judge(), lambda t, i: answers[i])
    ev = Evaluator(engine, Tasks().all[:3], samples_per_task=4, sampling=SamplingParams(),
                   pass_k=(1, 2), seed=0)
    m = ev.evaluate(None)
    assert m["eval/valid_rate"] == 0.5
    # task 0: the valid samples are "0" (pass) and "x" (fail): success over valid samples only
    np.testing.assert_allclose(m["eval/success"], 1 / 6)
    assert m["eval/env_error_rate"] == 0.5
    np.testing.assert_allclose(m["eval/pass@2"], 1 / 3)  # over the 2 valid samples per task
    assert {k: v for k, v in m.items() if k.startswith("eval/stop/")} == {"eval/stop/eos_frac": 1.0}


def test_evaluation_reports_the_share_of_each_stop_reason():
    """A held-out set whose samples end in different ways: each reason's share over all samples."""
    engine = ScriptedEngine(_judge(), lambda t, i: "0")
    reasons = ["eos", "max_turns", "max_length", "max_turns"] * 3

    def run(*a, **k):
        got = ScriptedEngine.run(engine, *a, **k)
        samples = [dataclasses.replace(x, stop_reason=r) for x, r in zip(got.samples, reasons)]
        return dataclasses.replace(got, samples=samples)

    engine.run = run
    m = Evaluator(engine, Tasks().all[:3], samples_per_task=4, sampling=SamplingParams(),
                  pass_k=(1,), seed=0).evaluate(None)
    assert {k: v for k, v in m.items() if k.startswith("eval/stop/")} == {
        "eval/stop/eos_frac": 0.25, "eval/stop/max_length_frac": 0.25, "eval/stop/max_turns_frac": 0.5}


def _record_sampler_calls(monkeypatch, module) -> list:
    """Replaces `module.sample` by a spy; returns the list it fills with (prompt shape, num_samples)."""
    calls, real = [], module.sample

    def spy(model, prompt_tokens, *args, **kw):
        calls.append((np.shape(prompt_tokens), kw.get("num_samples", 1)))
        return real(model, prompt_tokens, *args, **kw)

    monkeypatch.setattr(module, "sample", spy)
    return calls


def _tiny_model(tok):
    from flax import nnx

    from rlvr.models import ModelConfig, Transformer

    return Transformer(ModelConfig(vocab_size=tok.vocab_size, hidden_size=16, intermediate_size=32,
                                   num_layers=1, num_heads=2, num_kv_heads=2, head_dim=8),
                       rngs=nnx.Rngs(0))


def _text_engine():
    """(tokenizer, tiny model, three digit tasks of prompt lengths 1, 3, 2, sampling, a
    TextEngine over them with prompt_len 8 and prompt_bucket 4)."""
    from rlvr.models.tokenizer import CharTokenizer
    from rlvr.train.collectors import TextEngine

    tok = CharTokenizer("0123456789")
    model = _tiny_model(tok)
    tasks = [TaskSpec(task_id=f"t{i}", prompt=p, task_type="text", reference_answer=i)
             for i, p in enumerate(["7", "123", "98"])]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=5, stop_token_ids=(tok.eos_id,))
    engine = TextEngine(model_of=lambda params: model, tokenizer=tok, judge=_judge(), prompt_len=8,
                        prompt_bucket=4)
    return tok, model, tasks, sampling, engine


def test_text_engine_prefills_each_task_once_and_keeps_the_repeated_rows(monkeypatch):
    """TextEngine.run passes the sampler one prompt per task with num_samples = G, and returns
    the rows, masks, texts and costs of sampling every task's prompt G times, group-major."""
    import jax

    from rlvr.rollout.sampler import pad_prompts, sample
    from rlvr.train import collectors

    calls = _record_sampler_calls(monkeypatch, collectors)
    tok, model, tasks, sampling, engine = _text_engine()
    g = 3
    got = engine.run(None, tasks, g, jax.random.key(3), sampling, policy_version=7)
    assert calls == [((3, 4), g)]  # 3 unique prompts padded to the bucket 4, G samples each

    ids = [[tok.bos_id] + tok.encode(t.prompt) for t in tasks for _ in range(g)]
    toks, mask = pad_prompts(ids, tok.pad_id, bucket=(4, 8))
    ref = jax.device_get(sample(model, toks, mask, jax.random.key(3), sampling, pad_id=tok.pad_id))
    b = got.batch
    np.testing.assert_array_equal(np.asarray(b.tokens), np.asarray(ref.tokens))
    np.testing.assert_array_equal(np.asarray(b.attention_mask), np.asarray(ref.attention_mask))
    np.testing.assert_array_equal(np.asarray(b.loss_mask), np.asarray(ref.loss_mask))
    np.testing.assert_allclose(np.asarray(b.behavior_logprobs), np.asarray(ref.behavior_logprobs),
                               atol=1e-5)
    assert [t.task_id for t in got.tasks] == [t.task_id for t in tasks for _ in range(g)]
    texts = [tok.decode(c) for c in ref.completions(toks.shape[1])]
    assert [s.text for s in got.samples] == texts
    assert [s.stop_reason for s in got.samples] == ["max_length" if x else "eos" for x in ref.truncated]
    assert got.group_size == g
    # conditioned on G × each prompt, prefilled once per prompt
    assert got.cost == RolloutCost(len(ids), int(np.asarray(ref.lengths).sum()),
                                   sum(map(len, ids)), sum(map(len, ids[::g])))
    assert got.cost.prompt_tokens == g * got.cost.prefill_tokens


def test_turn_engine_prefills_each_pivot_state_once_and_keeps_the_repeated_rows(monkeypatch):
    """TurnEngine.run with groups of K copies of one prefix passes the sampler each prefix once
    with num_samples = K, and returns the rows, masks, texts and costs of sampling every prefix K
    times; rows that are not such groups are sampled one per row."""
    import jax

    from rlvr.models.tokenizer import CharTokenizer
    from rlvr.rollout import sampler as sampler_module
    from rlvr.rollout.agent_loop import sample_turn
    from rlvr.train.collectors import TurnEngine

    calls = _record_sampler_calls(monkeypatch, sampler_module)
    tok = CharTokenizer("0123456789\n")
    model = _tiny_model(tok)
    states = [[tok.bos_id] + tok.encode(p) for p in ("7\n", "123\n45", "98")]
    k = 4
    prefixes = [s for s in states for _ in range(k)]
    tasks = [TaskSpec(task_id=f"t{i // k}", prompt="", task_type="text", reference_answer=i % 3)
             for i in range(len(prefixes))]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=5)
    engine = TurnEngine(model_of=lambda params: model, tokenizer=tok, judge=_judge(),
                        terminator="\n", max_tokens=16, prompt_bucket=4)
    keys = jax.random.split(jax.random.key(3), len(prefixes))
    got = engine.run(None, prefixes, tasks, keys, sampling, policy_version=2, group_size=k)
    # 3 prefixes (padded to 4 rows, the power-of-two batch bucket; longest 7 -> 8), K samples each
    assert calls == [((4, 8), k)]

    calls.clear()
    ref = sample_turn(model, prefixes, keys, engine.sampling(sampling), tokenizer=tok,
                      terminator_id=engine.terminator_id, prompt_bucket=4, max_prompt_len=11)
    assert calls == [((12, 8), 1)]
    b = got.batch
    np.testing.assert_array_equal(np.asarray(b.tokens), ref.tokens)
    np.testing.assert_array_equal(np.asarray(b.attention_mask), ref.attention_mask)
    np.testing.assert_array_equal(np.asarray(b.loss_mask), ref.loss_mask)
    np.testing.assert_allclose(np.asarray(b.behavior_logprobs), ref.behavior_logprobs, atol=1e-5)
    assert [s.text for s in got.samples] == list(ref.texts)
    n_prompt = sum(map(len, prefixes))
    assert got.cost == RolloutCost(len(prefixes), sum(map(len, ref.action_ids)), n_prompt,
                                   sum(map(len, states)))
    assert got.cost.prompt_tokens == k * got.cost.prefill_tokens

    # not groups of one prefix: one row each, every prefix prefilled
    calls.clear()
    mixed = prefixes[1:] + prefixes[:1]
    got = engine.run(None, mixed, tasks, keys, sampling, policy_version=2, group_size=k)
    assert calls == [((16, 8), 1)]
    assert got.cost.prefill_tokens == got.cost.prompt_tokens == n_prompt


def test_text_engine_run_units_splits_one_batch_into_groups_with_their_own_costs():
    """TextEngine.run_units: the rows of `run` with the same keys, one Collected per task, each
    costing its own group (G turns, its generated tokens, G × its prompt, its prompt once)."""
    import jax

    tok, model, tasks, sampling, engine = _text_engine()
    g = 2
    whole = engine.run(None, tasks, g, jax.random.key(3), sampling, policy_version=7)
    parts = engine.run_units(None, tasks, g, jax.random.key(3), sampling, policy_version=7)
    assert [p.batch.batch_size for p in parts] == [g] * len(tasks)
    joined = Collected.concatenate(parts)
    np.testing.assert_array_equal(np.asarray(joined.batch.tokens), np.asarray(whole.batch.tokens))
    assert [s.text for s in joined.samples] == [s.text for s in whole.samples]
    assert sum((p.cost for p in parts), RolloutCost()) == whole.cost
    for p, t in zip(parts, tasks):
        n = 1 + len(t.prompt)  # [bos] + prompt
        assert [x.task_id for x in p.tasks] == [t.task_id] * g
        assert p.cost == RolloutCost(g, int(np.asarray(p.batch.loss_mask).sum()), g * n, n)


def test_episode_engine_run_units_costs_each_group_and_sum_to_the_batch(tmp_path):
    """EpisodeEngine.run_units: the episodes of `run` with the same keys, one Collected per task
    judged on its own; each group's cost counts its own turns, generated and prompt-side tokens,
    and the groups' costs sum to the batch's."""
    import jax

    from rlvr.rollout.sampler import per_sample_keys

    from rlvr.train.config import validate_config
    from rlvr.train.setup import build_run
    from tests.train.tiny import tiny_agent_config

    c = validate_config(tiny_agent_config("agent_grpo", rollout__asynchronous=False))
    r = build_run(c, str(tmp_path))
    try:
        col = r.collector
        g, tasks = 2, col.sampler.draw(0, 3)
        keys = per_sample_keys(jax.random.key(5), g * len(tasks))
        whole = col.engine.run(r.init_params, tasks, g, keys, col.sampling, 4)
        parts = col.engine.run_units(r.init_params, tasks, g, keys, col.sampling, 4)
    finally:
        r.close()
    joined = Collected.concatenate(parts)
    np.testing.assert_array_equal(np.asarray(joined.batch.tokens), np.asarray(whole.batch.tokens))
    np.testing.assert_array_equal(np.asarray(joined.batch.rewards), np.asarray(whole.batch.rewards))
    assert sum((p.cost for p in parts), RolloutCost()) == whole.cost
    assert whole.cost.turns > len(tasks) * g  # multi-turn episodes
    for p in parts:
        assert p.cost.turns == sum(s.num_turns for s in p.samples)
        assert p.cost.sampled_tokens == int(np.asarray(p.batch.loss_mask).sum())
        assert p.cost.prompt_tokens >= p.cost.prefill_tokens > 0
