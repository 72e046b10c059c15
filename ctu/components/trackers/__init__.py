"""Metric trackers: `log(metrics, step)` with one step counter, an explicit `finish()`, several at once."""

from ctu.components.trackers.base import Tracker
from ctu.components.trackers.combined import Trackers

__all__ = ["Tracker", "Trackers"]
