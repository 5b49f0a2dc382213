"""The kv_tools kit: episodes through the training loop's agent loop in the chat template's
format (token by token), malformed calls counted, trajectory files checked by replay, turn
verifiers, config checks."""
import json

import numpy as np
import pytest

from rlvr.agents import chat, kv_tools
from rlvr.tasks.kit import get_kit
from rlvr.tasks.tool_agent import SHIPPED_TRAJECTORIES, ToolChatEnv, trajectory_tasks


@pytest.fixture(scope="module")
def hf_tokenizer(tmp_path_factory):
    from rlvr.models.tokenizer import HFTokenizer
    from rlvr.testing import build_tokenizer

    path = str(tmp_path_factory.mktemp("tools-tok"))
    build_tokenizer(path, vocab_size=512, tools=True)
    return HFTokenizer(path)


@pytest.fixture(scope="module")
def kit(hf_tokenizer):
    return get_kit("kv_tools").bind_tokenizer(hf_tokenizer.tok)


def scripted(actions_per_episode):
    """A scripted policy for `run_episodes`: episode i's turn t writes actions[i][t]."""
    from rlvr.rollout.agent_loop import turn_samples_from_texts

    calls = {"turn": 0}

    def policy(prefixes, keys, sampling, *, tokenizer, terminator_id, prompt_bucket):
        t = calls["turn"]
        calls["turn"] += 1
        texts = [actions_per_episode[i][t] for i in range(len(prefixes))]
        return turn_samples_from_texts(prefixes, texts, tokenizer=tokenizer,
                                       terminator_id=terminator_id,
                                       max_new_tokens=sampling.max_new_tokens,
                                       prompt_bucket=prompt_bucket)
    return policy


def run(kit, tokenizer, task, actions, max_turns=6):
    import jax

    from rlvr.rollout.agent_loop import EpisodeStart, run_episodes
    from rlvr.rollout.sampler import SamplingParams

    out = run_episodes(None, [EpisodeStart(task, tuple(tokenizer.encode(task.prompt)))],
                       kit.env_factory, jax.random.key(0), tokenizer=tokenizer,
                       sampling=SamplingParams(max_new_tokens=64),
                       terminator=kit.action_terminator, max_turns=max_turns, max_tokens=2048,
                       policy=scripted([actions]))
    return out.episodes[0]


def test_episode_stream_is_the_templates_render_and_loss_falls_on_assistant_tokens(kit, hf_tokenizer):
    tok = hf_tokenizer
    task = kit.source.sample(1, seed=3)[0]
    demo = kit.demonstration(task)
    turns = demo[:-1]  # the closing reply follows the finishing `answer` call: not rolled out
    actions = [t.action[:-len(kit.action_terminator)] for t in turns]  # the terminator: sampled
    e = run(kit, tok, task, actions)
    assert e.stop_reason == "eos" and e.num_turns == len(turns)
    verdict = kit.verifier.verify(task, kit.episode_output(e.env))
    assert verdict.decision == "pass" and verdict.components["malformed_calls"] == 0
    # the whole stream is the template's render of the conversation the environment recorded
    msgs = e.env.state()["messages"]
    assert [m["role"] for m in msgs].count("assistant") == len(turns)
    full = chat.render_with_mask(tok.tok, msgs, kv_tools.TOOLSET.specs())
    assert list(e.tokens) == full.ids.tolist()
    # loss on exactly the assistant-generated tokens (through each turn's <|im_end|>)
    assert list(np.asarray(e.loss_mask, np.int32)) == full.assistant_mask.tolist()
    # and the demonstration text starts with the same stream (the PivotRL / SFT prefixes match
    # rollouts), then reopens the conversation for the closing reply
    n = len(e.tokens)
    assert tok.encode(kit.render_episode(task, demo))[:n] == list(e.tokens)
    from rlvr.models.prompts import PromptRenderer
    from rlvr.train.sft import demo_stream

    ids, mask = demo_stream(kit, task, tok, PromptRenderer(tok))
    assert ids[:n] == list(e.tokens) and mask[:n] == list(e.loss_mask)
    assert sum(mask[n:]) == len(tok.encode(demo[-1].action))  # the reply's tokens train


def test_malformed_and_rejected_calls_are_observations_and_counted(kit, hf_tokenizer):
    task = kit.source.sample(1, seed=4)[0]
    actions = ['<tool_call>\n{"name": "get", "arguments": {"key": \n</tool_call>',
               '<tool_call>\n{"name": "launch", "arguments": {}}\n</tool_call>',
               '<tool_call>\n{"name": "get", "arguments": {"key": "z"}}\n</tool_call>',
               "I give up."]
    e = run(kit, hf_tokenizer, task, actions)
    assert e.num_turns == 4 and e.stop_reason == "eos" and e.env_error is None
    assert "malformed tool call" in e.observations[0]
    assert "unknown tool 'launch'" in e.observations[1]
    v = kit.verifier.verify(task, kit.episode_output(e.env))
    assert v.decision == "fail"
    assert v.components["malformed_calls"] == 1.0 and v.components["rejected_calls"] == 2.0


def test_trajectory_file_records_replay_or_are_named_and_left_out(tmp_path, capsys):
    lines = open(SHIPPED_TRAJECTORIES["kv_tools"]).read().splitlines()
    bad = json.loads(lines[1])
    tool = next(m for m in bad["messages"] if m["role"] == "tool")
    tool["content"] = tool["content"].replace('"value":', '"value":1')
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join([lines[0], json.dumps(bad)] + lines[2:]) + "\n")
    tasks = trajectory_tasks(str(path), kv_tools.ENVIRONMENT, "kv_tools")
    assert len(tasks) == len(lines) - 1
    err = capsys.readouterr().err
    assert "record 2, turn 2" in err and "record left out" in err
    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps(bad) + "\n")
    with pytest.raises(ValueError, match="no record replays consistently"):
        trajectory_tasks(str(one), kv_tools.ENVIRONMENT, "kv_tools")


def test_trajectory_tasks_demonstrate_the_recorded_turns(hf_tokenizer):
    kit = get_kit("kv_tools").bind_tokenizer(hf_tokenizer.tok,
                                              trajectories=SHIPPED_TRAJECTORIES["kv_tools"])
    task = kit.source.sample(1, seed=0)[0]
    turns = kit.demonstration(task)
    recorded = [m for m in task.public_metadata["demo"] if m.get("tool_calls")]
    # the answer call ends the episode; the closing reply after it is a turn too
    assert len(turns) == len(recorded) + 1
    assert '"name": "answer"' in turns[-2].action and "The answer is" in turns[-1].action
    # every turn's state is the replayed one: restoring it gives the same hash
    env = kit.env_factory()
    env.restore(turns[1].state_before)
    first_key = recorded[0]["tool_calls"][0]["function"]["arguments"]["key"]
    assert env.state()["tools"]["read"] == [first_key]


@pytest.mark.parametrize("mode,expected", [("functional", "pass"), ("exact", "fail")])
def test_turn_verifier_functional_accepts_coerced_arguments_exact_does_not(kit, mode, expected):
    from rlvr.tasks.kit import turn_task

    task = kit.source.sample(1, seed=5)[0]
    turns = kit.demonstration(task)
    last = turns[-2]  # answer(value=<goal>) (the closing reply follows it)
    goal = last.state_before.state()["tools"]["goal"]
    t = turn_task(task, snapshot=last.state_before, turn_index=len(turns) - 2,
                  reference_action=last.action, key="k")
    same = f'<tool_call>\n{{"name": "answer", "arguments": {{"value": "{goal}"}}}}\n</tool_call>'
    assert kit.turn_verifiers[mode].verify(t, same).decision == expected
    wrong = f'<tool_call>\n{{"name": "answer", "arguments": {{"value": {goal + 1}}}}}\n</tool_call>'
    assert kit.turn_verifiers[mode].verify(t, wrong).decision == "fail"
    assert kit.turn_verifiers[mode].verify(t, "no call").decision == "fail"
    bad = kit.turn_verifiers[mode].verify(t, '<tool_call>\n{"name": "answer", \n</tool_call>')
    assert bad.decision == "fail" and bad.components["malformed_calls"] == 1.0
    assert kit.turn_verifiers[mode].verify(t, same).components["malformed_calls"] == 0.0


def test_environment_refuses_to_run_unbound():
    env = get_kit("kv_tools").env_factory()
    assert isinstance(env, ToolChatEnv)
    with pytest.raises(RuntimeError, match="not bound to a tokenizer"):
        env.reset(get_kit("kv_tools").source.sample(1, 0)[0], seed=0)


def test_config_checks_name_the_field_and_the_allowed_values():
    from configs import agent_tools_grpo, quickstart
    from rlvr.train.config import ConfigError, check_applicability, validate_config

    c = agent_tools_grpo.get_config()
    c.agent.tool_format = "xml"
    with pytest.raises(ConfigError, match=r"agent.tool_format.*auto.*hermes.*llama3"):
        validate_config(c)
    q = quickstart.get_config()
    q.agent.tool_format = "hermes"
    assert any("agent.tool_format" in e and "no tool kit" in e for e in check_applicability(q))


def test_char_tokenizer_or_no_template_is_a_config_error(tmp_path):
    from configs import agent_tools_grpo
    from rlvr.testing import build_tokenizer
    from rlvr.train.config import ConfigError
    from rlvr.train.setup import bind_kit, build_kit_checked, build_tokenizer as tokenizer_of

    c = agent_tools_grpo.get_config()
    c.tokenizer.kind = "char"
    kit = build_kit_checked(c)
    with pytest.raises(ConfigError, match="tokenizer.kind='hf'"):
        tokenizer_of(c, kit)
    build_tokenizer(str(tmp_path), vocab_size=300)  # the plain template: no tools
    c.tokenizer.kind, c.tokenizer.path = "hf", str(tmp_path)
    with pytest.raises(ConfigError, match="does not use `tools`"):
        bind_kit(c, kit, tokenizer_of(c, kit))


def test_a_missing_trajectories_file_is_a_config_error_naming_the_field(hf_tokenizer):
    from configs import agent_tools_grpo
    from rlvr.train.config import ConfigError
    from rlvr.train.setup import bind_kit, build_kit_checked

    c = agent_tools_grpo.get_config()
    c.agent.trajectories = "/nonexistent/trajectories.jsonl"
    with pytest.raises(ConfigError, match=r"agent.trajectories=.*does not exist"):
        bind_kit(c, build_kit_checked(c), hf_tokenizer)


def _counter_environment():
    from rlvr.agents.tools import Tool, ToolEnvironment, ToolSet

    def inc(state, by: int):
        state["n"] += by
        return {"n": state["n"]}

    def submit(state):
        state["done"] = True
        return "submitted"

    tools = ToolSet((
        Tool("inc", "Add to the counter.", {"type": "object", "properties": {
            "by": {"type": "integer"}}, "required": ["by"]}, inc),
        Tool("submit", "Submit the counter.", {"type": "object", "properties": {}}, submit)))
    return ToolEnvironment("counter_tools", tools,
                           reset=lambda snap: {"n": 0, "target": snap["target"], "done": False},
                           outcome=lambda st: st["done"] and st["n"] == st["target"])


def _counter_record(target, steps):
    msgs = [{"role": "user", "content": f"Bring the counter to {target}, then submit."}]
    for i, by in enumerate(steps + [None]):
        call = ({"name": "inc", "arguments": json.dumps({"by": by})} if by is not None
                else {"name": "submit", "arguments": "{}"})
        msgs.append({"role": "assistant", "content": "",
                     "tool_calls": [{"id": f"c{i}", "type": "function", "function": call}]})
        n = sum(steps[:i + 1])
        msgs.append({"role": "tool", "tool_call_id": f"c{i}",
                     "content": json.dumps({"n": n}, separators=(",", ":")) if by is not None
                     else "submitted"})
    return {"messages": msgs, "snapshot": {"target": target}}


def test_a_users_tool_kit_trains_on_its_trajectories_file(tmp_path, hf_tokenizer):
    from rlvr.tasks.tool_agent import TOOL_KITS, register_tool_kit

    register_tool_kit("counter_tools", _counter_environment())
    assert "counter_tools" in TOOL_KITS
    path = tmp_path / "counter.jsonl"
    path.write_text("".join(json.dumps(_counter_record(t, s)) + "\n"
                            for t, s in ((5, [2, 3]), (4, [4]))))
    unbound = get_kit("counter_tools")
    with pytest.raises(ValueError, match="no task generator: set agent.trajectories"):
        unbound.bind_tokenizer(hf_tokenizer.tok)
    kit = unbound.bind_tokenizer(hf_tokenizer.tok, trajectories=str(path))
    assert len(kit.source.tasks) == 2 and len(kit.source.heldout(3, 0)) == 3
    task = next(t for t in kit.source.tasks if t.environment_snapshot["target"] == 5)
    assert "Bring the counter to 5" in task.prompt and '"name": "inc"' in task.prompt
    turns = kit.demonstration(task)
    assert len(turns) == 3  # inc, inc, submit (submit sets done)
    e = run(kit, hf_tokenizer, task, [t.action[:-len(kit.action_terminator)] for t in turns])
    assert kit.verifier.verify(task, kit.episode_output(e.env)).decision == "pass"
    wrong = run(kit, hf_tokenizer, task, [t.action[:-len(kit.action_terminator)]
                                          for t in turns[1:]])  # skips inc(2)
    assert kit.verifier.verify(task, kit.episode_output(wrong.env)).decision == "fail"


def test_shop_tools_demonstration_succeeds_and_a_wrong_payment_fails(hf_tokenizer):
    kit = get_kit("shop_tools").bind_tokenizer(hf_tokenizer.tok)
    task = kit.source.sample(1, seed=1)[0]
    turns = kit.demonstration(task)
    assert '"name": "pay"' in turns[-1].action  # paying ends the checkout
    actions = [t.action[:-len(kit.action_terminator)] for t in turns]
    e = run(kit, hf_tokenizer, task, actions, max_turns=len(actions))
    assert e.num_turns == len(actions) and e.stop_reason == "eos"
    assert kit.verifier.verify(task, kit.episode_output(e.env)).decision == "pass"
    total = task.environment_snapshot["state"]["total"]
    actions[-1] = actions[-1].replace(f'"amount": {total}', f'"amount": {total + 1}')
    e = run(kit, hf_tokenizer, task, actions, max_turns=len(actions))
    assert kit.verifier.verify(task, kit.episode_output(e.env)).decision == "fail"


def test_a_template_that_rewrites_earlier_turns_is_refused_at_start(hf_tokenizer):
    import copy

    from rlvr.agents import qwen_tools_template

    tok = copy.deepcopy(hf_tokenizer.tok)
    # drops assistant turns that are followed by tool results (as templates that strip earlier
    # reasoning do): the render after a turn is no longer a prefix of the next one
    tok.chat_template = qwen_tools_template().replace(
        "{%- elif message.role == 'assistant' %}",
        "{%- elif message.role == 'assistant' and loop.last %}").replace(
        "(message.role == 'assistant' and not message.tool_calls)",
        "(message.role == 'assistant' and not message.tool_calls and loop.last)")
    with pytest.raises(chat.TemplatePrefixError, match="cannot run tool episodes turn by turn"):
        get_kit("kv_tools").bind_tokenizer(tok)


def test_kv_task_message_ends_in_exactly_one_question_mark_and_the_shipped_file_is_generated(tmp_path):
    from rlvr.envs import kv_store

    for registers, query, max_turns in kv_tools.SHIPPED_TASKS:
        msg = kv_tools.task_message(kv_store.initial_state(registers, query, max_turns))
        assert msg.endswith("?") and msg.count("?") == 1 and not msg.endswith(" ?"), msg
    # the shipped file is the generator's output, byte for byte
    out = tmp_path / "kv.jsonl"
    kv_tools.write_trajectories(str(out))
    assert out.read_text() == open(SHIPPED_TRAJECTORIES["kv_tools"]).read()


@pytest.mark.parametrize("configured", ["", "Be brief."])
def test_system_prompt_applies_to_file_records_and_generated_tasks_alike(hf_tokenizer, configured):
    base = get_kit("kv_tools")
    from_file = base.bind_tokenizer(hf_tokenizer.tok, system_prompt=configured,
                                    trajectories=SHIPPED_TRAJECTORIES["kv_tools"])
    generated = base.bind_tokenizer(hf_tokenizer.tok, system_prompt=configured)
    rec = from_file.source.sample(1, seed=0)[0]
    gen = generated.source.sample(1, seed=0)[0]
    systems = [[m["content"] for m in t.public_metadata["messages"] if m["role"] == "system"]
               for t in (rec, gen)]
    if configured:  # the configured prompt replaces the record's own system message
        assert systems == [[configured], [configured]]
        assert kv_tools.SYSTEM_PROMPT not in rec.prompt and configured in rec.prompt
    else:  # the record's own, as recorded; generated tasks: the environment's
        assert systems == [[kv_tools.SYSTEM_PROMPT], [kv_tools.SYSTEM_PROMPT]]
    # a record without a system message gets the configured one inserted
    b = from_file.source.tasks[0]
    bare = [{"role": "user", "content": "What is a?"}]
    from rlvr.tasks.tool_agent import bind
    binding = bind(hf_tokenizer.tok, kv_tools.ENVIRONMENT, system_prompt=configured)
    assert binding.recorded_start(bare) == (
        [{"role": "system", "content": configured}] + bare if configured else bare)
    assert b.public_metadata["messages"][-1]["role"] == "user"


def test_the_closing_reply_is_a_pivot_candidate_judged_as_a_reply(hf_tokenizer):
    from rlvr.models.prompts import PromptRenderer
    from rlvr.train.pivots import demo_candidates
    from rlvr.train.sft import demo_stream

    kit = get_kit("kv_tools").bind_tokenizer(hf_tokenizer.tok,
                                              trajectories=SHIPPED_TRAJECTORIES["kv_tools"])
    task = kit.source.tasks[0]
    goal = task.environment_snapshot["state"]["goal"]
    cands = demo_candidates([task], tokenizer=hf_tokenizer, demonstrations=kit.demonstration,
                            render_episode=kit.render_episode)
    reply = cands[-1]
    assert len(cands) == len(task.public_metadata["demo"])  # every assistant turn, reply too
    assert reply.reference_action.startswith(f"The answer is {goal}.")
    # its prefix is the conversation reopened for the next assistant turn
    assert hf_tokenizer.tok.decode(list(reply.prefix_tokens)).endswith("<|im_start|>assistant\n")
    judge = {m: kit.turn_verifiers[m] for m in ("functional", "exact")}
    eot = kit.action_terminator
    v = lambda mode, text: judge[mode].verify(reply.turn_task, text + eot).components["correct"]  # noqa: E731
    assert v("functional", f"The answer is {goal}.") == 1.0
    assert v("functional", f"It is {goal}") == 1.0  # states the value
    assert v("functional", f"The answer is {goal + 1}.") == 0.0  # a wrong reply
    assert v("functional", "") == 0.0
    call = '<tool_call>\n{"name": "get", "arguments": {"key": "a"}}\n</tool_call>'
    assert v("functional", call) == 0.0  # a call where the reference replies
    assert v("exact", f"The answer is {goal}.") == 1.0
    assert v("exact", f"It is {goal}") == 0.0  # the ablation wants the recorded text
    # SFT trains it: the reply's tokens carry loss
    ids, mask = demo_stream(kit, task, hf_tokenizer, PromptRenderer(hf_tokenizer))
    a = hf_tokenizer.encode(reply.reference_action)
    start = next(i for i in range(len(ids) - len(a), -1, -1) if ids[i:i + len(a)] == a)
    assert all(m == 1.0 for m in mask[start:start + len(a)])


def test_mixtures_of_multi_turn_kits_route_each_task_to_its_kit_and_bad_mixes_are_refused(hf_tokenizer):
    from rlvr.tasks.kit import build_kit

    kit = build_kit(["kv_tools", "shop_tools"], [1.0, 1.0]).bind_tokenizer(hf_tokenizer.tok)
    tasks = kit.source.sample(8, seed=0)
    assert {t.public_metadata["kit"] for t in tasks} == {"kv_tools", "shop_tools"}
    for t in tasks[:4]:  # each task: its own kit's environment, demonstration and verifier
        own = get_kit(t.public_metadata["kit"]).bind_tokenizer(hf_tokenizer.tok)
        turns = kit.demonstration(t)
        env = kit.env_factory()
        env.reset(t, seed=0)
        for turn in turns[:-1] if t.public_metadata["kit"] == "kv_tools" else turns:
            env.step(turn.action)
        assert env.name == t.public_metadata["kit"]
        assert kit.verifier.verify(t, kit.episode_output(env)).decision == "pass"
        assert kit.verifier.verify(t, kit.episode_output(env)) == own.verifier.verify(
            t, own.episode_output(env))
    with pytest.raises(ValueError, match=r"task.names \('kv_tools', 'arithmetic'\).*not both"):
        build_kit(["kv_tools", "arithmetic"], [1.0, 1.0])
    with pytest.raises(ValueError, match="same terminator"):
        build_kit(["kv_tools", "kv_agent"], [1.0, 1.0], {"difficulty": "easy"})
    with pytest.raises(ValueError, match="trajectories file holds the records of one tool kit"):
        build_kit(["kv_tools", "shop_tools"], [1.0, 1.0]).bind_tokenizer(
            hf_tokenizer.tok, trajectories=SHIPPED_TRAJECTORIES["kv_tools"])


def _kv_task_file(path, lines):
    from rlvr.envs import kv_store

    recs = []
    for i, (registers, query, max_turns) in enumerate(kv_tools.SHIPPED_TASKS[:4]):
        state = kv_store.initial_state(registers, query, max_turns)
        recs.append({"snapshot": kv_store.make_task_snapshot(state),
                     "split": "eval" if i == 3 else "train"})
    recs[1]["user"] = "Sum e and c, please."
    path.write_text("".join(json.dumps(r) + "\n" for r in recs) + "".join(lines))
    return recs


def test_tool_tasks_from_a_file_and_bad_lines_named(tmp_path, hf_tokenizer):
    from rlvr.tasks.loader import TaskFileError

    path = tmp_path / "kv_tasks.jsonl"
    recs = _kv_task_file(path, [])
    kit = get_kit(f"kv_tools:{path}").bind_tokenizer(hf_tokenizer.tok)
    assert len(kit.source.inner.train) == 3 and len(kit.source.inner.held) == 1
    held = kit.source.heldout(2, 0)
    assert [t.environment_snapshot for t in held] == [recs[3]["snapshot"]] * 2
    task = next(t for t in kit.source.sample(20, 0) if t.public_metadata["record"] == 2)
    assert "Sum e and c, please." in task.prompt  # the record's own message
    other = next(t for t in kit.source.sample(20, 0) if t.public_metadata["record"] == 1)
    assert kv_tools.task_message(recs[0]["snapshot"]["state"]) in other.prompt  # derived
    turns = kit.demonstration(other)  # the oracle works from the file's snapshot
    e = run(kit, hf_tokenizer, other, [t.action[:-len(kit.action_terminator)] for t in turns[:-1]])
    assert kit.verifier.verify(other, kit.episode_output(e.env)).decision == "pass"
    bad = tmp_path / "bad.jsonl"
    state = dict(recs[0]["snapshot"]["state"], goal="nine")
    _kv_task_file(bad, ["not json\n", json.dumps({"user": "x"}) + "\n",
                        json.dumps({"snapshot": {"state": state}}) + "\n",
                        json.dumps({"snapshot": recs[0]["snapshot"], "split": "test"}) + "\n"])
    with pytest.raises(TaskFileError) as err:
        get_kit(f"kv_tools:{bad}")
    msg = str(err.value)
    assert "4 bad line(s) [5, 6, 7, 8]" in msg
    assert "line 6: snapshot: required" in msg and "line 8: split: must be one of" in msg
    assert "line 7: snapshot: the environment's reset refuses it" in msg
