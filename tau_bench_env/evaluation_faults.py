"""Whose fault an exception raised while scoring an episode is: the policy's, or something outside its episode.

tau2 26.3 scores an episode whose evaluation raised as a failure: `tau2.run.run_task` re-raises the exception, or
with ``skip_failed_samples`` keeps the simulation with reward 0.0 in every average and in pass^k
(`tau2.metrics.agent_metrics.compute_metrics`). Most such exceptions come from the episode's own final state: an
environment assertion on an entity the policy never created (mock's ``assert_task_status`` on a task that does not
exist raises ``ValueError: Task task_2 not found``), a check on a record the policy deleted. Those are the policy's
failures: reward 0, trained on and counted in every success rate, as tau2 counts them.

Only a fault outside the policy's episode is an infrastructure error (left out of training and of every figure):

- tau2's natural-language assertion judge, an LLM call (`tau2.evaluator.evaluator_nl_assertions`, through
  `tau2.utils.llm_utils` and litellm), failed;
- the task's gold outcome could not be computed (`GoldOutcomeError`: the fast path's gold state, from the task's
  initial state and gold actions alone; ``ctu tasks check`` finds such tasks before a run);
- the task's reward basis holds NL assertions and the run does not evaluate them (`unevaluated_basis`): every
  episode of the task would raise, whatever the policy did.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tau2.data_model.tasks import Task

JUDGE_MODULES = ("tau2.evaluator.evaluator_nl_assertions", "tau2.utils.llm_utils", "litellm")
"""Modules whose frames in a traceback mean the exception came from tau2's LLM judge of NL assertions."""


class GoldOutcomeError(RuntimeError):
    """The task's gold final state could not be computed (its initial state or environment raised): a fault of the
    task or the domain, not of any episode of it."""


def unevaluated_basis(task: Task, nl_assertions: bool) -> str | None:
    """Why no episode of `task` can be scored when NL assertions are `nl_assertions` (evaluated or not), else None.

    tau2's `evaluate_simulation` raises ``ValueError`` for such a task on every episode; this names it before
    the evaluator runs.
    """
    from tau2.data_model.tasks import RewardType

    criteria = task.evaluation_criteria
    if nl_assertions or criteria is None or RewardType.NL_ASSERTION not in criteria.reward_basis:
        return None
    return ("the task's reward basis holds NL assertions, which need tau2's LLM judge "
            "(environment.evaluate_nl_assertions: true)")


def outside_fault(exc: BaseException) -> str | None:
    """Why `exc`, raised while scoring an episode, is not the policy's fault (an infrastructure error), or None when it
    is the policy's failure (the module docstring says which is which).

    Returns:
        ``"NL-assertion judge: <exception>"`` when it came from tau2's LLM judge, ``"gold outcome: <exception>"``
        for a `GoldOutcomeError`; None otherwise.
    """
    if isinstance(exc, GoldOutcomeError):
        return f"gold outcome: {describe(exc.__cause__ or exc)}"
    traceback = exc.__traceback__
    while traceback is not None:
        module = str(traceback.tb_frame.f_globals.get("__name__", ""))
        if any(module == name or module.startswith(name + ".") for name in JUDGE_MODULES):
            return f"NL-assertion judge: {describe(exc)}"
        traceback = traceback.tb_next
    return None


def describe(exc: BaseException) -> str:
    """``"<ExceptionType>: <message>"``, as episodes record an exception."""
    return f"{type(exc).__name__}: {exc}"
