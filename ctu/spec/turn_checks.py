"""The spec's checks of how the policy's turns are written and trained: native tool calling's model family, a
thinking model's chat template, and the trajectory a template that drops earlier reasoning needs (`ctu.spec.checks`
runs them with the rest)."""

from __future__ import annotations

from collections.abc import Iterator

from ctu.errors import CtuError
from ctu.spec.errors import SpecIssue
from ctu.spec.model_family import NATIVE_TOOL_PARSERS, THINKING_FAMILIES, model_family
from ctu.spec.models import Spec


def check_native_tool_calling(spec: Spec) -> Iterator[SpecIssue]:
    """Native tool calling needs a model family whose tool-call format vLLM can parse."""
    if spec.rollout.native_tool_calling:
        family = model_family(spec)
        if family not in NATIVE_TOOL_PARSERS:
            known = ", ".join(sorted(NATIVE_TOOL_PARSERS))
            yield SpecIssue(
                "rollout.native_tool_calling",
                f"needs a model family with a known tool-call parser ({known}); model {spec.model.path!r} is "
                f"family {family!r}: set model.family, or use a text parser",
            )


def check_thinking(spec: Spec) -> Iterator[SpecIssue]:
    """Warn when a thinking model (Qwen3) runs without a policy that either disables thinking or keeps its reasoning
    out of later prompts (`qwen3_thinking`) (a warning)."""
    family = model_family(spec)
    if family in THINKING_FAMILIES and spec.model.chat_template.type != "qwen3_no_thinking" and not _thinks(spec):
        yield SpecIssue(
            "model.chat_template",
            f"{family} thinks by default; with chat template {spec.model.chat_template.type!r} every turn may "
            "start with <think> and burn the token budget. Use `qwen3_no_thinking` unless thinking is wanted",
        )


def _thinks(spec: Spec) -> bool:
    """Whether the spec's chat template keeps reasoning out of later prompts (`reasoning_splitter`)."""
    from ctu.components.chat_templates.base import reasoning_splitter

    try:
        return reasoning_splitter(spec.model.chat_template.factory) is not None
    except CtuError:  # no longer registered: the spec's own validation says so
        return False


def check_trajectory(spec: Spec) -> Iterator[SpecIssue]:
    """A template that drops earlier turns' reasoning trains turn by turn; a turn discount needs turns to discount."""
    rollout = spec.rollout
    if rollout.trajectory == "whole" and _thinks(spec):
        yield SpecIssue(
            "rollout.trajectory",
            f"chat template {spec.model.chat_template.type!r} leaves each turn's reasoning out of the later prompts, so "
            "one whole-episode sample would train every turn after the first on a context the policy never sampled "
            "from (with earlier reasoning in it): set rollout.trajectory: step_wise",
        )
    if rollout.trajectory == "whole" and rollout.turn_discount != 1.0:
        yield SpecIssue("rollout.turn_discount", "discounts the turns of step_wise trajectories: set rollout.trajectory: "
                                                 "step_wise, or leave it at 1.0")
