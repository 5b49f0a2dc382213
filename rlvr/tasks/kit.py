"""Task kits: one registered bundle per task family (docs/architecture.md §2).

A `TaskKit` is everything the training loop needs to know about a task family, and nothing the
loop hard-codes:

  * `source`: where tasks come from (`sample(n, seed)` for training, held-out sets for eval);
  * `verifier`: the outcome verifier, `verify(task, output) -> Verdict`. For a single-turn task
    the output is the completion text; for a multi-turn task it is `episode_output(env)`, the
    canonical JSON of the environment's authoritative final state (never the transcript, docs/verifiers.md §2);
  * `env_factory`: a fresh `Environment` per episode (multi-turn kits only);
  * `turn_verifiers`: per-turn verifiers by name (PivotRL's functional reward R(s, a) = 1[a ∈
    M(s)], docs/algorithms.md §6, and the exact-match ablation), each a `Verifier` over a *turn task*
    (`turn_task`): the parent task with `environment_snapshot` = the `EnvSnapshot` before the
    action and `reference_answer` = the demonstration's action;
  * `demonstration(task)`: the oracle completion text (single-turn) or the list of `Turn`s of the
    oracle episode (multi-turn), for the SFT warm start and PivotRL's candidate states;
  * `render_episode(task, turns)`: the exact text the agent loop tokenises (prompt, then action +
    observation per turn), so a demonstration prefix equals what a rollout would see;
  * `alphabet`: the characters of every prompt, action and observation (char-level tokenizers);
  * `hidden_verifier`: an optional held-out verifier for the train-vs-hidden gap (docs/architecture.md §7);
  * `bind_tokenizer(tokenizer, **settings) -> TaskKit`: set by kits that render episodes with
    a tokenizer's chat template (tool kits, `rlvr.tasks.tool_agent`); the loop calls it with the
    run's Hugging Face tokenizer and uses the kit it returns.

Adding a task family is writing a kit builder and registering it (`register_kit`); nothing under
`rlvr/train` changes. `build_kit(names, weights, kwargs)` is what the loop calls with
`config.task.names / weights / kwargs`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Optional, Sequence

from rlvr.envs.base import EnvSnapshot, canonical_json
from rlvr.records.task import TaskSpec

KitBuilder = Callable[..., "TaskKit"]


@dataclasses.dataclass(frozen=True)
class TaskKit:
    """One task family (see the module docstring for each field)."""

    name: str
    source: Any
    verifier: Any
    demonstration: Optional[Callable[[TaskSpec], Any]] = None
    alphabet: Optional[str] = None
    env_factory: Optional[Callable[[], Any]] = None
    turn_verifiers: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    render_episode: Optional[Callable[[TaskSpec, Sequence[Any]], str]] = None
    action_terminator: str = "\n"
    hidden_verifier: Optional[Any] = None
    bind_tokenizer: Optional[Callable[..., "TaskKit"]] = None

    def __post_init__(self):
        if self.env_factory is not None and self.render_episode is None:
            raise ValueError(f"TaskKit {self.name!r}: a multi-turn kit (env_factory set) needs "
                             f"render_episode")

    @property
    def multi_turn(self) -> bool:
        """True for kits whose tasks are episodes in an environment."""
        return self.env_factory is not None

    def episode_output(self, env) -> str:
        """What the outcome verifier judges for an episode: the authoritative final state."""
        return canonical_json(env.state())

    def environment_version(self) -> str:
        """Version string of this kit's environment ("" for single-turn kits)."""
        if self.env_factory is None:
            return ""
        return str(getattr(self.env_factory(), "version", "0"))


def turn_task(task: TaskSpec, *, snapshot: EnvSnapshot, turn_index: int,
              reference_action: Optional[str], key: str) -> TaskSpec:
    """The task a turn verifier judges: `task` at the state before action `turn_index`.

    environment_snapshot = `snapshot.to_dict()` (the exact state, hash-checked on restore);
    reference_answer = the action the source trajectory took (used only by exact-match
    scoring, never a training label); public_metadata names the parent task and the turn.
    """
    return dataclasses.replace(
        task, task_id=key, reference_answer=reference_action,
        environment_snapshot=snapshot.to_dict(),
        public_metadata={**dict(task.public_metadata), "parent_task_id": task.task_id,
                         "turn_index": int(turn_index)})


def turn_snapshot(task: TaskSpec) -> EnvSnapshot:
    """The `EnvSnapshot` a turn task (`turn_task`) carries."""
    return EnvSnapshot.from_dict(task.environment_snapshot)


# ------------------------------------------------------------------------------- registry
_KITS: dict[str, KitBuilder] = {}


def register_kit(name: str, builder: KitBuilder) -> None:
    """Registers `builder(**kwargs) -> TaskKit` under `name`.

    A name ending in ":" is a prefix family: `"jsonl:"` serves `"jsonl:<path>"` and the builder
    receives the rest as its first argument (`builder(path, **kwargs)`).
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"register_kit: name must be a non-empty string, got {name!r}")
    _KITS[name] = builder


def registered_kits() -> tuple[str, ...]:
    """Registered kit names (prefix families end in ':')."""
    _load_builtin()
    return tuple(sorted(_KITS))


def get_kit(name: str, **kwargs: Any) -> TaskKit:
    """The kit registered under `name` built with `kwargs` (ValueError listing the names)."""
    _load_builtin()
    if not isinstance(name, str):
        raise ValueError(f"task name must be a string, one of {registered_kits()}; got {name!r}")
    if name in _KITS:
        return _KITS[name](**kwargs)
    prefix, sep, rest = name.partition(":")
    if sep and rest and prefix + ":" in _KITS:
        return _KITS[prefix + ":"](rest, **kwargs)
    shown = ", ".join(k + "<name>" if k.endswith(":") else k for k in registered_kits())
    raise ValueError(f"unknown task {name!r}; registered task kits: {shown}")


def build_kit(names: Sequence[str], weights: Sequence[float] = (), kwargs: Mapping[str, Any] = None
              ) -> TaskKit:
    """The kit of `config.task`: one name, or a weighted mixture (docs/algorithms.md (A.20)) of
    single-turn kits or of multi-turn kits (`multi_turn_mixture`); single-turn and multi-turn
    kits do not mix (ValueError naming both).

    `kwargs` go to every named kit's builder (a mixture's kits must accept them all).
    """
    kwargs = dict(kwargs or {})
    names = list(names)
    if not names:
        raise ValueError("task.names must name at least one task kit")
    kits = [get_kit(n, **kwargs) for n in names]
    if len(kits) == 1:
        return kits[0]
    multi = [k.name for k in kits if k.multi_turn]
    if multi and len(multi) < len(kits):
        single = [k.name for k in kits if not k.multi_turn]
        raise ValueError(f"task.names {tuple(names)}: a mixture holds single-turn kits or "
                         f"multi-turn kits, not both; {multi} are multi-turn and {single} "
                         f"single-turn (train them in separate runs)")
    if multi:
        return multi_turn_mixture(kits, list(weights) or [1.0] * len(kits))
    from rlvr.tasks.registry import MixtureSource

    weights = list(weights) or [1.0] * len(kits)
    source = MixtureSource([(k.source, float(w)) for k, w in zip(kits, weights)])
    alphabets = [k.alphabet for k in kits]
    alphabet = None if any(a is None for a in alphabets) else "".join(sorted(set("".join(alphabets))))
    return TaskKit(name=source.name, source=source, verifier=source.verifier,
                   demonstration=source.demonstration, alphabet=alphabet)


# ------------------------------------------------------------------- multi-turn mixtures
KIT_KEY = "kit"  # public_metadata key: the kit of a task in a multi-turn mixture


def _kit_of(task: TaskSpec, names: Sequence[str]) -> str:
    name = task.public_metadata.get(KIT_KEY)
    if name not in names:
        raise ValueError(f"task {task.task_id!r} names kit {name!r}, not one of this mixture's "
                         f"{tuple(names)}")
    return name


@dataclasses.dataclass(frozen=True)
class KitMixtureSource:
    """Tasks of several multi-turn kits, each tagged with its kit (`public_metadata["kit"]`).

    `sample(n, seed)` draws per-kit counts from a multinomial with the normalised weights and
    shuffles, so that episodes of different kits share a batch; `eval_set` / `heldout` split n
    by largest remainder (every kit gets its share of the held-out set)."""
    sources: tuple  # ((kit name, source), ...)
    weights: tuple

    @property
    def name(self) -> str:
        return "mixture(" + ",".join(f"{n}:{w:.3g}" for (n, _), w in
                                     zip(self.sources, self.weights)) + ")"

    @staticmethod
    def _tag(name, tasks):
        return [dataclasses.replace(t, public_metadata={**dict(t.public_metadata), KIT_KEY: name})
                for t in tasks]

    def sample(self, n: int, seed) -> list[TaskSpec]:
        import numpy as np  # noqa: PLC0415

        from rlvr.envs.base import derive_seed  # noqa: PLC0415

        rng = np.random.default_rng(derive_seed("kit-mixture", str(seed)))
        counts = rng.multinomial(n, np.asarray(self.weights))
        tasks: list[TaskSpec] = []
        for (name, src), c in zip(self.sources, counts):
            if c:
                tasks += self._tag(name, src.sample(int(c), seed=int(rng.integers(0, 2**62))))
        return [tasks[i] for i in rng.permutation(len(tasks))]

    def _counts(self, n: int) -> list[int]:
        from rlvr.tasks.registry import weight_counts  # noqa: PLC0415

        return weight_counts(n, self.weights)

    def eval_set(self, split: str = "eval", n=None, seed: int = 0) -> list[TaskSpec]:
        n = 100 if n is None else n
        out: list[TaskSpec] = []
        for (name, src), c in zip(self.sources, self._counts(n)):
            if c:
                get = getattr(src, "eval_set", None)
                got = get(split, c, seed) if get is not None else src.heldout(c, seed)
                out += self._tag(name, got)
        return out

    def heldout(self, n: int, seed: int) -> list[TaskSpec]:
        out: list[TaskSpec] = []
        for (name, src), c in zip(self.sources, self._counts(n)):
            if c:
                get = getattr(src, "heldout", None)
                got = get(c, seed) if get is not None else src.eval_set("eval", c, seed)
                out += self._tag(name, got)
        return out


class _RoutingVerifier:
    """Judges each task with its own kit's verifier (`public_metadata["kit"]`)."""

    def __init__(self, verifiers: Mapping[str, Any]):
        self.verifiers = dict(verifiers)
        self.version = "route(" + ",".join(f"{k}:{getattr(v, 'version', '?')}"
                                           for k, v in self.verifiers.items()) + ")"

    def verify(self, task: TaskSpec, output: str):
        return self.verifiers[_kit_of(task, tuple(self.verifiers))].verify(task, output)


class RoutingEnvironment:
    """The environment of a multi-turn mixture: `reset(task)` picks the task's kit's
    environment; `restore(snapshot)` the one whose name the snapshot carries; everything else
    is that environment's."""

    def __init__(self, factories: Mapping[str, Callable[[], Any]]):
        self.envs = {k: f() for k, f in factories.items()}
        self.by_env = {e.name: e for e in self.envs.values()}
        self.inner = next(iter(self.envs.values()))

    @property
    def name(self):
        return self.inner.name

    @property
    def version(self):
        return self.inner.version

    @property
    def done(self):
        return self.inner.done

    @property
    def seed(self):
        return self.inner.seed

    @property
    def busy_until(self) -> float:
        """When the current environment's last tool call completes (0: never busy), so the
        continuous scheduler steps a mixture's episodes as it steps a single kit's."""
        return float(getattr(self.inner, "busy_until", 0.0) or 0.0)

    def reset(self, task: TaskSpec, *, seed: int) -> str:
        self.inner = self.envs[_kit_of(task, tuple(self.envs))]
        return self.inner.reset(task, seed=seed)

    def restore(self, snapshot) -> None:
        if snapshot.env_name not in self.by_env:
            from rlvr.envs.base import SnapshotError  # noqa: PLC0415

            raise SnapshotError(f"snapshot is for {snapshot.env_name!r}, not one of this "
                                f"mixture's environments {tuple(self.by_env)}")
        self.inner = self.by_env[snapshot.env_name]
        self.inner.restore(snapshot)

    def step(self, action: str):
        return self.inner.step(action)

    def state(self) -> dict:
        return self.inner.state()

    def state_hash(self) -> str:
        return self.inner.state_hash()

    def snapshot(self):
        return self.inner.snapshot()


def multi_turn_mixture(kits: Sequence[TaskKit], weights: Sequence[float]) -> TaskKit:
    """A weighted mixture of multi-turn kits (module docstring of `build_kit`): each task
    carries its kit (`public_metadata["kit"]`); episodes of different kits share a batch; the
    environment, the outcome and turn verifiers, the demonstrations and the episode layout are
    each task's own kit's. The kits must end actions with the same terminator and have distinct
    environment names; a mixture of tool kits is bound to the tokenizer kit by kit."""
    names = [k.name for k in kits]
    if len(set(names)) != len(names):
        raise ValueError(f"task.names: a mixture names each kit once, got {tuple(names)}")
    for w in weights:
        if not isinstance(w, (int, float)) or isinstance(w, bool) or not w > 0:
            raise ValueError(f"task.weights must be > 0, got {tuple(weights)}")
    if len(weights) != len(kits):
        raise ValueError(f"task.weights: {len(weights)} weights for {len(kits)} task.names")
    terms = {k.name: k.action_terminator for k in kits}
    if len(set(terms.values())) > 1:
        raise ValueError(f"task.names: the kits of a multi-turn mixture must end actions with "
                         f"the same terminator, got {terms} (a tool kit, which renders with "
                         f"a chat template, mixes only with tool kits)")
    bound = [k.bind_tokenizer is not None for k in kits]
    if any(bound) and not all(bound):
        raise ValueError(f"task.names {tuple(names)}: tool kits (chat template) and "
                         f"character-level multi-turn kits do not mix")
    env_names = [k.env_factory().name for k in kits]
    if len(set(env_names)) != len(env_names):
        raise ValueError(f"task.names {tuple(names)}: the kits' environments must have distinct "
                         f"names, got {env_names}")
    total = float(sum(weights))
    by = {k.name: k for k in kits}
    route = lambda task: by[_kit_of(task, names)]  # noqa: E731
    modes = set.intersection(*(set(k.turn_verifiers) for k in kits))
    alphabets = [k.alphabet for k in kits]

    def rebind(tokenizer, **settings):
        if settings.get("trajectories"):
            raise ValueError(f"a trajectories file holds the records of one tool kit; the "
                             f"mixture {tuple(names)} takes its tasks from the kits' generators "
                             f"(leave agent.trajectories empty, or train one kit)")
        return multi_turn_mixture([k.bind_tokenizer(tokenizer, **settings) for k in kits], weights)

    def demo(task):
        k = route(task)
        if k.demonstration is None:
            raise ValueError(f"task kit {k.name!r} has no demonstrations")
        return k.demonstration(task)

    return TaskKit(
        name="mixture(" + ",".join(names) + ")",
        source=KitMixtureSource(tuple((k.name, k.source) for k in kits),
                                tuple(float(w) / total for w in weights)),
        verifier=_RoutingVerifier({k.name: k.verifier for k in kits}),
        demonstration=demo,
        alphabet=None if any(a is None for a in alphabets)
        else "".join(sorted(set("".join(alphabets)))),
        env_factory=lambda: RoutingEnvironment({k.name: k.env_factory for k in kits}),
        turn_verifiers={m: _RoutingVerifier({k.name: k.turn_verifiers[m] for k in kits})
                        for m in sorted(modes)},
        render_episode=lambda task, turns: route(task).render_episode(task, turns),
        action_terminator=kits[0].action_terminator,
        bind_tokenizer=rebind if all(bound) else None)


def _load_builtin() -> None:
    """Registers the built-in kits on first use (keeps `import rlvr.tasks.kit` light)."""
    global _BUILTIN_LOADED
    if _BUILTIN_LOADED:
        return
    _BUILTIN_LOADED = True
    from rlvr.tasks import (episode_files, files, kv_agent, registry, shop,  # noqa: F401
                            tool_agent)  # (their imports register the kits)


_BUILTIN_LOADED = False
