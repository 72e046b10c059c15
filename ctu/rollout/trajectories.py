"""Trajectory logs: full conversations as JSONL, every evaluation and a sample of training every N steps.

Files: ``<run_dir>/trajectories/<phase>_step<NNNNNN>.jsonl``, one line per trajectory. A step's file is
rewritten whole, so a resumed run that replays a step never duplicates its lines.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ctu.rollout.records import TrajectoryRecord


def trajectory_line(record: TrajectoryRecord, phase: str, step: int) -> dict[str, object]:
    """One record as a JSON-ready mapping: OpenAI-format messages (with tool calls and tool results), reward,
    tau2's reward and the fraction of each kind of its checks passed, domain, task id, turns (the episode's, and the policy's with their generated tokens),
    termination, tool errors, parse failures and empty turns, errors (with `infra_error`: why the episode was left out
    of training, or None), and the judge's verdict if any."""
    result = record.result
    return {
        "step": step,
        "phase": phase,
        "domain": result.domain,
        "task_id": result.task_id,
        "test_set": record.extras.get("test_set"),
        "reward": record.reward,
        "raw_reward": record.raw_reward,
        "reward_breakdown": result.reward_breakdown,
        "checks": result.checks,
        "reward_components": record.reward_metrics,
        "termination": result.termination,
        "turns": result.turns,
        "policy_turns": record.policy_turns,
        "policy_tokens": sum(record.loss_mask),
        "tool_errors": result.tool_errors,
        "parse_failures": result.parse_failures,
        "empty_turns": result.empty_turns,
        "stop_reason": record.stop_reason,
        "judge": record.verdict,
        "user_error": result.user_error,
        "evaluation_error": result.evaluation_error,
        "error": record.error,
        "infra_error": record.infra_error,
        "messages": result.conversation,
    }


class TrajectoryLogger:
    """Writes trajectory files for a run (see the module docstring).

    Args:
        run_dir: the run directory.
        every_n_steps: log training trajectories every this many steps (0: never).
        train_samples: how many training trajectories to log each time (a seeded sample).
        seed: the sample's seed (the run's seed).
    """

    def __init__(self, run_dir: Path, every_n_steps: int, train_samples: int, seed: int) -> None:
        self.folder = Path(run_dir) / "trajectories"
        self.every_n_steps = every_n_steps
        self.train_samples = train_samples
        self.seed = seed

    def __call__(self, records: list[TrajectoryRecord], phase: str, step: int) -> Path | None:
        """Log `records` of `phase` at `step`; returns the file written, if any."""
        if phase == "train":
            if not self.every_n_steps or step % self.every_n_steps or not self.train_samples:
                return None
            chosen = random.Random(self.seed * 1_000_003 + step).sample(range(len(records)), min(self.train_samples, len(records)))
            records = [records[i] for i in sorted(chosen)]
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{phase}_step{step:06d}.jsonl"
        with path.open("w", encoding="utf-8") as handle:
            for record in records:
                handle.write(json.dumps(trajectory_line(record, phase, step), ensure_ascii=False) + "\n")
        return path
