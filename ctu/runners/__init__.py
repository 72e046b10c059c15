"""Runners: a validated spec in, a training run out. `skyrl` (GPU clusters) and `tinker` (any Tinker API
server; SkyRL's local JAX server on CPU) share the generator, environment, rewards, judges and trackers."""
