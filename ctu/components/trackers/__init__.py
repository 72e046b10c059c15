"""Metric trackers: `log(metrics, step)` with one step counter, an explicit `finish()`, several at once."""

from ctu.components.trackers import console as console  # registers "console"
from ctu.components.trackers import jsonl as jsonl  # registers "jsonl"
from ctu.components.trackers import tensorboard as tensorboard  # registers "tensorboard"
from ctu.components.trackers import wandb as wandb  # registers "wandb"
from ctu.components.trackers.base import Tracker
from ctu.components.trackers.combined import Trackers

__all__ = ["Tracker", "Trackers"]
