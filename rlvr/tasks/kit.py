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
    """The kit of `config.task`: one name, or a weighted mixture of single-turn kits, or of
    multi-turn kits (`rlvr.tasks.episode_mixture`; docs/algorithms.md (A.20)).

    `kwargs` go to every named kit's builder (a mixture's kits must accept them all).
    """
    kwargs = dict(kwargs or {})
    names = list(names)
    if not names:
        raise ValueError("task.names must name at least one task kit")
    kits = [get_kit(n, **kwargs) for n in names]
    if len(kits) == 1:
        return kits[0]
    if any(k.multi_turn for k in kits):  # episodes routed by environment
        from rlvr.tasks.episode_mixture import episode_mixture_kit

        return episode_mixture_kit(kits, weights)
    from rlvr.tasks.registry import MixtureSource

    weights = list(weights) or [1.0] * len(kits)
    source = MixtureSource([(k.source, float(w)) for k, w in zip(kits, weights)])
    alphabets = [k.alphabet for k in kits]
    alphabet = None if any(a is None for a in alphabets) else "".join(sorted(set("".join(alphabets))))
    return TaskKit(name=source.name, source=source, verifier=source.verifier,
                   demonstration=source.demonstration, alphabet=alphabet)


def _load_builtin() -> None:
    """Registers the built-in kits on first use (keeps `import rlvr.tasks.kit` light)."""
    global _BUILTIN_LOADED
    if _BUILTIN_LOADED:
        return
    _BUILTIN_LOADED = True
    from rlvr.tasks import (episode_files, files, kv_agent, registry, shop,  # noqa: F401
                            tool_agent)  # (their imports register the kits)


_BUILTIN_LOADED = False
