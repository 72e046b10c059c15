"""Metric trackers: `log(metrics, step)` with one step counter, an explicit `finish()`, several at once."""

from ctu.components.trackers import builtin as builtin  # registers the built-in trackers
from ctu.components.trackers.base import Tracker

__all__ = ["Tracker"]
