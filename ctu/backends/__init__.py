"""The built-in training backends, components of the `backends` kind (`ctu.runners.backend.Backend`): `skyrl` (GPU
clusters: Ray, vLLM, FSDP) and `tinker` (any Tinker API server; SkyRL's local JAX server on CPU). Each package's
`backend` module is the registered component, light enough for `ctu validate` (its `Params` and spec rules); the
rest of the package runs the training. They sit above `ctu.runners` (the backend-neutral commands) and share its
GRPO arithmetic, run directory and console, and ctu's rollout contract (`ctu.rollout`)."""
