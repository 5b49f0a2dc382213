"""rlvr.tasks: verifiable task records and where they come from (docs/architecture.md §3).

  spec        TaskSpec (docs/architecture.md §3 fields), to_json / from_json with field-level validation
  loader      load_jsonl (one TaskFileError listing every bad line + field), write_jsonl
  splits      train / eval / unseen instance splits that never overlap (content-hash buckets)
  arithmetic  procedural "12+7*3=" → "33" tasks, difficulty knobs, ALPHABET, demonstration
  countdown   procedural "3,7,25:68=" → "25*3-7" tasks, difficulty knobs, ALPHABET, demonstration
  reasoning_gym  reasoning-gym generators as TaskSpecs (scored by verifiers.reasoning_gym)
  registry    get_task_source(name, **kw) → TaskSource; MixtureSource; RoutingVerifier
  shipped     small JSONL files in tasks/data/ (examples, fixed eval sets)

Submodules are imported on demand (reasoning-gym takes ~1 s to import).
"""
