"""Rollouts: the agent loop (written once), its samplers, token accounting, rewards and trajectory logs.

Importing this package's modules may import torch or skyrl (the generator subclasses SkyRL's
`GeneratorInterface`); the spec and the CLI's light commands never import it.
"""
