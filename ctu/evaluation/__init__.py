"""`ctu eval`: a policy on a spec's test sets, scored as tau2 scores it, with pass^k, per test set and overall.

- `policies`: which policy answers (an OpenAI-compatible endpoint, a Tinker checkpoint or a run directory's
  latest, or the spec's own model served by a local Tinker server) and the sampler over it.
- `runner`: the evaluation itself, through the same environment, user simulator, parser, chat template and
  evaluation reward chain as training; bounded concurrency, progress, and resume from the trajectories file.
- `report`: the figures (`summarize`), the table, ``eval.json``, the plot, and `ctu compare`.
"""
