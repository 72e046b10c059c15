"""SkyRL's `SFTTrainer` as ctu runs it on Ray: ctu's trackers instead of SkyRL's (the run's metrics file, the
console table, wandb), the step's figures under ctu's names, and SkyRL's and the libraries' logs in the run's log
file. Run by `ctu.backends.skyrl.sft.sft_main` in the run's Ray entrypoint.

Imported only there, once the libraries' logs are routed (it imports torch and skyrl's SFT trainer, whose import
logs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from skyrl.train.sft_trainer import SFTTrainer

from ctu.backends.skyrl.experiment import CtuTracking
from ctu.backends.skyrl.exports import policy_export, untie_export_config
from ctu.composition import build_components
from ctu.metrics import TRAIN, metric
from ctu.spec import Spec, spec_to_dict

SKYRL_NAMES = {
    "train/loss": metric(TRAIN, "sft_loss_per_token"),
    "train/actual_num_tokens": metric(TRAIN, "sft_tokens_seen"),
}
"""SkyRL's SFT figures that the tinker backend's SFT logs under another name (SkyRL's ``train/loss`` is the mean
over the step's trained tokens: its collator scales the loss mask by one over their count; its token count is of
every real token of the step, prompt included). The trained tokens, ``train/sft_tokens``, SkyRL does not log:
`CtuSFTTrainer.train_step` counts them."""


class CtuSFTTrainer(SFTTrainer):
    """`SFTTrainer` that logs through ctu's trackers (`CtuTracking`), started in the run directory with the spec
    (dropping the lines of steps after `resume_step` first), renames `SKYRL_NAMES`, adds each step's trained
    tokens, and makes its exports' configs say what they hold (`ctu.backends.skyrl.exports`)."""

    def __init__(self, config: Any, skyrl_config: Any, spec: Spec, run_dir: Path, resume_step: int | None) -> None:
        super().__init__(config, skyrl_cfg=skyrl_config)
        self.spec, self.run_dir, self.resume_step = spec, run_dir, resume_step

    def _init_tracker(self) -> None:
        components = build_components(self.spec)
        trackers = components.trackers
        trackers.start(self.run_dir, self.spec.experiment.name, components.project, spec_to_dict(self.spec),
                       resume_step=self.resume_step, tags=self.spec.experiment.tags)
        self.tracker = _RenamingTracking(trackers)

    def train_step(self, batch: Any, step: int) -> dict:
        """SkyRL's step; also counts its trained tokens (the loss mask's positive entries, as SkyRL's own evaluation
        counts them: padded rows have none), logged with the step as ``train/sft_tokens``."""
        result = super().train_step(batch, step)
        self.tracker.trained_tokens = int((batch["loss_mask"] > 0).sum().item())
        return result

    def save_hf_model(self) -> None:
        """SkyRL's Hugging Face export, its config made to say what it holds (`untie_export_config`)."""
        super().save_hf_model()
        untie_export_config(policy_export(self.cfg.trainer.export_path, self.global_step))


class _RenamingTracking(CtuTracking):
    trained_tokens: int | None = None
    """The last training step's trained tokens (`CtuSFTTrainer.train_step`), logged with that step's figures."""

    def log(self, data: dict[str, object], step: int, commit: bool = False) -> None:
        renamed = {SKYRL_NAMES.get(key, key): value for key, value in data.items()}
        if "train/loss" in data and self.trained_tokens is not None:
            renamed[metric(TRAIN, "sft_tokens")] = float(self.trained_tokens)
            self.trained_tokens = None
        super().log(renamed, step, commit)
