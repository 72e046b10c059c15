"""Rollouts: ctu's rollout contract (`ctu.rollout.records.Rollout`: a batch of tasks in, `TrajectoryRecord`s out),
the agent loop behind it (written once), its samplers, token accounting and trajectory logs.

Nothing here imports a trainer's types (the SkyRL backend's adapter, `SkyRLGenerator`, is in `ctu.backends`); the
spec and the CLI's light commands never import this package.
"""
