"""The `skyrl` backend: the spec resolved into SkyRL's config (`config`), checked before Ray starts
(`preflight`), the Ray cluster joined or started with the workers in the driver's environment and checked node by
node (`cluster`), and run as SkyRL's `BasePPOExp` with ctu's generator and trackers (`experiment`), sampling through
SkyRL's inference client (`sampler`); an SFT spec runs SkyRL's `SFTTrainer` instead (`sft`, `sft_experiment`).
Importing this package imports neither SkyRL nor Ray.
"""
