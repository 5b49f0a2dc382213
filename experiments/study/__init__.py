"""The PivotRL / SAO study on the checkout testbed (`experiments/STUDY.md`).

  arms     the study's configs: one base (task pool, model, warm start, evaluation, KL, epochs,
           budgets) and one function per arm that changes only what the arm is about;
  runner   runs an arm for a seed through `rlvr.train.loop` (resumable work dirs, a run cache
           keyed by code version + config, the per-seed warm start exported as a Hugging Face
           folder that every arm starts from);
  stats    curves, tokens / wall-clock to a success level, seed-paired Student-t intervals, Holm correction;
  report   markdown tables, plots, readings written from the numbers.
"""
