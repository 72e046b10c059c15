"""What an ``eval.json`` holds, as the commands that read one back need it (`ctu compare`, `ctu view`, `ctu eval
--regrade`): its figures' types and bounds, checked once where it is read (`check_result`), so that a result edited,
truncated or written by something else is refused with what is wrong, never met by a traceback later.

Figures may hold more than this names (kept as they are); a figure over no episode is absent (`figures`).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, ValidationError, field_validator

Share = Annotated[float, Field(ge=0.0, le=1.0)]
"""A rate over episodes or turns' outcomes: 0 to 1."""


class Figures(BaseModel):
    """One group's figures (`ctu.evaluation.report.figures`)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    episodes: NonNegativeInt
    infra_errors: NonNegativeInt = 0
    average_reward: float | None = None
    outcome_reward: float | None = None
    success_rate: Share | None = None
    pass_k: dict[str, Share] = Field(default_factory=dict, alias="pass^k")
    terminations: dict[str, Share] = Field(default_factory=dict)
    tool_error_rate: float | None = Field(None, ge=0.0)
    parse_failure_rate: float | None = Field(None, ge=0.0)
    turns_per_episode: float | None = Field(None, ge=0.0)
    policy_tokens_per_episode: float | None = Field(None, ge=0.0)
    user_faults: NonNegativeInt | None = None
    success_rate_without_faults: Share | None = None
    success_rate_tau2: Share | None = None
    user_fault_retries: NonNegativeInt | None = None
    by_task: dict[str, tuple[NonNegativeInt, NonNegativeInt]] | None = None
    """``{"domain/task_id": [successes, trials]}``."""

    @field_validator("pass_k")
    @classmethod
    def _k_is_a_number(cls, value: dict[str, float]) -> dict[str, float]:
        bad = [k for k in value if not k.isdigit() or int(k) < 1]
        if bad:
            raise ValueError(f"pass^k's k must be a count of 1 or more, not {bad[0]!r}")
        return value

    @field_validator("by_task")
    @classmethod
    def _successes_within_trials(cls, value: dict[str, tuple[int, int]] | None) -> dict[str, tuple[int, int]] | None:
        bad = [task for task, (successes, trials) in (value or {}).items() if successes > trials]
        if bad:
            raise ValueError(f"task {bad[0]!r} has more successes than trials")
        return value


class TestSetSource(BaseModel):
    """Where a test set's tasks came from, and which they were."""

    model_config = ConfigDict(extra="allow")

    tasks_sha256: str | None = None
    task_ids: list[str] | None = None
    task_scenarios: dict[str, str] | None = None


class EvaluationResult(BaseModel):
    """An ``eval.json``."""

    model_config = ConfigDict(extra="allow")

    policy: str
    spec: str = ""
    samples_per_task: PositiveInt = 1
    by_test_set: dict[str, Figures]
    overall: Figures
    test_set_sources: dict[str, TestSetSource] = Field(default_factory=dict)


def check_result(data: object) -> str | None:
    """What keeps `data` (a parsed ``eval.json``) from being an evaluation result, said with where (the first
    problem: ``by_test_set.retail.success_rate: ...``); None when it is one."""
    try:
        EvaluationResult.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the file"
        return f"{where}: {first['msg']}"
    return None
