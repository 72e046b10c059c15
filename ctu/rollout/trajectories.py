"""Trajectory logs: full conversations as JSONL, every evaluation and a sample of training every N steps.

Files: ``<run_dir>/trajectories/<phase>_step<NNNNNN>.jsonl``, one line per trajectory. A step's file is written
whole by the process that runs the step: its first batch starts the file, a file of the step written before (by the
run a resume replays the step of) set aside under ``superseded/`` first (`ctu.output_folders.set_aside`: never
duplicated, never deleted), later batches of the same step append (evaluation runs in `eval_batch_size` batches; dynamic
sampling and the fully async trainer make several batches of one training step).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, StrictFloat, StrictInt, StrictStr, ValidationError

if TYPE_CHECKING:
    from ctu.rollout.records import TrajectoryRecord


class _Shape(BaseModel):
    model_config = ConfigDict(extra="allow")


class _Function(_Shape):
    name: StrictStr
    arguments: StrictStr | dict[str, object]


class _ToolCall(_Shape):
    id: StrictStr | None = None
    function: _Function


class _Message(_Shape):
    role: StrictStr
    content: StrictStr | None = None
    tool_call_id: StrictStr | None = None
    tool_calls: list[_ToolCall] | None = None


class _EpisodeLine(_Shape):
    domain: StrictStr = ""
    task_id: StrictStr | StrictInt
    raw_reward: StrictFloat | StrictInt
    infra_error: StrictStr | None = None
    messages: list[_Message] = []


def is_episode_line(line: object) -> bool:
    """Whether a trajectory file's parsed line is an episode as `trajectory_line` writes it, as far as its readers
    (`ctu view`, `ctu data sft --from-eval`) read it: a mapping with a task id (text or a whole number), tau2's reward
    (a number), a domain and an infrastructure error (text, when there), and OpenAI-format messages (each a mapping
    with a text role, text or null content, tool calls with a text name and text or mapping arguments). Readers skip
    any other line (edited by hand, or another program's), as they skip a line cut short."""
    try:
        _EpisodeLine.model_validate(line)
    except ValidationError:
        return False
    return True


def trajectory_line(record: TrajectoryRecord, phase: str, step: int) -> dict[str, object]:
    """One record as a JSON-ready mapping: OpenAI-format messages (with tool calls and tool results; in text mode
    each tool-calling turn's parsed calls beside its raw text, `logged_messages`), reward,
    tau2's reward, the fraction of each kind of its checks passed and the gold actions it missed, domain, task id, turns (the episode's, and the policy's with their generated tokens),
    termination, tool errors, parse failures and empty turns, errors (with `infra_error`: why the episode was left out
    of training, or None), the judge's verdict if any, and the user fault (``"<detector>: <what it saw>"``, its
    detector as ``user_fault_kind``) with the replays it cost (``user_fault_retries``); under a thinking template
    what each policy turn reasoned (``reasoning``, never in the messages), and for a step-wise training episode each
    turn sample's prompt and response lengths in tokens (``turn_samples``)."""
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
        "failed_actions": result.failed_actions,
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
        "evaluator_fault": result.evaluator_fault,
        "error": record.error,
        "infra_error": record.infra_error,
        "user_fault": None if record.user_fault is None else str(record.user_fault),
        "user_fault_kind": None if record.user_fault is None else record.user_fault.kind,
        "user_fault_retries": record.user_fault_retries,
        "reasoning": record.reasoning,
        "off_template_turns": record.off_template_turns,
        "turn_samples": [[len(sample.prompt_ids), len(sample.response_ids)] for sample in record.turn_samples],
        "messages": logged_messages(result.conversation, result.parsed_turns),
    }


def logged_messages(conversation: list[dict[str, object]], parsed_turns: dict[int, dict[str, object]]) -> list[dict[str, object]]:
    """`conversation` as a trajectory line holds it: in text mode each assistant turn holding a tool call keeps its
    raw text as `content` and gets a ``parsed`` entry beside it, ``{"tool_calls": [OpenAI tool calls (id, function
    name, JSON arguments)], "parse_errors": [the parser's reasons]}`` (`EpisodeResult.parsed_turns`), so a reader asks
    which tool a text-mode policy called without parsing its text. What reads the messages back as a conversation
    (`ctu data sft --from-eval`) drops ``parsed`` (`conversation_of`); lines written before it have none."""
    return [{**message, "parsed": parsed_turns[index]} if index in parsed_turns else message
            for index, message in enumerate(conversation)]


def conversation_of(messages: list[dict[str, object]]) -> list[dict[str, object]]:
    """A trajectory line's messages as the conversation the policy saw (each ``parsed`` entry dropped)."""
    return [{key: value for key, value in message.items() if key != "parsed"} for message in messages]


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
        self._written: dict[Path, int] = {}
        """Lines this logger wrote to each file: a file it has not written yet is started anew (an older one set
        aside), else appended to."""

    def __call__(self, records: list[TrajectoryRecord], phase: str, step: int) -> Path | None:
        """Log `records` of `phase` at `step` (training: a seeded sample, `train_samples` a step over all its batches);
        returns the file written, if any."""
        path = self.folder / f"{phase}_step{step:06d}.jsonl"
        written = self._written.get(path)
        if phase == "train":
            budget = self.train_samples - (written or 0)
            if not self.every_n_steps or step % self.every_n_steps or budget <= 0:
                return None
            chosen = random.Random(self.seed * 1_000_003 + step * 1_009 + (written or 0)).sample(
                range(len(records)), min(budget, len(records)))
            records = [records[i] for i in sorted(chosen)]
        self.folder.mkdir(parents=True, exist_ok=True)
        if written is None and path.exists():
            from ctu.output_folders import set_aside

            set_aside(self.folder.parent, str(path.relative_to(self.folder.parent)))
        from ctu.redaction import scrub

        with path.open("a" if written is not None else "w", encoding="utf-8") as handle:
            for record in records:
                handle.write(scrub(json.dumps(trajectory_line(record, phase, step), ensure_ascii=False)) + "\n")
        self._written[path] = (written or 0) + len(records)
        return path
