"""Tool-environment task kits: multi-turn agent tasks in a checkpoint's own chat format.

A tool kit (`kv_tools`: the key-value environment's tools `get` / `delete` / `answer`;
`shop_tools`: the checkout's `get_price` / `add_to_cart` / `pay`) runs its
episodes through the training loop's agent loop (`rlvr.rollout.agent_loop`) with the
conversation rendered by the tokenizer's chat template:

  * the prompt is the template's render of [system, user task] with the environment's tools
    (`apply_chat_template(messages, tools=..., add_generation_prompt=True)`);
  * an action is one assistant turn, ended by the template's end-of-turn token (the action
    terminator, e.g. `<|im_end|>`); its tool calls are parsed in the model's own format
    (`rlvr.agents.parsers`: "hermes" or "llama3", chosen by `agent.tool_format`, "auto" reads the
    template);
  * the observation appended after a turn is exactly the template text between the render of
    the conversation closed after that turn and the render with the `tool` messages and the
    next generation prompt (the prefix property is checked; a template that rewrites earlier
    turns is refused with `rlvr.agents.chat.TemplatePrefixError`);
  * a malformed call (bad JSON, unknown tool, arguments that violate the schema, an error the
    tool raises) becomes an error `tool` message the agent sees and is counted in the final
    state (`counts`), reported per sample as the verdict components `malformed_calls` (parse
    errors) and `rejected_calls` (unknown tool / schema / tool error) — in metrics.jsonl as
    `reward/component_malformed_calls_mean` and `reward/component_rejected_calls_mean` (PivotRL's
    turn verifiers report `malformed_calls` of the turn);
  * a turn without tool calls ends the episode (the agent's reply), as does a tool that sets
    `done` in the state (the key-value `answer` tool);
  * the outcome verifier checks the environment's final tool state (`ToolEnvironment.outcome`);
  * the turn verifiers (PivotRL) compare a turn's calls with the demonstration's
    (`rlvr.agents.turn_verifier`: "functional" = same tool, equivalent arguments under the
    schema; "exact" = identical arguments); the closing text reply is a turn too, judged by the
    environment's `reply_check` ("functional") or the recorded text ("exact").

Tasks come from the kit's procedural generator (demonstrations by an oracle), from a task
file of environment snapshots (`task.names = ("<kit>:PATH",)`, `tool_task_file`) or, with
`agent.trajectories`, from a trajectories file (`rlvr.agents.trajectories`: JSONL / Parquet in
the OpenAI messages format); each record is a task whose demonstration is its recorded assistant
turns, replayed from its snapshot and checked against the recorded tool results (a mismatching
record is reported with its turn and excluded).

The kit needs the tokenizer to render, so `TaskKit.bind_tokenizer(tokenizer, **settings)`
returns the complete kit (`rlvr.train.setup` calls it once the tokenizer is loaded).
Host-side code.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import random
import sys
from typing import Any, Mapping, Optional, Sequence

from rlvr.agents import chat, parsers
from rlvr.agents import turn_verifier as tv
from rlvr.agents.tools import ToolCall, ToolEnvironment
from rlvr.envs.base import Environment, StepResult, Turn, derive_seed
from rlvr.records.task import TaskSpec
from rlvr.records.verdict import Verdict
from rlvr.verifiers.base import Verifier

TOOL_KITS = ["kv_tools", "shop_tools"]  # names of the registered tool kits (register_tool_kit adds to it)
TOOL_FORMATS = ("auto",) + parsers.FORMATS
COUNTS = ("calls", "malformed", "rejected")
SHIPPED_TRAJECTORIES = {"kv_tools": os.path.join(os.path.dirname(os.path.dirname(__file__)),
                                                 "agents", "data", "kv_trajectories.jsonl")}


# ------------------------------------------------------------------------------ rendering
@dataclasses.dataclass(frozen=True)
class ChatBinding:
    """What rendering needs: the `transformers` tokenizer (with a chat template), the tool
    environment, the tool-call format and the end-of-turn token's text."""
    tokenizer: Any
    env: ToolEnvironment
    fmt: str
    eot_text: str
    system_prompt: str = ""

    @property
    def tools(self) -> list[dict]:
        return self.env.toolset.specs()

    def render(self, messages, *, generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(chat.normalize_messages(messages),
                                                  tools=self.tools, tokenize=False,
                                                  add_generation_prompt=generation_prompt)

    def prompt(self, messages) -> str:
        """The prompt text of a conversation start (bos text dropped: the prompt renderer adds
        the bos token when the tokenizer has one)."""
        text = self.render(messages, generation_prompt=True)
        bos = getattr(self.tokenizer, "bos_token", None)
        if bos and text.startswith(bos):
            text = text[len(bos):]
        return text

    def start_messages(self, user: str) -> list[dict]:
        system = self.system_prompt or self.env.system_prompt
        return ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": user}]

    def recorded_start(self, messages) -> list[dict]:
        """The start messages of a recorded conversation (a trajectories record): with a
        configured system prompt (`tokenizer.system_prompt`) that prompt replaces the record's
        system message (or is inserted when the record has none), so that training and eval
        see one system prompt; without one, the record's messages as recorded."""
        msgs = [dict(m) for m in messages]
        if not self.system_prompt:
            return msgs
        rest = msgs[1:] if msgs and msgs[0].get("role") == "system" else msgs
        return [{"role": "system", "content": self.system_prompt}] + rest

    def strip_eot(self, text: str) -> str:
        text = text.rstrip()
        return text[:-len(self.eot_text)] if text.endswith(self.eot_text) else text


def bind(tokenizer, env: ToolEnvironment, tool_format: str = "auto",
         system_prompt: str = "") -> ChatBinding:
    """A ChatBinding; ValueError naming `agent.tool_format` / the template's problem."""
    if tool_format not in TOOL_FORMATS:
        raise ValueError(f"agent.tool_format must be one of {', '.join(TOOL_FORMATS)}; got "
                         f"{tool_format!r}")
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        raise ValueError("a tool kit renders episodes with the tokenizer's chat template, and "
                         "this tokenizer has none (tokenizer_config.json 'chat_template' or "
                         "chat_template.jinja)")
    if "tools" not in template:
        raise ValueError("the tokenizer's chat template does not use `tools`: a tool kit needs "
                         "a tool-aware template (e.g. rlvr/agents/templates/qwen_tools.jinja)")
    fmt = parsers.format_for_template(template, tool_format)
    eot = chat.end_of_turn_id(tokenizer)
    b = ChatBinding(tokenizer, env, fmt, tokenizer.convert_ids_to_tokens(eot), system_prompt)
    # the prefix property on a probe conversation, so that a template that rewrites earlier
    # turns is refused here rather than in the middle of a rollout
    msgs = [{"role": "user", "content": "probe"}, {"role": "assistant", "content": "a call"}]
    closed = b.render(msgs, generation_prompt=False)
    nxt = b.render(msgs + [{"role": "tool", "content": "a result"}], generation_prompt=True)
    if b.eot_text not in closed or not nxt.startswith(closed):
        raise chat.TemplatePrefixError(
            "the tokenizer's chat template cannot run tool episodes turn by turn: the render "
            "of a conversation closed after an assistant turn must end that turn with the "
            f"end-of-turn token {b.eot_text!r} and be a prefix of the render with the tool "
            "results")
    return b


# ---------------------------------------------------------------------------- environment
class ToolChatEnv(Environment):
    """A `ToolEnvironment` behind the agent loop's `Environment` protocol, in chat format.

    State (plain JSON): `tools` (the tool environment's state), `messages` (the conversation so
    far, assistant turns as the generated text) and `counts` (calls executed, malformed calls,
    rejected calls). `step(action)` takes one assistant turn's text.
    """

    version = "1"

    def __init__(self, binding: Optional[ChatBinding], env: ToolEnvironment):
        super().__init__()
        self.name = env.name
        self.binding, self.env = binding, env
        self._state: dict = {}
        self.done = False

    def reset(self, task: TaskSpec, *, seed: int) -> str:
        if self.binding is None:
            raise RuntimeError(f"task kit {self.env.name!r} is not bound to a tokenizer")
        self._seed = int(seed)
        self._state = {"tools": self.env.reset(task.environment_snapshot or {}),
                       "messages": copy.deepcopy(list(task.public_metadata["messages"])),
                       "counts": {k: 0 for k in COUNTS}}
        self.done = False
        return ""

    def step(self, action: str) -> StepResult:
        b = self.binding
        text = b.strip_eot(action)
        before = self._state["messages"]
        msgs = before + [{"role": "assistant", "content": text}]
        closed = b.render(msgs, generation_prompt=False)
        cut = closed.rfind(b.eot_text)
        tail = closed[cut + len(b.eot_text):] if cut >= 0 else ""
        turn = parsers.parse(text, b.fmt)
        counts = self._state["counts"]
        if not turn.calls and not turn.errors:
            self._state["messages"] = msgs
            self.done = True
            return StepResult(tail, True, {"stop_reason": "answer"})
        outs = parsers.execute_turn(self.env.toolset, self._state["tools"], turn)
        counts["calls"] += len(turn.calls)
        counts["malformed"] += len(turn.errors)
        counts["rejected"] += sum(1 for o in outs if not o.ok and o.error_kind != "parse")
        msgs = msgs + [{"role": "tool", "content": o.content} for o in outs]
        self._state["messages"] = msgs
        self.done = bool(self._state["tools"].get("done"))
        nxt = b.render(msgs, generation_prompt=not self.done)
        if not nxt.startswith(closed):
            raise chat.TemplatePrefixError(
                "chat template: the render of the conversation closed after the assistant turn "
                "is not a prefix of the render with the tool results; per-turn appends are "
                "impossible with this template")
        return StepResult(tail + nxt[len(closed):], self.done,
                          {"malformed": len(turn.errors)})

    def state(self) -> dict:
        return copy.deepcopy(self._state)

    def _load(self, state: dict, seed: int) -> None:
        self._state, self._seed = state, int(seed)
        self.done = bool(state.get("tools", {}).get("done"))


# ------------------------------------------------------------------------------ verifiers
class ToolOutcomeVerifier(Verifier):
    """Outcome of an episode: `ToolEnvironment.outcome` on the final tool state (the output is
    the canonical JSON of `ToolChatEnv.state()`). Components: correct, malformed_calls,
    rejected_calls, tool_calls (counts of the episode)."""

    version = "tool_outcome/1"

    def __init__(self, env: ToolEnvironment):
        self.env = env

    def _verify(self, task: TaskSpec, output: str) -> Verdict:
        state = json.loads(output)
        ok = bool(self.env.outcome(state["tools"]))
        counts = state.get("counts", {})
        return Verdict(decision="pass" if ok else "fail",
                       components={"correct": float(ok),
                                   "malformed_calls": float(counts.get("malformed", 0)),
                                   "rejected_calls": float(counts.get("rejected", 0)),
                                   "tool_calls": float(counts.get("calls", 0))},
                       evidence={"turns": sum(m["role"] == "assistant"
                                              for m in state.get("messages", ()))},
                       verifier_version=self.version)


class ToolTurnVerifier(Verifier):
    """PivotRL's turn reward on a turn task (`rlvr.tasks.kit.turn_task`): the turn's text
    against the demonstration's action (`reference_answer`, parsed in the same format) by
    `rlvr.agents.turn_verifier.verify_turn` in `mode`. A reference turn without tool calls
    (the closing reply) is judged as a reply: a turn with tool calls fails; "functional" asks
    the environment's `reply_check(state, text)` in the turn's tool state (the key-value kit:
    the reply states the query's value), or, without one, the recorded reply's text up to case
    and whitespace; "exact" asks for the recorded text. Components: correct, malformed_calls
    (the turn's calls that do not parse)."""

    def __init__(self, binding: Optional[ChatBinding], env: ToolEnvironment, mode: str):
        if mode not in tv.MODES:
            raise ValueError(f"turn verifier mode must be one of {', '.join(tv.MODES)}")
        self.binding, self.env, self.mode = binding, env, mode
        self.version = f"tool_turn_{mode}/1"

    def _reply_predicate(self, task: TaskSpec):
        """(reply text, recorded reply text) -> bool for a closing-reply turn (class docstring)."""
        if self.mode == "exact":
            return lambda got, want: got.strip() == want.strip()
        if self.env.reply_check is not None:
            from rlvr.tasks.kit import turn_snapshot  # noqa: PLC0415

            state = turn_snapshot(task).state()["tools"]
            return lambda got, want: self.env.reply_check(state, got)
        return lambda got, want: " ".join(got.lower().split()) == " ".join(want.lower().split())

    def _verify(self, task: TaskSpec, output: str) -> Verdict:
        if self.binding is None:
            raise RuntimeError(f"task kit {self.env.name!r} is not bound to a tokenizer")
        b = self.binding
        ref = parsers.parse(b.strip_eot(str(task.reference_answer or "")), b.fmt)
        if ref.errors:
            raise ValueError(f"the demonstration's action does not parse: {ref.errors[0].message}")
        target = {"content": ref.content,
                  "tool_calls": [c.to_message() for c in ref.calls]}
        for c in target["tool_calls"]:
            c["function"]["arguments"] = json.loads(c["function"]["arguments"])
        v = tv.verify_turn(b.strip_eot(output), target, self.env.toolset, b.fmt, mode=self.mode,
                           answer_predicate=self._reply_predicate(task))
        if v.status == "env_error":
            from rlvr.records.verdict import env_error  # noqa: PLC0415

            return env_error(v.reason, verifier_version=self.version)
        malformed = len(parsers.parse(b.strip_eot(output), b.fmt).errors)
        return Verdict(decision=v.status,
                       components={"correct": v.reward, "malformed_calls": float(malformed)},
                       evidence={"reason": v.reason}, verifier_version=self.version)


# --------------------------------------------------------------------------- demonstrations
def demonstration(binding: ChatBinding, env: ToolEnvironment, task: TaskSpec,
                  assistant: Sequence[Mapping[str, Any]]) -> list[Turn]:
    """The Turns of `task` whose assistant messages are `assistant` (OpenAI form, tool calls
    structured): each action is the template's render of that message (through its
    end-of-turn token), stepped through a `ToolChatEnv` from the task's start.

    The closing reply (an assistant message without tool calls) is a turn too, also after a
    tool that ends the episode (the key-value `answer`): the observation of the turn before it
    then ends with the template's generation prompt, so that the reply's prefix is the
    conversation as the template renders it for the next assistant turn (a PivotRL candidate
    state and an SFT target). Rollouts still end at that tool."""
    e = ToolChatEnv(binding, env)
    e.reset(task, seed=task.random_seed)
    turns = []
    for m in assistant:
        reply = not m.get("tool_calls")
        if e.done and not (reply and turns):
            break
        msgs = e._state["messages"]
        head = binding.render(msgs, generation_prompt=True)
        if e.done:  # the closing reply after a finishing tool: reopen the conversation
            closed = binding.render(msgs, generation_prompt=False)
            if not head.startswith(closed):
                raise chat.TemplatePrefixError("chat template: the generation prompt does not "
                                               "extend the rendered conversation")
            last = turns[-1]
            turns[-1] = dataclasses.replace(last, observation=last.observation
                                            + head[len(closed):])
        full = binding.render(msgs + [dict(m)], generation_prompt=False)
        if not full.startswith(head):
            raise chat.TemplatePrefixError("chat template: an assistant message's render does "
                                           "not extend the generation prompt")
        span = full[len(head):]
        cut = span.find(binding.eot_text)
        action = span[:cut + len(binding.eot_text)] if cut >= 0 else span
        before = e.snapshot()
        res = e.step(action)
        turns.append(Turn(action=action, observation=res.observation, state_before=before))
    return turns


def _state_of(task: TaskSpec) -> Mapping[str, Any]:
    """The initial state in a built-in kit's snapshot (the env's task snapshot or the bare
    state, as its `reset` takes)."""
    snap = task.environment_snapshot or {}
    return snap.get("state", snap)


def _kv_oracle(task: TaskSpec) -> list[dict]:
    from rlvr.agents import kv_tools  # noqa: PLC0415

    return kv_tools.oracle_messages(_state_of(task))


# ------------------------------------------------------------------------------- sources
@dataclasses.dataclass(frozen=True)
class ChatTasks:
    """Wraps a task source: every task's prompt becomes the chat template's render of its start
    messages (`public_metadata["messages"]`, kept for the environment)."""
    inner: Any
    binding: Optional[ChatBinding]
    user_message: Any  # task -> the user message (for tasks without start messages)

    @property
    def name(self) -> str:
        return self.inner.name

    def _chat(self, task: TaskSpec) -> TaskSpec:
        meta = dict(task.public_metadata)
        msgs = meta.get("messages")
        if msgs:
            msgs = self.binding.recorded_start(msgs) if self.binding else msgs
        else:
            user = meta.get("user")
            if user is None:
                user = self.user_message(task)
            msgs = (self.binding.start_messages(user) if self.binding else
                    [{"role": "user", "content": user}])
        meta["messages"] = msgs
        prompt = self.binding.prompt(msgs) if self.binding else task.prompt
        return dataclasses.replace(task, prompt=prompt, public_metadata=meta)

    def sample(self, n: int, seed) -> list[TaskSpec]:
        return [self._chat(t) for t in self.inner.sample(n, seed)]

    def eval_set(self, split: str = "eval", n=None, seed: int = 0) -> list[TaskSpec]:
        return [self._chat(t) for t in self.inner.eval_set(split, n, seed)]

    def heldout(self, n: int, seed: int) -> list[TaskSpec]:
        return [self._chat(t) for t in self.inner.heldout(n, seed)]


@dataclasses.dataclass(frozen=True)
class TrajectoryTasks:
    """Tasks from a trajectories file: one per consistent record (its snapshot, its messages
    before the first assistant turn, its assistant turns as the demonstration). `sample` draws
    records with replacement; `heldout` is the procedural `fallback` source's (the records
    are training data), or the records themselves without one."""
    name: str
    tasks: tuple
    fallback: Any = None

    def sample(self, n: int, seed) -> list[TaskSpec]:
        rng = random.Random(derive_seed("trajectory-tasks", self.name, seed))
        return [self.tasks[rng.randrange(len(self.tasks))] for _ in range(n)]

    def eval_set(self, split: str = "eval", n=None, seed: int = 0) -> list[TaskSpec]:
        if self.fallback is not None:
            return self.fallback.eval_set(split, n, seed)
        return list(self.tasks[:n or len(self.tasks)])

    def heldout(self, n: int, seed: int) -> list[TaskSpec]:
        if self.fallback is not None:
            return self.fallback.heldout(n, seed)
        return [self.tasks[i % len(self.tasks)] for i in range(n)]


def trajectory_tasks(path: str, env: ToolEnvironment, name: str) -> list[TaskSpec]:
    """The tasks of a trajectories file; records whose replay does not reproduce the recorded
    tool results are reported on stderr (record and turn) and left out. ValueError when no
    record is left."""
    from rlvr.agents import trajectories as tj  # noqa: PLC0415

    trajs = tj.load_trajectories(path)
    tasks, bad = [], []
    for t in trajs:
        mismatch, _ = tj.replay(t, env)
        if mismatch is not None:
            bad.append(mismatch)
            continue
        first = next((i for i, m in enumerate(t.messages) if m["role"] == "assistant"), None)
        if first is None:
            raise tj.TrajectoryFileError(f"{path}: record {t.record}: no assistant message")
        demo = [dict(m) for m in t.messages[first:] if m["role"] == "assistant"]
        tasks.append(TaskSpec(
            task_id=f"{name}-{os.path.basename(path)}-{t.record}", prompt="",
            task_type="agent", reference_answer=None,
            public_metadata={"messages": [dict(m) for m in t.messages[:first]], "demo": demo,
                             "record": t.record},
            hidden_verifier_id=None, environment_snapshot=dict(t.snapshot or {}),
            resource_limits={}, reward_config={}, random_seed=derive_seed(name, path, t.record)))
    for m in bad:
        print(f"{path}: record {m.record}, turn {m.turn}: replaying {m.call} gave "
              f"{m.replayed!r}, the record says {m.recorded!r}; record left out",
              file=sys.stderr)
    if not tasks:
        raise ValueError(f"trajectories file {path!r}: no record replays consistently")
    return tasks


# ---------------------------------------------------------------------------- task files
SPLITS = ("train", "eval")


@dataclasses.dataclass(frozen=True)
class FileTasks:
    """Tasks of a tool kit from a task file (`<kit>:PATH`, `tool_task_file`): `sample` draws the
    "train" records with replacement; `eval_set` / `heldout` take the "eval" records in file
    order (cycled to n), or the "train" records where the file marks none "eval"."""
    name: str
    train: tuple
    held: tuple

    def sample(self, n: int, seed) -> list[TaskSpec]:
        rng = random.Random(derive_seed("tool-task-file", self.name, seed))
        return [self.train[rng.randrange(len(self.train))] for _ in range(n)]

    def eval_set(self, split: str = "eval", n=None, seed: int = 0) -> list[TaskSpec]:
        pool = self.held or self.train
        return [pool[i % len(pool)] for i in range(len(pool) if n is None else n)]

    def heldout(self, n: int, seed: int) -> list[TaskSpec]:
        return self.eval_set("eval", n, seed)


def tool_task_file(path: str, env: ToolEnvironment, name: str, *, user_message=None,
                   max_record_bytes: Optional[int] = None) -> FileTasks:
    """The tasks of a tool-environment task file: JSONL (or Parquet with the same columns), one
    task a record:

        {"snapshot": {...}, "user": "the task in words", "split": "train", "task_id": "t1"}

    `snapshot` (required): what the environment's `reset` takes (it is reset once here, so a
    snapshot it refuses is a bad record); `user` (a string) or `messages` (the conversation's
    start, OpenAI form, ending with the user turn): the task's message, optional where the kit
    derives it from the snapshot (`user_message`, the built-in kits); `split`: "train"
    (default) or "eval"; `task_id`: optional (default `<kit>-<file>-<line>`), unique. Every bad
    record is reported with its line (JSONL) or row (Parquet) in one `TaskFileError`."""
    from rlvr.tasks import files  # noqa: PLC0415
    from rlvr.tasks.loader import MAX_RECORD_BYTES, LineError, TaskFileError  # noqa: PLC0415

    rows, errors, unit = files.read_rows(path, max_record_bytes or MAX_RECORD_BYTES)
    base = os.path.basename(path)
    out = {s: [] for s in SPLITS}
    seen: dict = {}
    for line, rec in rows:
        def bad(field, msg):
            errors.append(LineError(line, field, msg))
        if not isinstance(rec, Mapping):
            bad("<record>", f"a record is a JSON object, got {type(rec).__name__}")
            continue
        extra = sorted(set(rec) - {"snapshot", "user", "messages", "split", "task_id"})
        if extra:
            bad(extra[0], "unknown field (allowed: snapshot, user, messages, split, task_id)")
            continue
        snap = rec.get("snapshot")
        if not isinstance(snap, Mapping):
            bad("snapshot", "required: an object, what the environment's reset takes")
            continue
        try:
            env.reset(copy.deepcopy(dict(snap)))
        except Exception as e:  # the user's reset refuses it: a bad record, named
            bad("snapshot", f"the environment's reset refuses it: {type(e).__name__}: {e}")
            continue
        split = rec.get("split", "train")
        if split not in SPLITS:
            bad("split", f"must be one of {', '.join(SPLITS)}, got {split!r}")
            continue
        user, msgs = rec.get("user"), rec.get("messages")
        if user is not None and not isinstance(user, str):
            bad("user", f"must be a string, got {type(user).__name__}")
            continue
        if msgs is not None and (not isinstance(msgs, list) or not msgs or any(
                not isinstance(m, Mapping) or "role" not in m for m in msgs)
                or msgs[-1].get("role") != "user"):
            bad("messages", "must be a list of messages with roles, ending with the user turn")
            continue
        if user is None and msgs is None and user_message is None:
            bad("user", f"required: tool kit {name!r} does not derive a task's message from "
                        f"its snapshot")
            continue
        tid = rec.get("task_id", f"{name}-{base}-{line}")
        if not isinstance(tid, str) or not tid:
            bad("task_id", f"must be a non-empty string, got {tid!r}")
            continue
        if tid in seen:
            bad("task_id", f"{tid!r} repeats the task of {unit} {seen[tid]}")
            continue
        seen[tid] = line
        meta = {"split": split, "record": line}
        if msgs is not None:
            meta["messages"] = [dict(m) for m in msgs]
        elif user is not None:
            meta["user"] = user
        out[split].append(TaskSpec(
            task_id=tid, prompt="", task_type="agent", reference_answer=None,
            public_metadata=meta, hidden_verifier_id=None, environment_snapshot=dict(snap),
            resource_limits={}, reward_config={}, random_seed=derive_seed(name, path, line)))
    if not errors and not out["train"]:
        errors.append(LineError(0, "split", "no train record", whole_file=True))
    if errors:
        raise TaskFileError(path, errors, unit)
    return FileTasks(name, tuple(out["train"]), tuple(out["eval"]))


# ------------------------------------------------------------------------------------ kits
@dataclasses.dataclass(frozen=True)
class NoTasks:
    """The source of a tool kit without a task generator: its tasks come from
    `agent.trajectories` only."""
    name: str

    def _refuse(self, *a, **k):
        raise ValueError(f"task kit {self.name!r} has no task generator: set agent.trajectories "
                         f"to a trajectories file (its records are the tasks)")

    sample = eval_set = heldout = _refuse


def _file_kit(name: str, env: ToolEnvironment, user_message, oracle):
    """The builder of the prefix family `<name>:PATH`: the tool kit `name` with its tasks from
    the task file PATH (`tool_task_file`). `difficulty` (task.kwargs shared with generated
    kits) does not apply to file tasks and is ignored."""
    def build(path: str, *, max_record_bytes: Optional[int] = None, difficulty: Any = None):
        src = tool_task_file(path, env, name, user_message=user_message,
                             max_record_bytes=max_record_bytes)
        return _tool_kit(name, env, src, user_message or (lambda t: ""), oracle)
    return build


def _tool_kit(name: str, env: ToolEnvironment, source, user_message, oracle, binding=None,
              trajectories: str = ""):
    from rlvr.tasks.kit import TaskKit  # noqa: PLC0415

    chat_source = ChatTasks(source, binding, user_message)
    if trajectories:
        tasks = trajectory_tasks(trajectories, env, name)
        chat_source = TrajectoryTasks(name, tuple(chat_source._chat(t) for t in tasks),
                                      fallback=None if isinstance(source, NoTasks) else chat_source)
    elif binding is not None and isinstance(source, NoTasks):
        source._refuse()

    def demo(task):
        if binding is None:
            raise RuntimeError(f"task kit {name!r} is not bound to a tokenizer")
        assistant = task.public_metadata.get("demo")
        if assistant is None:
            if oracle is None:
                raise ValueError(f"task kit {name!r}: task {task.task_id!r} has no "
                                 f"demonstration (no recorded turns and no oracle)")
            assistant = oracle(task)
        return demonstration(binding, env, task, assistant)

    def render_episode(task, turns):
        return task.prompt + "".join(t.action + t.observation for t in turns)

    def rebind(tokenizer, *, tool_format: str = "auto", trajectories: str = "",
               system_prompt: str = ""):
        b = bind(tokenizer, env, tool_format, system_prompt)
        return _tool_kit(name, env, source, user_message, oracle, b, trajectories)

    return TaskKit(
        name=name, source=chat_source, verifier=ToolOutcomeVerifier(env), demonstration=demo,
        alphabet=None, env_factory=lambda: ToolChatEnv(binding, env),
        turn_verifiers={m: ToolTurnVerifier(binding, env, m) for m in tv.MODES},
        render_episode=render_episode,
        action_terminator=binding.eot_text if binding else "<|im_end|>",
        bind_tokenizer=rebind)


def kv_tools_kit(difficulty: str = "easy"):
    """The key-value environment as a tool kit (`task.names = ("kv_tools",)`): the `kv_agent`
    tasks (difficulty "easy" | "medium" | "hard") through the tools of `rlvr.agents.kv_tools`."""
    from rlvr.agents import kv_tools  # noqa: PLC0415
    from rlvr.tasks import kv_agent  # noqa: PLC0415

    source = kv_agent.KVSource(difficulty)
    return _tool_kit("kv_tools", kv_tools.ENVIRONMENT, source,
                     lambda t: kv_tools.task_message(_state_of(t)), _kv_oracle)


def register_tool_kit(name: str, environment: ToolEnvironment, *, source=None,
                      user_message=None, oracle=None) -> None:
    """Registers a tool kit under `name` (`task.names = (name,)`) for a user's own
    `ToolEnvironment`.

    Without `source` the tasks are the records of `agent.trajectories` (each needs the
    `snapshot` its `environment.reset` takes). With `source` (an object with `sample(n, seed)`,
    and `heldout(n, seed)` or `eval_set(split, n, seed)`, returning TaskSpecs whose
    `environment_snapshot` is what `environment.reset` takes), `user_message(task) -> str` gives
    each task's user message and `oracle(task) -> [assistant messages]` its demonstration
    (OpenAI form with `tool_calls`; None: no demonstrations). Either way `task.names =
    ("<name>:PATH",)` takes the tasks from a task file of snapshots (`tool_task_file`)."""
    from rlvr.tasks.kit import register_kit  # noqa: PLC0415

    if source is not None and user_message is None:
        raise ValueError(f"register_tool_kit({name!r}): a task source needs user_message")
    src = source if source is not None else NoTasks(name)
    register_kit(name, lambda: _tool_kit(name, environment, src, user_message, oracle))
    register_kit(name + ":", _file_kit(name, environment, user_message, oracle))
    if name not in TOOL_KITS:
        TOOL_KITS.append(name)


def _shop_oracle(task: TaskSpec) -> list[dict]:
    state = _state_of(task)
    msgs, i = [], 0
    for name, args in ([("get_price", {"item": k}) for k, _ in state["order"]]
                       + [("add_to_cart", {"item": k, "quantity": int(q)})
                          for k, q in state["order"]]
                       + [("pay", {"amount": int(state["total"])})]):
        msgs.append({"role": "assistant", "content": "",
                     "tool_calls": [ToolCall(name, args).to_message(f"c{i}")]})
        i += 1
    return msgs


def shop_tools_kit(difficulty: str = "standard"):
    """The checkout environment as a tool kit (`task.names = ("shop_tools",)`): the `shop`
    tasks through the tools of `rlvr.agents.shop_tools` (`get_price`, `add_to_cart`, `pay`;
    paying ends the episode)."""
    from rlvr.agents import shop_tools  # noqa: PLC0415
    from rlvr.tasks import shop  # noqa: PLC0415

    return _tool_kit("shop_tools", shop_tools.ENVIRONMENT, shop.ShopSource(difficulty),
                     lambda t: shop_tools.task_message(_state_of(t)),
                     _shop_oracle)


def _register():
    from rlvr.tasks.kit import register_kit  # noqa: PLC0415

    from rlvr.agents import kv_tools, shop_tools  # noqa: PLC0415

    register_kit("kv_tools", kv_tools_kit)
    register_kit("shop_tools", shop_tools_kit)
    register_kit("kv_tools:", _file_kit("kv_tools", kv_tools.ENVIRONMENT,
                                        lambda t: kv_tools.task_message(_state_of(t)), _kv_oracle))
    register_kit("shop_tools:", _file_kit(
        "shop_tools", shop_tools.ENVIRONMENT, lambda t: shop_tools.task_message(_state_of(t)),
        _shop_oracle))


_register()
