"""The `skyrl` backend: the spec resolved into SkyRL's config (`config`), checked before Ray starts
(`preflight`), and run as SkyRL's `BasePPOExp` with ctu's generator and trackers (`experiment`), sampling through
SkyRL's inference client (`sampler`). Importing this package imports neither SkyRL nor Ray.
"""
